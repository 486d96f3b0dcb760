"""The weekly fleet view: rank GPUs, compare cohorts, and diff against last week.

Fleet-wide figures are derived from per-week findings documents (the same
documents a local or fanned-out analysis produces), never from raw samples,
so they stay cheap at a thousand GPUs. This module is light: reports use it.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass, field

from analyzer.categories import LEAK_CATEGORIES, severity_rank
from analyzer.findings import Finding, FindingsDocument, HostInfo


def week_range(week: str) -> tuple[dt.date, dt.date]:
    """'2026-W48' -> (Monday, Sunday)."""
    try:
        year, w = week.upper().split("-W")
        monday = dt.date.fromisocalendar(int(year), int(w), 1)
    except ValueError:
        raise ValueError(f"{week!r} is not an ISO week (YYYY-Www)") from None
    return monday, monday + dt.timedelta(days=6)


def week_of(day: dt.date) -> str:
    """The ISO week of ``day``: '2026-W48'."""
    y, w, _ = day.isocalendar()
    return f"{y}-W{w:02d}"


def previous_week(week: str) -> str:
    monday, _ = week_range(week)
    return week_of(monday - dt.timedelta(days=7))


@dataclass
class GpuRank:
    host: str
    gpu: int | None
    cohort: str
    leak_mib_per_h: float | None
    hours_to_oom: float | None
    categories: list[str]
    verdict: str = ""
    severity: str = "info"
    oom_at: str | None = None
    oom_estimated: bool = False  # from the rules' figures, beyond OF001's forecast window
    host_ram_mib_per_h: float | None = None  # a host RAM leak's rate: no GPU's leak rate


@dataclass
class Cohort:
    key: str
    engine: str
    version: str
    flags: str
    model: str
    gpu_type: str
    hosts: int
    affected_hosts: int
    share_affected: float
    rates: list[float]  # leak MiB/h of the leaking GPUs, sorted
    median_rate: float | None
    max_rate: float | None
    previous_share: float | None = None  # the same cohort's share affected last week
    min_rate: float | None = None


# a week-over-week status -> what the page says (most urgent first: the page's order)
CHANGE_LABELS = {
    "new": "new",
    "silent": "no data this week",  # a host that leaked stopped reporting: never "resolved"
    "unchecked_before": "new? not checked the week before",
    "persisting": "persisting",
    "unchecked": "not checked this week",
    "resolved": "resolved",
}


@dataclass
class Change:
    host: str
    gpu: int | None
    category: str
    status: str  # a key of CHANGE_LABELS

    @property
    def label(self) -> str:
        return CHANGE_LABELS[self.status]


@dataclass
class FleetView:
    week: str
    start: str
    end: str
    hosts: int
    gpus: int
    affected_hosts: int
    ranking: list[GpuRank] = field(default_factory=list)
    cohorts: list[Cohort] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    previous_week: str | None = None
    previous_hosts: int = 0
    data_end: str | None = None
    incomplete: list[str] = field(default_factory=list)  # what the week's analysis could not check
    previous_incomplete: list[str] = field(default_factory=list)  # ... and the week before's

    @property
    def soonest(self) -> list[GpuRank]:
        """GPUs with a time to OOM, soonest first."""
        return sorted(  # the host report's order (verdict_order)
            (r for r in self.ranking if r.hours_to_oom is not None),
            key=lambda r: (
                r.hours_to_oom or 0.0,
                -severity_rank(r.severity) - 10,
                -(r.leak_mib_per_h or 0.0),
                r.host,
                -1 if r.gpu is None else r.gpu,
            ),
        )


def cohort_of(h: HostInfo) -> tuple[str, str, str, str, str]:
    fl = h.flags
    parts = []
    if "disable_fast_image_processor" in fl:
        parts.append(
            "fast image processor " + ("off" if fl["disable_fast_image_processor"] else "on")
        )
    for k in ("mem_fraction_static", "gpu_memory_utilization"):
        if k in fl:
            parts.append(f"{k}={fl[k]}")
    return (
        h.engine or "?",
        h.engine_version or "?",
        ", ".join(parts) or "-",
        h.model or "?",
        h.gpu_name or "?",
    )


Key = tuple[str, int | None, str]


def _leak_keys(doc: FindingsDocument) -> dict[Key, set[str]]:
    """What the page counts as leaking: the categories a GPU verdict rates (``RATED``),
    so the header, the cohorts, the ranking and the week's changes agree; with the rules
    that found each."""
    out: dict[Key, set[str]] = {}
    for f in doc.findings:
        if f.category in RATED:
            out.setdefault((f.host, f.gpu, f.category), set()).add(f.rule_id)
    return out


def _checked(doc: FindingsDocument, host: str, rules: set[str]) -> bool:
    """Did ``doc``'s analysis check any of ``rules`` on ``host`` (its coverage; a host
    without coverage, as in a document of an older release, counts as checked)?"""
    cov = next((c for c in doc.coverage if c.get("host") == host), None)
    return cov is None or bool(rules & set(cov.get("checked") or []))


def compare(prev: FindingsDocument | None, cur: FindingsDocument) -> list[Change]:
    """Each leak finding of either week, and what became of it. Silence is not a fix: a
    finding gone because its host stopped reporting, or because the rule that made it
    could not run this week, is said so, not "resolved"; and one that could not have been
    found the week before is not plainly "new"."""
    now = _leak_keys(cur)
    before = _leak_keys(prev) if prev else {}
    reporting = {h.host for h in cur.hosts}
    reported = {h.host for h in prev.hosts} if prev else set()
    out = []
    for key, rules in now.items():
        status = "persisting" if key in before else "new"
        if status == "new" and prev and key[0] in reported and not _checked(prev, key[0], rules):
            status = "unchecked_before"
        out.append(Change(*key, status))
    for key, rules in before.items():
        if key in now:
            continue
        if key[0] not in reporting:
            status = "silent"
        else:
            status = "resolved" if _checked(cur, key[0], rules) else "unchecked"
        out.append(Change(*key, status))
    order = {k: i for i, k in enumerate(CHANGE_LABELS)}
    return sorted(
        out, key=lambda c: (order[c.status], c.host, -1 if c.gpu is None else c.gpu, c.category)
    )


def build(week: str, cur: FindingsDocument, prev: FindingsDocument | None = None) -> FleetView:
    start, end = week_range(week)
    cohorts = {h.host: cohort_of(h) for h in cur.hosts}
    verdicts = gpu_verdicts(cur)
    host_leaks = {v.host for v in verdicts if v.is_leak}
    rate = {(v.host, v.gpu): v.gpu_rate for v in verdicts if v.gpu_rate is not None}
    ranking = [
        GpuRank(
            v.host,
            v.gpu,
            " / ".join(cohorts.get(v.host, ("?",) * 5)),
            v.gpu_rate,
            v.hours_to_oom,
            v.categories,
            verdict=v.verdict,
            severity=v.severity,
            oom_at=v.oom_at,
            oom_estimated=v.oom_rule not in (None, "OF001"),
            host_ram_mib_per_h=v.rate_mib_per_h if v.host_ram else None,
        )
        for v in verdicts
        if v.is_leak
    ]
    ranking.sort(
        key=lambda r: (
            -severity_rank(r.severity),
            -(r.leak_mib_per_h or 0.0),
            r.hours_to_oom if r.hours_to_oom is not None else float("inf"),
            r.host,
            -1 if r.gpu is None else r.gpu,
        )
    )
    groups: dict[tuple[str, str, str, str, str], list[str]] = {}
    for host, ckey in cohorts.items():
        groups.setdefault(ckey, []).append(host)
    out: list[Cohort] = []
    for ckey, hosts in groups.items():
        members = set(hosts)
        rates = sorted(v for (h, _g), v in rate.items() if h in members)
        affected = sum(1 for h in hosts if h in host_leaks)
        engine, version, flags, model, gpu_type = ckey
        out.append(
            Cohort(
                " / ".join(ckey),
                engine,
                version,
                flags,
                model,
                gpu_type,
                hosts=len(hosts),
                affected_hosts=affected,
                share_affected=round(affected / len(hosts), 3),
                rates=[round(r, 1) for r in rates],
                median_rate=round(statistics.median(rates), 1) if rates else None,
                max_rate=round(max(rates), 1) if rates else None,
                min_rate=round(min(rates), 1) if rates else None,
            )
        )
    if prev is not None:
        before = {c.key: c.share_affected for c in build(previous_week(week), prev).cohorts}
        for c in out:
            c.previous_share = before.get(c.key)
    out.sort(key=lambda c: (-c.share_affected, -(c.median_rate or 0.0), c.key))
    return FleetView(
        week=week,
        start=start.isoformat(),
        end=end.isoformat(),
        hosts=len(cur.hosts),
        gpus=len(cur.series),
        affected_hosts=len(host_leaks),
        data_end=cur.run.data_end,
        ranking=ranking,
        cohorts=out,
        changes=compare(prev, cur),
        previous_week=previous_week(week) if prev is not None else None,
        previous_hosts=len(prev.hosts) if prev is not None else 0,
        incomplete=cur.incomplete_reasons() if cur.hosts else [],
        previous_incomplete=prev.incomplete_reasons() if prev is not None and prev.hosts else [],
    )


# --- one verdict per GPU: the single source of the leak rate and time to OOM -------------

# (category, short verdict), most decisive first: a GPU's verdict is its first match.
VERDICTS: tuple[tuple[str, str], ...] = (
    ("known_bug.fast_image_processor", "known bug"),
    ("leak.gpu", "leak"),
    ("leak.kv_pool", "KV-pool leak"),
    ("leak.outside_allocator", "leak outside the allocator"),
    ("leak.cuda_context", "CUDA-context leak"),
    ("restart.masked_leak", "leak hidden by restarts"),
    ("leak.host_rss", "host RAM leak"),
    ("skew.rank", "one rank grows"),
    ("oom.event", "out of memory"),
    ("cache.growth", "cache (not a leak)"),
    ("oom.forecast", "OOM forecast"),
    ("memory.threshold", "near full"),
    ("latency.pressure", "latency rises"),
)
# Where a GPU's one leak rate comes from, first found wins. NVML-based rates first: NVML
# memory is what runs out, and OF001 projects the OOM from the same number.
RATE_SOURCES: tuple[tuple[str, str], ...] = (
    ("GM001", "rate_mib_per_h"),
    ("OF001", "rate_mib_per_h"),
    ("MT001", "rate_mib_per_h"),
    ("AP001", "rate_mib_per_h"),
    ("OE001", "rate_mib_per_h_before"),
    ("KB001", "growth_mib_per_h"),
    ("HR001", "rate_mib_per_h"),  # host RAM: the report says so beside the number
)
# Categories whose GPU gets a leak rate at all (a cache GPU's growth is not a leak rate).
RATED = LEAK_CATEGORIES | {"restart.masked_leak", "oom.forecast", "oom.event", "skew.rank"}


@dataclass
class GpuVerdict:
    host: str
    gpu: int | None  # None: a host finding on a host without GPU samples
    verdict: str
    severity: str
    categories: list[str]
    rate_mib_per_h: float | None
    rate_rule: str | None
    hours_to_oom: float | None
    oom_at: str | None  # UTC, ISO-8601: the end of the data plus hours_to_oom
    oom_rule: str | None  # "OF001" (the forecast) or the rule whose figures gave the estimate
    confidence: str | None
    findings: list[int]  # indexes into the document's findings

    @property
    def is_leak(self) -> bool:
        return any(c in RATED for c in self.categories)

    @property
    def host_ram(self) -> bool:
        """Its rate is the server's host RAM growth (HR001), not the GPU's memory."""
        return self.rate_rule == "HR001"

    @property
    def gpu_rate(self) -> float | None:
        """The GPU memory leak rate: None where the rate is host RAM's."""
        return None if self.host_ram else self.rate_mib_per_h


