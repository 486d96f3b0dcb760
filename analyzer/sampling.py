"""How far apart device samples are, and what an analysis cannot tell where they are
too far apart for its buckets.

A bucket without a sample ends every idle run (``rollups/03_idle_windows.sql``), so
samples 30 s apart in 15 s buckets make no idle window at all, and a leak reads clean.
The bucket width therefore follows each host's sampling interval
(:func:`analyzer.rollup.width_for_span`), estimated here from the files' footers
(:func:`host_intervals`). What the width cannot serve is said, never left silent:

- :func:`unserved`: a host sampled further apart than its buckets throughout;
- :func:`sparse_stretches`: hours of a host sampled further apart than the rest of it
  (an hourly nvidia-smi log beside the collector's 10 s samples, a collector whose
  interval was changed), which the host's width, set by its densest samples, leaves
  without idle windows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

import duckdb
import pyarrow as pa

from analyzer import rollup
from analyzer.findings import host_reason
from collector import filecheck

# the words that say a host's idle windows could not be told (analyzer.coverage reads them)
IDLE_UNTOLD = "idle windows cannot be told"


def samples_span(files: list[filecheck.FileCheck], hi: dt.datetime) -> float | None:
    """Seconds from the first to the last device sample, from the files' footers
    (samples past ``hi`` are quarantined and do not count, nor does a file of them
    alone); None when unknown (a file without time statistics)."""
    if not files or any(c.ts_min is None or c.ts_max is None for c in files):
        return None
    now = [c for c in files if c.ts_min is not None and c.ts_min <= hi]
    if not now:
        return None
    lo = min(c.ts_min for c in now if c.ts_min is not None)
    return (max(min(c.ts_max, hi) for c in now if c.ts_max is not None) - lo).total_seconds()


def host_intervals(
    files: list[filecheck.FileCheck], fs: Any = None, fine_s: float = 15.0
) -> dict[str, float]:
    """Per host, seconds between a GPU's device samples. The footers give an upper bound
    per file (its time range over its samples per GPU less one, gpu_index's range standing
    for the GPUs; files of one sample per GPU, as a run that takes one writes, per
    host-day together): a gap inside a file, a GPU's missing rows or a gap in the GPU
    numbers only widen it. The least of a host's bounds, where it is ``fine_s`` or less;
    else (or none) the median step between its samples, read from the data (ts, host and
    gpu_index only: such hosts are sparse, or few)."""
    bounds: dict[str, float] = {}
    single: dict[tuple[str, dt.date], list[filecheck.FileCheck]] = {}

    def bound(host: str, v: float) -> None:
        bounds[host] = min(bounds.get(host, v), v)

    def host_of(c: filecheck.FileCheck) -> str:  # the footer's, else the folder's
        return c.host if c.host is not None else c.entry.host

    for c in files:
        if c.ts_min is None or c.ts_max is None or not c.gpus or not c.rows:
            continue
        host = host_of(c)
        n = c.rows / c.gpus
        if n >= 2:
            bound(host, (c.ts_max - c.ts_min).total_seconds() / (n - 1))
        else:
            single.setdefault((host, c.entry.day), []).append(c)
    for (host, _day), cs in single.items():
        n = sum(c.rows / (c.gpus or 1) for c in cs)
        if n >= 2:
            lo = min(c.ts_min for c in cs if c.ts_min is not None)
            hi = max(c.ts_max for c in cs if c.ts_max is not None)
            bound(host, (hi - lo).total_seconds() / (n - 1))
    unsure = {host_of(c) for c in files if c.rows} - {h for h, v in bounds.items() if v <= fine_s}
    if unsure:
        mine = [c for c in files if c.rows and host_of(c) in unsure]
        bounds.update(_median_steps([c.entry.path for c in mine], fs))
    return bounds


def _median_steps(paths: list[str], fs: Any) -> dict[str, float]:
    """Per host, the median step between consecutive samples of a GPU (repeats left out)."""
    import pyarrow.parquet as pq

    if not paths:
        return {}
    cols = ["ts", "host", "gpu_index"]
    data = pa.concat_tables(
        [pq.read_table(p, columns=cols, filesystem=fs).select(cols) for p in paths],
        promote_options="permissive",
    )
    con = duckdb.connect()
    try:
        con.register("s", data)
        rows = con.execute(
            "SELECT host, median(d) FROM (SELECT host, epoch(ts) - lag(epoch(ts)) OVER "
            "(PARTITION BY host, gpu_index ORDER BY ts) AS d FROM s) WHERE d > 0 GROUP BY host"
        ).fetchall()
    finally:
        con.close()
    return {str(h): float(v) for h, v in rows if v is not None}


def unserved(con: duckdb.DuckDBPyConnection, intervals: dict[str, float]) -> list[str]:
    """What this analysis's bucket width (``rollup_settings``) could not serve, a line per
    host: hosts sampled further apart than their buckets throughout (past the widest,
    rollup.SPARSE_WIDTHS), then hours of the others sampled so (:func:`sparse_stretches`)."""
    row = con.execute("SELECT bucket_s FROM rollup_settings").fetchone()
    width = float(row[0]) if row and row[0] else 0.0
    if not width:
        return []
    sparse = {h: iv for h, iv in sorted(intervals.items()) if iv > width * rollup.JITTER}
    return [
        host_reason(
            host,
            f"device samples about {iv:,.0f} s apart, wider than this analysis's "
            f"{width:g} s buckets: its {IDLE_UNTOLD} (give --param "
            f"rollup.bucket_s=N, N at least the interval, with --host {host})",
        )
        for host, iv in sparse.items()
    ] + sparse_stretches(con, width, set(sparse))


# An hour is sampled too sparsely for the buckets where at least this share of the steps
# between its filled buckets skip one or more (a bucket without a sample ends an idle
# run): samples 20 s apart in 15 s buckets skip every third step, 30 s every one. A
# collector outage is one long step; the gap between two cron runs of the collector (10 s
# samples for 55 s each minute) at most one step in five.
SKIPPING = 0.3
MIN_FILLED = 4  # buckets with a sample, for an hour to be judged at all
# Where that share of the steps skip, the filled buckets are at most 1 / (1 + SKIPPING) of
# an hour's extent (0.82 with MIN_FILLED): hours fuller than this are not looked at further.
HOLED = 0.85
SHOWN = 3  # stretches named per host

# Per host, the hours (of its first GPU: the collector samples a host's GPUs together)
# whose steps between filled buckets skip, as stretches of consecutive hours, with the
# seconds a sample covers there on average. Steps are counted within an hour.
_STRETCHES = """
WITH first AS (SELECT host, min(gpu_index) AS gpu_index FROM gpu_info GROUP BY host),
filled AS MATERIALIZED (
    SELECT host, bi, CAST(floor(bi * $w / 3600) AS BIGINT) AS hr
    FROM gpu_buckets SEMI JOIN first USING (host, gpu_index)
),
holed AS (  -- hours with too few filled buckets for their extent to skip none
    SELECT host, hr FROM filled GROUP BY ALL
    HAVING count(*) >= $min_filled AND count(*) < $holed * (max(bi) - min(bi) + 1)
),
steps AS (
    SELECT host, hr, bi, bi - lag(bi) OVER (PARTITION BY host, hr ORDER BY bi) AS step
    FROM filled SEMI JOIN holed USING (host, hr)
),
hours AS (
    SELECT host, hr, (max(bi) - min(bi)) * $w / (count(*) - 1) AS every_s
    FROM steps GROUP BY ALL
    HAVING count(step) FILTER (WHERE step > 1) >= $share * count(step)
),
runs AS (SELECT *, hr - row_number() OVER (PARTITION BY host ORDER BY hr) AS run FROM hours)
SELECT host, to_timestamp(min(hr) * 3600), to_timestamp((max(hr) + 1) * 3600),
       median(every_s)
