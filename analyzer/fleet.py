"""The weekly fleet view: rank GPUs, compare cohorts, and diff against last week.

Fleet-wide figures are derived from per-week findings documents (the same
documents a local or fanned-out analysis produces), never from raw samples,
so they stay cheap at a thousand GPUs. This module is light: reports use it.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass, field

from analyzer.categories import LEAK_CATEGORIES
from analyzer.findings import FindingsDocument, HostInfo


def week_range(week: str) -> tuple[dt.date, dt.date]:
    """'2026-W48' -> (Monday, Sunday)."""
    try:
        year, w = week.upper().split("-W")
        monday = dt.date.fromisocalendar(int(year), int(w), 1)
    except ValueError:
        raise ValueError(f"{week!r} is not an ISO week (YYYY-Www)") from None
    return monday, monday + dt.timedelta(days=6)


def previous_week(week: str) -> str:
    monday, _ = week_range(week)
    y, w, _ = (monday - dt.timedelta(days=7)).isocalendar()
    return f"{y}-W{w:02d}"


@dataclass
class GpuRank:
    host: str
    gpu: int
    cohort: str
    leak_mib_per_h: float | None
    hours_to_oom: float | None
    categories: list[str]


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


@dataclass
class Change:
    host: str
    gpu: int | None
    category: str
    status: str  # new | persisting | resolved


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


def _leak_keys(doc: FindingsDocument) -> set[tuple[str, int | None, str]]:
    return {(f.host, f.gpu, f.category) for f in doc.findings if f.category in LEAK_CATEGORIES}


def compare(prev: FindingsDocument | None, cur: FindingsDocument) -> list[Change]:
    now = _leak_keys(cur)
    before = _leak_keys(prev) if prev else set()
    reporting = {h.host for h in cur.hosts}
    out = [Change(h, g, c, "persisting" if (h, g, c) in before else "new") for h, g, c in now]
    # resolved only where the host still reports and the finding is gone (silence is not a fix)
    out += [Change(h, g, c, "resolved") for h, g, c in before - now if h in reporting]
    order = {"new": 0, "persisting": 1, "resolved": 2}
    return sorted(
        out, key=lambda c: (order[c.status], c.host, -1 if c.gpu is None else c.gpu, c.category)
    )


def build(week: str, cur: FindingsDocument, prev: FindingsDocument | None = None) -> FleetView:
    start, end = week_range(week)
    cohorts = {h.host: cohort_of(h) for h in cur.hosts}
    rate: dict[tuple[str, int], float] = {}
    ttl: dict[tuple[str, int], float] = {}
    cats: dict[tuple[str, int], set[str]] = {}
    host_leaks: dict[str, set[str]] = {}
    for f in cur.findings:
        if f.category in LEAK_CATEGORIES:
            host_leaks.setdefault(f.host, set()).add(f.category)
        if f.gpu is None:
            continue
        key = (f.host, f.gpu)
        cats.setdefault(key, set()).add(f.category)
        v = f.evidence.get("rate_mib_per_h")
        if f.rule_id == "GM001" and isinstance(v, (int, float)):
            rate[key] = max(rate.get(key, 0.0), float(v))
        h = f.evidence.get("hours_to_oom")
        if f.category == "oom.forecast" and isinstance(h, (int, float)):
            ttl[key] = min(ttl.get(key, float("inf")), float(h))
    ranking = [
        GpuRank(
            s.host,
            s.gpu,
            " / ".join(cohorts.get(s.host, ("?",) * 5)),
            rate.get((s.host, s.gpu)),
            ttl.get((s.host, s.gpu)),
            sorted(cats.get((s.host, s.gpu), set())),
        )
        for s in cur.series
    ]
    ranking.sort(
        key=lambda r: (-(r.leak_mib_per_h or 0.0), r.hours_to_oom or float("inf"), r.host, r.gpu)
    )
    groups: dict[tuple[str, str, str, str, str], list[str]] = {}
    for host, ckey in cohorts.items():
        groups.setdefault(ckey, []).append(host)
    out: list[Cohort] = []
    for ckey, hosts in groups.items():
        rates = sorted(v for (h, _g), v in rate.items() if h in hosts)
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
        ranking=ranking,
        cohorts=out,
        changes=compare(prev, cur),
        previous_week=previous_week(week) if prev is not None else None,
        previous_hosts=len(prev.hosts) if prev is not None else 0,
    )