def _owner_gpu(f: Finding, gpus: list[int]) -> list[int | None]:
    """The GPUs a finding belongs to: its own, the one its evidence names, a host's only GPU,
    or every GPU of the host (a KV pool or host RSS leak of a tensor-parallel server)."""
    if f.gpu is not None:
        return [f.gpu]
    for key in ("leaking_gpu", "rank_gpu"):
        g = f.evidence.get(key)
        if isinstance(g, int) and not isinstance(g, bool):
            return [g]
    return list(gpus) if gpus else [None]


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _oom_clock(end: float | None, hours: float | None) -> str | None:
    """The end of this GPU's data plus the hours left, as UTC clock time."""
    if end is None or hours is None:
        return None
    t = dt.datetime.fromtimestamp(end, dt.UTC) + dt.timedelta(hours=hours)
    return t.strftime("%Y-%m-%dT%H:%MZ")


def _epoch(ts: str | None) -> float | None:
    return None if ts is None else dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _data_ends(doc: FindingsDocument) -> dict[tuple[str, int | None], float | None]:
    """Where each GPU's data ends (its own samples, else its host's, else the run's): a
    forecast counts from there, not from the end of the fleet's data."""
    run_end = _epoch(doc.run.data_end)
    out: dict[tuple[str, int | None], float | None] = {
        (h.host, None): _epoch(h.last_ts) or run_end for h in doc.hosts
    }
    out.update({(s.host, s.gpu): s.data_end for s in doc.series if s.data_end is not None})
    return out