FROM runs GROUP BY host, run ORDER BY host, min(hr)
"""


def sparse_stretches(
    con: duckdb.DuckDBPyConnection, width: float, skip: Collection[str] = ()
) -> list[str]:
    """Hours of a host sampled further apart than this analysis's buckets, where the rest of
    it fits them: no idle window there, so a leak in those hours goes unseen. One line per
    host (``skip``: hosts sparse throughout, named already), naming the hours and the
    width they need."""
    params = {"w": width, "min_filled": MIN_FILLED, "share": SKIPPING, "holed": HOLED}
    by: dict[str, list[tuple[dt.datetime, dt.datetime, float]]] = {}
    for host, lo, hi, every in con.execute(_STRETCHES, params).fetchall():
        if host not in skip:
            by.setdefault(host, []).append((lo, hi, float(every)))
    out = []
    for host, stretches in sorted(by.items()):
        hours = sum((hi - lo).total_seconds() for lo, hi, _ in stretches) / 3600
        every = max(e for _, _, e in stretches)
        need = next((w for w in rollup.SPARSE_WIDTHS if w * rollup.JITTER >= every), None)
        said = ", ".join(_stretch(lo, hi) for lo, hi, _ in stretches[:SHOWN])
        more = len(stretches) - SHOWN
        said += f" and {more} more" if more > 0 else ""
        fix = (
            f"analyse them with --host {host} --param rollup.bucket_s={need}"
            if need
            else "sample more often"
        )
        out.append(
            host_reason(
                host,
                f"device samples about {every:,.0f} s apart for {hours:g} h ({said} UTC), "
                f"further apart than this analysis's {width:g} s buckets: no idle "
                f"window could be told in those hours, so a leak there would read clean "
                f"({fix})",
            )
        )
    return out


def _stretch(lo: dt.datetime, hi: dt.datetime) -> str:
    lo, hi = lo.astimezone(dt.UTC), hi.astimezone(dt.UTC)
    end = hi.strftime("%H:%M" if hi - lo < dt.timedelta(hours=24) else "%Y-%m-%d %H:%M")
    return f"{lo:%Y-%m-%d %H:%M} to {end}"
