"""The weekly fleet view: rank GPUs, compare cohorts, and diff against last week.

Fleet-wide figures are derived from per-week findings documents (the same
documents a local or fanned-out analysis produces), never from raw samples,
so they stay cheap at a thousand GPUs. This module is light: reports use it.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass, field

from analyzer.categories import severity_rank
from analyzer.findings import FindingsDocument, HostInfo
from analyzer.verdicts import RATED, gpu_verdicts


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
    gaps: list[str] = field(default_factory=list)  # hosts that stopped reporting, failed sources

    @property
    def silent_hosts(self) -> list[str]:
        """Hosts with leak findings the week before and no data this week."""
        return sorted({c.host for c in self.changes if c.status == "silent"})

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
        gaps=list(cur.run.gaps) if cur.hosts else [],
    )
