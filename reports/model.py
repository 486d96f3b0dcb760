"""Report data, prepared from a findings document before any template runs.

First screen: a verdict line and one row per affected GPU, soonest OOM first. Then one
section per GPU (the ranks of a tensor-parallel server share one), holding its findings,
evidence, remediation and one chart. Rates and times to OOM come from
analyzer.verdicts.gpu_verdicts, the same numbers the fleet page shows.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from analyzer.categories import CATEGORIES, SEVERITIES
from analyzer.findings import Finding, FindingsDocument, GpuSeries, RuleStatus, iso_not_after
from analyzer.outputs import data_span
from analyzer.progress import plural
from analyzer.verdicts import GpuVerdict, gpu_verdicts
from reports import charts
from reports.chartdata import build_spec
from reports.text import LogLine, _label, _merged_logs, first_remedy, format_value, options


@dataclass
class KV:
    key: str
    value: str


@dataclass
class Ref:
    text: str
    href: str  # empty: shown as text (only http(s) become links; a pack is not trusted)


def _ref(r: str) -> Ref:
    return Ref(r, r if re.match(r"https?://", r, re.I) else "")


@dataclass
class FindingView:
    anchor: str
    severity: str
    rule_id: str
    title: str
    category: str
    category_name: str
    where: str
    when: str
    summary: str
    evidence: list[KV]
    remediation: list[str]  # paragraphs
    options: list[str]  # A/B/C remedies with their costs, where the rule lists them
    references: list[Ref]


@dataclass
class GpuRow:
    host: str
    gpu: str
    anchor: str
    verdict: str
    severity: str
    leak: bool
    rate: str
    rate_note: str
    hours: str
    oom_at: str
    confidence: str
    remedy: str


@dataclass
class Section:
    anchor: str
    host: str
    gpus: str
    verdict: str
    severity: str | None
    headline: str
    findings: list[FindingView]
    chart: charts.Chart | None
    logs: list[LogLine]


@dataclass
class HostView:
    host: str
    engine: str
    model: str
    gpus: str
    flags: str
    verdict: str
    worst: str | None
    per_gpu: list[tuple[str, str, str]] = field(default_factory=list)  # (GPU, rate, OOM)


@dataclass
class CountRow:
    name: str
    label: str
    count: int


@dataclass
class ReportModel:
    title: str
    generated_at: str
    analyzer_version: str
    bucket: str
    data_range: str
    hosts: int
    gpus: int
    verdict: str
    verdict_ok: bool
    severity_counts: list[CountRow]
    rows: list[GpuRow]
    host_views: list[HostView]
    sections: list[Section]
    rules: list[RuleStatus]
    gaps: list[str]
    incomplete: list[str]  # what this analysis could not check, and why (never reads as healthy)

    @property
    def size(self) -> str:
        """The hosts and GPUs counted, e.g. '3 hosts, 24 GPUs'."""
        return f"{plural(self.hosts, 'host')}, {plural(self.gpus, 'GPU')}"


def _when(f: Finding) -> str:
    if f.start and f.end and f.start != f.end:
        return f"{f.start} → {f.end}"
    return f.start or f.end or ""


def _finding_view(i: int, f: Finding) -> FindingView:
    return FindingView(
        anchor=f"f{i + 1}",
        severity=f.severity,
        rule_id=f.rule_id,
        title=f.title or CATEGORIES[f.category],
        category=f.category,
        category_name=CATEGORIES[f.category],
        where=f.host
        + (f" · GPU {f.gpu}" if f.gpu is not None else "")
        + (f" · pid {f.pid}" if f.pid else ""),
        when=_when(f),
        summary=f.summary,
        evidence=[KV(_label(k), format_value(k, v)) for k, v in f.evidence.items()],
        remediation=[p.strip() for p in f.remediation.split("\n\n") if p.strip()],
        options=options(f.remediation),
        references=[_ref(str(r)) for r in f.references],
    )


def _rate(v: GpuVerdict) -> tuple[str, str]:
    if v.rate_mib_per_h is None:
        return "—", ""
    note = "host RAM" if v.host_ram else f"from {v.rate_rule}"
    return f"{v.rate_mib_per_h:,.0f} MiB/h", note


def _oom(v: GpuVerdict) -> tuple[str, str]:
    if v.hours_to_oom is None:
        return "—", ""
    h = v.hours_to_oom
    hours = f"{h * 60:.0f} min" if h < 1 else f"{h:,.1f} h"
    if v.oom_rule != "OF001":
        hours = f"≈ {hours}"
    return hours, (v.oom_at or "").replace("T", " ").replace("Z", "")


def _remedy(v: GpuVerdict, doc: FindingsDocument) -> str:
    fs = [doc.findings[i] for i in v.findings]
    order = ("KB001", "MT001", "OF001", "AP001", "AP003", "KV001", "CC001", "HR001", "GM001")
    fs.sort(key=lambda f: (order.index(f.rule_id) if f.rule_id in order else len(order),
                           -SEVERITIES.index(f.severity)))  # fmt: skip
    for f in fs:
        if f.rule_id == "MT001" and not f.evidence.get("restart_now"):
            continue
        if f.remediation.strip():
            return first_remedy(f.remediation)
    return "—"


def _units(doc: FindingsDocument) -> list[tuple[str, list[GpuSeries]]]:
    """Chart units per host: one per GPU, or one for all ranks of a tensor-parallel server."""
    tp = {h.host: int(h.flags.get("tp_size") or 1) for h in doc.hosts}
    by_host: dict[str, list[GpuSeries]] = {}
    for s in doc.series:
        by_host.setdefault(s.host, []).append(s)
    out: list[tuple[str, list[GpuSeries]]] = []
    for host, ss in by_host.items():
        ss = sorted(ss, key=lambda s: s.gpu)
        if tp.get(host, 1) > 1 and len(ss) > 1:
            out.append((host, ss))
        else:
            out.extend((host, [s]) for s in ss)
    return out


def _anchor(host: str, gpus: list[int | None]) -> str:
    """A readable id, made unique by a hash of the host name (``a.b`` and ``a_b``, or
    host ``n`` GPUs 1-2 and host ``n-1`` GPU 2, read alike once made safe)."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", host)
    tag = hashlib.sha1(host.encode()).hexdigest()[:6]
    return f"gpu-{safe}-{tag}-" + "-".join("x" if g is None else str(g) for g in gpus)


