"""Time sanity of trace rows: what an analysis leaves out, and says it left out.

Samples stamped more than :data:`FUTURE_MARGIN` after the analysis time, or (for tables
sampled by a collector run, :data:`SAMPLED_AT_RUN`) before the host's first collector
run, are quarantined: left out of the views, counted and listed. The file footers' time
ranges decide where no row can be out of bounds, so the usual bucket costs nothing.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import duckdb

from analyzer.findings import QUARANTINED, RUNS_TABLE, host_reason
from analyzer.views import parquet, sql_str
from collector import filecheck

if TYPE_CHECKING:
    from analyzer.bucket import Scope

FUTURE_MARGIN = dt.timedelta(minutes=5)
# tables whose rows a collector run samples at run time: none can predate the first run
# (log lines and probe records can: they were written before the collector read them)
SAMPLED_AT_RUN = ("gpu_samples", "gpu_processes", "proc_maps", "processes", "metric_samples")


def ts_literal(t: dt.datetime) -> str:
    return f"TIMESTAMPTZ '{t.astimezone(dt.UTC).isoformat()}'"


def scope_predicates(scope: Scope) -> list[str]:
    """The conditions on ``ts`` of a scope's dates and ``before``."""
    where = []
    if scope.since:
        where.append(f"ts >= TIMESTAMPTZ '{scope.since.isoformat()} 00:00:00+00'")
    if scope.until:
        nxt = scope.until + dt.timedelta(days=1)
        where.append(f"ts < TIMESTAMPTZ '{nxt.isoformat()} 00:00:00+00'")
    if scope.before:
        where.append(f"ts < {ts_literal(scope.before)}")
    return where


def first_runs(
    con: duckdb.DuckDBPyConnection,
    checks: list[filecheck.FileCheck],
    runs: list[str],
    hi: dt.datetime,
) -> dict[str, dt.datetime]:
    """Each host's first collector run (runs stamped in the future do not count): from the
    footers where they tell exactly (each file's rows of one host, none after ``hi``),
    else by a scan of ``runs``."""
    if all(
        not c.rows or (c.host is not None and c.ts_min and c.ts_max and c.ts_max <= hi)
        for c in checks
    ):
        first: dict[str, dt.datetime] = {}
        for c in checks:
            if c.rows and c.host is not None and c.ts_min:
                first[c.host] = min(first.get(c.host, c.ts_min), c.ts_min)
        return {h: t - FUTURE_MARGIN for h, t in first.items()}
    if not runs:
        return {}
    src = parquet(runs)
    rows = con.execute(
        f"SELECT host, min(ts) FROM {src} WHERE ts <= {ts_literal(hi)} GROUP BY host"
    ).fetchall()
    return {str(h): t - FUTURE_MARGIN for h, t in rows if t is not None}


def sane_predicate(
    files: list[filecheck.FileCheck], hi: dt.datetime, los: dict[str, dt.datetime]
) -> str | None:
    """The condition a row must meet to be used, or None when the footers' time ranges
    show that every row of every file meets it (the usual case: no cost at all)."""
    suspect_hosts: set[str] = set()
    too_late = False
    for c in files:
        if c.ts_max is None or c.ts_max > hi:
            too_late = True
        lo = los.get(c.entry.host)
        if lo is not None and (c.ts_min is None or c.ts_min < lo):
            suspect_hosts.add(c.entry.host)
    if not too_late and not suspect_hosts:
        return None
    parts = [f"ts <= {ts_literal(hi)}"]
    if suspect_hosts:
        cases = " ".join(
            f"WHEN {sql_str(h)} THEN {ts_literal(los[h])}" for h in sorted(suspect_hosts)
        )
        parts.append(f"ts >= coalesce(CASE host {cases} END, ts)")
    return "(" + " AND ".join(parts) + ")"


def count_quarantined(
    con: duckdb.DuckDBPyConnection, name: str, files: list[str], sane: str, scope: Scope
) -> tuple[list[str], list[str]]:
    """One line per host of the rows of ``files`` in scope that fail ``sane``; and a reason
    the analysis is incomplete (:func:`analyzer.findings.host_reason`) per host none of
    whose rows pass (a clock far ahead, a wrong --tz on import): nothing of that table was
    checked for it."""
    where = " AND ".join(scope_predicates(scope)) or "true"
    bad = f"FILTER (WHERE NOT {sane})"
    rows = con.execute(
        f"SELECT host, count(*) {bad}, min(ts) {bad}, max(ts) {bad}, count(*) FILTER (WHERE {sane}) "
        f"FROM {parquet(files)} WHERE {where} GROUP BY host HAVING count(*) {bad} > 0 "
        "ORDER BY host"
    ).fetchall()
    lines = [
        f"{h}: {n} {name}{QUARANTINED}{_iso(a)} to {_iso(b)}: more than "
        f"{int(FUTURE_MARGIN.total_seconds() // 60)} min after the analysis time or before the "
        "host's first collector run; not used for trends or thresholds"
        for h, n, a, b, _ok in rows
    ]
    lost = [
        host_reason(
            str(h),
            f"all {n} of its {name} rows in scope are quarantined (stamped {_iso(a)} to "
            f"{_iso(b)}), so none was analysed; check the host's clock, or the --tz its files "
            "were imported with",
        )
        for h, n, a, b, ok in rows
        if not ok and name != RUNS_TABLE  # what the collector tried, not what it saw
    ]
    return lines, lost


def _iso(t: Any) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if t else "?"