def _verdict(
    host: str, gpu: int | None, idx: list[int], doc: FindingsDocument, end: float | None
) -> GpuVerdict:
    fs = [doc.findings[i] for i in idx]
    cats = sorted({f.category for f in fs})
    label = next((v for c, v in VERDICTS if c in cats), "findings")
    severity = max((f.severity for f in fs), key=severity_rank)
    by_rule = {f.rule_id: f for f in fs}
    rate = rate_rule = None
    if any(c in RATED for c in cats):
        for rule, key in RATE_SOURCES:
            v = _num(by_rule[rule].evidence.get(key)) if rule in by_rule else None
            if v is not None:
                rate, rate_rule = round(v, 1), rule
                break
    hours = oom_rule = None
    if "OF001" in by_rule and _num(by_rule["OF001"].evidence.get("hours_to_oom")) is not None:
        hours, oom_rule = _num(by_rule["OF001"].evidence["hours_to_oom"]), "OF001"
    elif rate and rate > 0:
        # beyond the forecast rule's window: the same arithmetic on the rules' own figures
        for rule, used in (("MT001", "recent_peak_mib"), ("GM001", "last_idle_mib")):
            ev = by_rule[rule].evidence if rule in by_rule else {}
            total, now = _num(ev.get("total_mib")), _num(ev.get(used))
            if total is not None and now is not None:
                hours, oom_rule = round(max(total - now, 0.0) / rate, 2), rule
                break
    conf = next((str(f.evidence["confidence"]) for f in fs if f.evidence.get("confidence")), None)
    if conf is None and "known_bug.fast_image_processor" in cats:
        conf = "high (known bug)"
    elif (
        conf is None
        and "KV001" in by_rule
        and (_num(by_rule["KV001"].evidence.get("leak_checks")) or 0) > 0
    ):
        conf = "high (engine check)"
    return GpuVerdict(
        host, gpu, label, severity, cats, rate, rate_rule, hours,
        _oom_clock(end, hours), oom_rule, conf, idx,
    )  # fmt: skip