def build(doc: FindingsDocument, generated_at: str | None = None) -> ReportModel:
    verdicts = gpu_verdicts(doc)
    incomplete = doc.incomplete_reasons()
    by_gpu = {(v.host, v.gpu): v for v in verdicts}
    kv = {k.host: k for k in doc.kv}
    units: list[tuple[str, list[int | None], list[GpuSeries]]] = [
        (h, [s.gpu for s in ss], ss) for h, ss in _units(doc)
    ]
    covered = {(h, g) for h, gs, _ in units for g in gs}
    units += [(v.host, [v.gpu], []) for v in verdicts if (v.host, v.gpu) not in covered]
    anchor_of = {(h, g): _anchor(h, gs) for h, gs, _ in units for g in gs}
    rank = {(v.host, v.gpu): i for i, v in enumerate(verdicts)}

    def unit_key(u: tuple[str, list[int | None], list[GpuSeries]]) -> tuple[int, str, int]:
        h, gs, _ = u
        return (min(rank.get((h, g), len(rank)) for g in gs), h, -1 if gs[0] is None else gs[0])

    sections = []
    for host, gs, ss in sorted(units, key=unit_key):
        vs = [by_gpu[(host, g)] for g in gs if (host, g) in by_gpu]
        idx = sorted({i for v in vs for i in v.findings})
        lead = vs[0] if vs else None
        spec_chart = None
        if ss:
            title = f"{host} — " + (
                f"GPUs {gs[0]}–{gs[-1]} (tensor-parallel ranks overlaid)" if len(gs) > 1
                else f"GPU {gs[0]}" + (f" ({ss[0].gpu_name})" if ss[0].gpu_name else "")
            )  # fmt: skip
            rate = lead.gpu_rate if lead else None
            oom_t = None  # the table's forecast, from the end of the lead GPU's samples
            if lead and lead.hours_to_oom is not None:
                end = next((s.data_end for s in ss if s.gpu == lead.gpu), None)
                oom_t = end + lead.hours_to_oom * 3600 if end is not None else None
            spec = build_spec(
                anchor_of[(host, gs[0])] + "-chart",
                title,
                ss,
                [e for e in doc.events if e.host == host],
                kv=kv.get(host),
                alloc=[a for a in doc.alloc if a.host == host and (a.gpu is None or a.gpu in gs)],
                rate_mib_per_h=rate,
                oom_at=oom_t,
                lead=lead.gpu if lead else None,
                plot_w=charts.PW,
            )
            spec_chart = charts.render_spec(spec)
        headline = ""
        if lead:
            r, note = _rate(lead)
            hrs, at = _oom(lead)
            headline = lead.verdict + (f": {r}" if lead.rate_mib_per_h is not None else "")
            headline += f" ({note})" if note else ""
            if lead.hours_to_oom is not None:
                headline += f", out of memory in {hrs} (at {at} UTC)"
        sections.append(
            Section(
                anchor=anchor_of[(host, gs[0])],
                host=host,
                gpus=("GPU " + str(gs[0])) if len(gs) == 1 and gs[0] is not None
                else ("host" if gs[0] is None else f"GPUs {gs[0]}–{gs[-1]}"),
                verdict=" · ".join(dict.fromkeys(v.verdict for v in vs)) or "no findings",
                severity=lead.severity if lead else None,
                headline=headline,
                findings=[_finding_view(i, doc.findings[i]) for i in idx],
                chart=spec_chart,
                logs=_merged_logs([e for e in doc.events if e.host == host])
                if idx else [],
            )
        )  # fmt: skip
    rows = []
    for v in verdicts:
        r, note = _rate(v)
        hrs, at = _oom(v)
        rows.append(
            GpuRow(
                v.host, "—" if v.gpu is None else str(v.gpu), anchor_of[(v.host, v.gpu)],
                v.verdict, v.severity, v.is_leak, r, note, hrs, at, v.confidence or "not rated",
                _remedy(v, doc),
            )
        )  # fmt: skip
    return ReportModel(
        title="leakreport — GPU memory: leak or cache?",
        generated_at=generated_at or doc.run.generated_at,
        analyzer_version=doc.run.analyzer_version,
        bucket=doc.run.bucket,
        data_range=data_span(doc, "→", "— (no GPU memory samples)"),
        hosts=len(doc.hosts),
        gpus=len(doc.series),
        verdict=_verdict_line(doc, verdicts, incomplete),
        verdict_ok=bool(doc.series or doc.findings)
        and not incomplete
        and not any(v.is_leak or v.severity == "critical" for v in verdicts),
        severity_counts=[
            CountRow(s, s, sum(1 for f in doc.findings if f.severity == s))
            for s in reversed(SEVERITIES)
        ],
        rows=rows,
        host_views=_host_views(doc, verdicts),
        sections=sections,
        rules=list(doc.run.rules),
        gaps=_gaps(doc),
        incomplete=incomplete,
    )


