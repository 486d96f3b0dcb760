"""Report data, prepared from a findings document before any template runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from analyzer.categories import CATEGORIES, LEAK_CATEGORIES, SEVERITIES
from analyzer.findings import Event, Finding, FindingsDocument, RuleStatus
from reports.charts import Chart, build_alloc_chart, build_chart

MAX_LOG_LINES = 20


@dataclass
class KV:
    key: str
    value: str


@dataclass
class LogLine:
    ts: str
    kind: str
    text: str


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
    charts: list[Chart]
    logs: list[LogLine]
    remediation: list[str]  # paragraphs
    references: list[str]


@dataclass
class HostView:
    host: str
    engine: str
    model: str
    gpus: str
    flags: str
    verdict: str
    worst: str | None
    charts: list[Chart] = field(default_factory=list)


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
    severity_counts: list[CountRow]
    category_counts: list[CountRow]
    leaking_hosts: list[str]
    findings: list[FindingView]
    host_views: list[HostView]
    rules: list[RuleStatus]
    gaps: list[str]


def _human_bytes(v: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= size:
            return f"{v / size:,.2f} {unit}"
    return f"{v:,.0f} B"


def format_value(key: str, v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        if key.endswith("_bytes"):
            return _human_bytes(float(v))
        if key.endswith("_mib"):
            return f"{v:,.0f} MiB"
        if key.endswith("_mib_per_h"):
            return f"{v:,.1f} MiB/h"
        if key.endswith("_pct"):
            return f"{v:.1f} %"
        if key.startswith("hours") or key.endswith("_h"):
            return f"{v:,.2f} h"
        if isinstance(v, float):
            return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
        return f"{v:,}"
    return str(v)


def _label(key: str) -> str:
    return key.replace("_", " ").replace(" mib", "").replace(" pct", "").replace(" bytes", "")


def _when(f: Finding) -> str:
    if f.start and f.end and f.start != f.end:
        return f"{f.start} → {f.end}"
    return f.start or f.end or ""


def _host_events(events: list[Event], host: str) -> list[LogLine]:
    mine = [e for e in events if e.host == host]
    return [LogLine(e.ts, e.kind, e.text) for e in mine[-MAX_LOG_LINES:]]


def build(doc: FindingsDocument, generated_at: str | None = None) -> ReportModel:
    series = {(s.host, s.gpu): s for s in doc.series}
    kv = {k.host: k for k in doc.kv}
    alloc: dict[str, list[Any]] = {}
    for a in doc.alloc:
        alloc.setdefault(a.host, []).append(a)
    by_host: dict[str, list[Any]] = {}
    for s in doc.series:
        by_host.setdefault(s.host, []).append(s)
    views = []
    for i, f in enumerate(doc.findings):
        if f.gpu is not None and (f.host, f.gpu) in series:
            chart_series = [series[(f.host, f.gpu)]]
        else:
            chart_series = by_host.get(f.host, [])
        views.append(
            FindingView(
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
                charts=[build_chart(s, doc.events, kv=kv.get(s.host)) for s in chart_series]
                + [
                    build_alloc_chart(a)
                    for a in alloc.get(f.host, [])
                    if (f.pid is None or a.pid == f.pid)
                    and (f.gpu is None or a.gpu in (f.gpu, None))
                ],
                logs=_host_events(doc.events, f.host),
                remediation=[p.strip() for p in f.remediation.split("\n\n") if p.strip()],
                references=list(f.references),
            )
        )
    worst: dict[str, str] = {}
    for f in doc.findings:
        if f.host not in worst or SEVERITIES.index(f.severity) > SEVERITIES.index(worst[f.host]):
            worst[f.host] = f.severity
    leaking = sorted({f.host for f in doc.findings if f.category in LEAK_CATEGORIES})
    host_views = []
    for h in doc.hosts:
        cats = sorted({CATEGORIES[f.category] for f in doc.findings if f.host == h.host})
        flags = ", ".join(f"{k}={v}" for k, v in h.flags.items())
        host_views.append(
            HostView(
                host=h.host,
                engine=" ".join(x for x in (h.engine, h.engine_version) if x) or "unknown engine",
                model=h.model or "unknown model",
                gpus=f"{h.gpus} × {h.gpu_name}" if h.gpu_name else f"{h.gpus} GPUs",
                flags=flags,
                verdict="; ".join(cats) if cats else "no leak found",
                worst=worst.get(h.host),
                charts=[build_chart(s, doc.events, small=True) for s in by_host.get(h.host, [])]
                if h.host not in worst
                else [],
            )
        )
    host_views.sort(
        key=lambda v: (v.worst is None, -SEVERITIES.index(v.worst) if v.worst else 0, v.host)
    )
    sev = [
        CountRow(s, s, sum(1 for f in doc.findings if f.severity == s))
        for s in reversed(SEVERITIES)
    ]
    cat = [
        CountRow(c, name, n)
        for c, name in CATEGORIES.items()
        if (n := sum(1 for f in doc.findings if f.category == c))
    ]
    gaps = list(doc.run.gaps)
    gaps += [
        f"{r.rule_id}: {r.reason}"
        for r in doc.run.rules
        if r.status in ("skipped", "errored") and r.reason
    ]
    gaps += [f"no data in table {t}" for t, n in sorted(doc.run.tables.items()) if n == 0]
    return ReportModel(
        title="leakreport — GPU memory: leak or cache?",
        generated_at=generated_at or doc.run.generated_at,
        analyzer_version=doc.run.analyzer_version,
        bucket=doc.run.bucket,
        data_range=f"{doc.run.data_start or '?'} → {doc.run.data_end or '?'}",
        hosts=len(doc.hosts),
        gpus=len(doc.series),
        severity_counts=sev,
        category_counts=cat,
        leaking_hosts=leaking,
        findings=views,
        host_views=host_views,
        rules=list(doc.run.rules),
        gaps=gaps,
    )