def gpu_verdicts(doc: FindingsDocument) -> list[GpuVerdict]:
    """One verdict per GPU with findings, soonest OOM first (then severity, rate): the one
    place the host report and the fleet page take a GPU's rate and time to OOM from."""
    gpus: dict[str, list[int]] = {}
    for s in doc.series:
        gpus.setdefault(s.host, []).append(s.gpu)
    owned: dict[tuple[str, int | None], list[int]] = {}
    for i, f in enumerate(doc.findings):
        for g in _owner_gpu(f, sorted(gpus.get(f.host, []))):
            owned.setdefault((f.host, g), []).append(i)
    ends = _data_ends(doc)
    run_end = _epoch(doc.run.data_end)
    out = [
        _verdict(h, g, idx, doc, ends.get((h, g)) or ends.get((h, None)) or run_end)
        for (h, g), idx in owned.items()
    ]
    out.sort(key=verdict_order)
    return out


def verdict_order(v: GpuVerdict) -> tuple[float, int, float, str, int]:
    return (
        v.hours_to_oom if v.hours_to_oom is not None else float("inf"),
        -severity_rank(v.severity) - (10 if v.is_leak else 0),
        -(v.rate_mib_per_h or 0.0),
        v.host,
        -1 if v.gpu is None else v.gpu,
    )