def _verdict_line(doc: FindingsDocument, verdicts: list[GpuVerdict], incomplete: list[str]) -> str:
    if not doc.has_data():
        return "No data in scope: nothing could be checked."
    partial = (
        f" The analysis is incomplete: {plural(len(incomplete), 'thing')} could not be "
        "checked (listed below)."
        if incomplete
        else ""
    )
    if not doc.series and not doc.findings:  # allocator records or logs alone, say
        ran = sum(r.status in ("clean", "fired") for r in doc.run.rules)
        return (
            f"No finding from the {plural(ran, 'rule')} that could run; GPU memory was not "
            "checked: no GPU memory samples were read." + partial
        )
    gpus = plural(len(doc.series), "GPU")
    leaks = [v for v in verdicts if v.is_leak]
    if not leaks:
        cache = sum(1 for v in verdicts if "cache.growth" in v.categories)
        urgent = [v for v in verdicts if v.severity == "critical"]
        line = (
            "No leak found in what could be checked" if incomplete else f"No leak found on {gpus}"
        )
        line += f" ({cache} only cache)." if cache else "."
        if urgent:
            line += f" Action needed now on {plural(len(urgent), 'GPU')}: see the table."
        return line + partial
    hosts = len({v.host for v in leaks})
    verb = "leaks or needs" if len(leaks) == 1 else "leak or need"
    line = f"{plural(len(leaks), 'GPU')} on {plural(hosts, 'host')} {verb} action."
    soon = next((v for v in leaks if v.hours_to_oom is not None), None)
    if soon is not None:
        hrs, at = _oom(soon)
        if iso_not_after(soon.oom_at, doc.run.generated_at):
            # counted from the data's end: on old data that moment can be behind us
            line += (
                f" Soonest out of memory: {soon.host} GPU {soon.gpu}, {hrs} after its last "
                f"sample (at {at} UTC, already past when this was analysed)."
            )
        else:
            line += f" Soonest out of memory: {soon.host} GPU {soon.gpu} in {hrs} (at {at} UTC)."
    return line + partial


def _host_views(doc: FindingsDocument, verdicts: list[GpuVerdict]) -> list[HostView]:
    per_host: dict[str, list[GpuVerdict]] = {}
    for v in verdicts:
        per_host.setdefault(v.host, []).append(v)
    out = []
    for h in doc.hosts:
        vs = sorted(per_host.get(h.host, []), key=lambda v: -1 if v.gpu is None else v.gpu)
        worst = max((v.severity for v in vs), key=SEVERITIES.index, default=None)
        out.append(
            HostView(
                host=h.host,
                engine=" ".join(x for x in (h.engine, h.engine_version) if x) or "unknown engine",
                model=h.model or "unknown model",
                gpus=f"{h.gpus} × {h.gpu_name}" if h.gpu_name else plural(h.gpus, "GPU"),
                flags=", ".join(f"{k}={v}" for k, v in h.flags.items()),
                verdict="; ".join(
                    [*dict.fromkeys(v.verdict for v in vs)]
                    + (
                        ["not fully checked (see “Not checked”)"]
                        if doc.host_reasons(h.host)
                        else []
                    )
                )
                or "no leak found",
                worst=worst,
                per_gpu=[
                    ("—" if v.gpu is None else str(v.gpu), _rate(v)[0], _oom(v)[0]) for v in vs
                ],
            )
        )
    out.sort(key=lambda v: (v.worst is None, -SEVERITIES.index(v.worst) if v.worst else 0, v.host))
    return out


def _gaps(doc: FindingsDocument) -> list[str]:
    gaps = list(doc.run.gaps)
    gaps += [
        f"{r.rule_id} {r.status}: {r.reason}"
        for r in doc.run.rules
        if r.status in ("skipped", "errored") and r.reason
    ]
    gaps += [f"no data in table {t}" for t, n in sorted(doc.run.tables.items()) if n == 0]
    return gaps
