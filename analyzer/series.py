"""Chart data for the findings document: hosts, downsampled series, events.

Reads the rollups only (never the raw samples again). Every query lives in
``rollups/series/NAME.sql`` (beside the rollups, so one place defines what is
derived) and is loaded by name; the downsampling happens there too, in DuckDB,
keeping each chunk's peak and trough so spikes survive.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from pathlib import Path
from typing import Any

import duckdb

from analyzer.findings import (
    EVENT_SIGNATURES,
    MAX_EVENTS_PER_KIND,
    AllocSeries,
    Event,
    FindingsDocument,
    GpuSeries,
    HostInfo,
    KvSeries,
    iso_time,
    iso_utc,
)
from analyzer.packs import referenced_params
from analyzer.progress import plural
from analyzer.rollup import ROLLUP_DIR

SERIES_DIR = ROLLUP_DIR / "series"
QUERIES = (
    "data_range",
    "gpu_series",
    "gpu_names",
    "idle_windows",
    "idle_trend",
    "host_gpus",
    "host_servers",
    "log_events",
    "kv_series",
    "alloc_series",
    "alloc_snapshots",
    "source_failures",
    "alloc_dropped",
)
MAX_POINTS = 480
# the values of the $names the queries use
PARAMS: dict[str, Any] = {
    "max_points": MAX_POINTS,
    "signatures": list(EVENT_SIGNATURES),
    "max_events": MAX_EVENTS_PER_KIND,
}


@functools.cache
def queries(folder: Path = SERIES_DIR) -> dict[str, str]:
    """Every query of :data:`QUERIES`, by name, from ``folder``; an install that lost
    any of them is an error naming the folder and the missing files."""
    missing = [n for n in QUERIES if not (folder / f"{n}.sql").is_file()]
    if missing:
        raise RuntimeError(
            f"{folder}: missing chart-series SQL file(s) "
            f"{', '.join(n + '.sql' for n in missing)} - this installation is incomplete; "
            "reinstall leakreport"
        )
    return {n: (folder / f"{n}.sql").read_text(encoding="utf-8") for n in QUERIES}


def _rows(
    con: duckdb.DuckDBPyConnection, name: str, columnar: bool = False
) -> list[tuple[Any, ...]]:
    """The rows of query ``name``. ``columnar``: fetched as Arrow columns and made Python
    values a column at a time, for the queries whose rows hold long lists of numbers (the
    chart series): 1,000 GPUs' week of series in 0.35 s against 0.39 s row by row, 125
    hosts' KV series in 0.10 s against 0.13 s (medians of 7, interleaved)."""
    sql = queries(SERIES_DIR)[name]
    refs = referenced_params(sql)
    params = {k: PARAMS[k] for k in refs} if refs else None
    if not columnar:
        return con.execute(sql, params).fetchall()
    from analyzer.bucket import to_arrow

    table = to_arrow(con.sql(sql, params=params))
    return list(zip(*(c.to_pylist() for c in table.columns), strict=True))


def fill(con: duckdb.DuckDBPyConnection, doc: FindingsDocument) -> None:
    queries(SERIES_DIR)  # a broken install fails here, before any query runs
    rng = _rows(con, "data_range")
    if rng:
        doc.run.data_start, doc.run.data_end = iso_utc(rng[0][0]), iso_utc(rng[0][1])

    meta = {(h, g): (name, total, last) for h, g, name, total, last in _rows(con, "gpu_names")}
    windows: dict[tuple[str, int], list[list[float]]] = {}
    for h, g, s, e, base in _rows(con, "idle_windows"):
        windows.setdefault((h, g), []).append([float(s), float(e), float(round(base))])
    trends: dict[tuple[str, int], list[list[float]]] = {}
    for h, g, t0, t1, b0, slope in _rows(con, "idle_trend"):
        if b0 is None or any(math.isnan(x) for x in (t0, t1, b0, slope)):
            continue
        trends.setdefault((h, g), []).append(
            [float(t0), float(round(b0)), float(t1), float(round(b0 + slope * (t1 - t0)))]
        )
    for h, g, t, used_max, used_min in _rows(con, "gpu_series", columnar=True):
        name, total, last = meta.get((h, g), (None, None, None))
        doc.series.append(
            GpuSeries(
                host=str(h),
                gpu=int(g),
                gpu_name=name,
                total_bytes=None if total is None else int(total),
                t=t,
                used_max=used_max,
                used_min=used_min,
                idle_windows=windows.get((h, g), []),  # type: ignore[arg-type]
                trend=trends.get((h, g), []),  # type: ignore[arg-type]
                last_t=None if last is None else float(last),
            )
        )

    gpus = {h: (n, name, first, last) for h, n, name, first, last in _rows(con, "host_gpus")}
    servers = {h: row for h, *row in _rows(con, "host_servers")}
    # every host the analysis read rows of (coverage.build ran first), GPU samples or not:
    # a host with only server logs or allocator-probe samples is one too
    seen = {str(c["host"]) for c in doc.coverage}
    for h in sorted(set(gpus) | set(servers) | seen):
        n, name, first, last = gpus.get(h, (0, None, None, None))
        engine, version, model, mfs, gmu, dfip, tp = servers.get(h, [None] * 7)
        flags: dict[str, object] = {}
        for k, v in (
            ("mem_fraction_static", mfs),
            ("gpu_memory_utilization", gmu),
            ("disable_fast_image_processor", dfip),
            ("tp_size", tp),
        ):
            if v is not None:
                flags[k] = v
        doc.hosts.append(
            HostInfo(
                host=h,
                engine=engine,
                engine_version=version,
                model=model,
                gpu_name=name,
                gpus=int(n),
                flags=dict(sorted(flags.items())),
                first_ts=iso_utc(first),
                last_ts=iso_utc(last),
            )
        )

    for h, ts, kind, text in _rows(con, "log_events"):
        doc.events.append(Event(host=h, ts=iso_utc(ts) or "", kind=kind, text=text[:2000]))
    doc.run.gaps = stale_hosts(doc) + source_failures(con)
    date_stale_forecasts(doc)
    doc.kv += [
        KvSeries(str(h), t, [round(float(x), 4) for x in v])
        for h, t, v in _rows(con, "kv_series", columnar=True)
    ]
    fill_allocator(con, doc)


SNAPSHOT_HINT = "open it at https://pytorch.org/memory_viz"


def fill_allocator(con: duckdb.DuckDBPyConnection, doc: FindingsDocument) -> None:
    """Allocator-probe series (bin floors, at most MAX_POINTS per process) and snapshots."""
    for host, pid, device, gpu, role, t, a, r, n in _rows(con, "alloc_series"):
        step = max(1, math.ceil(len(t) / MAX_POINTS))
        doc.alloc.append(
            AllocSeries(
                host, int(pid), int(device), gpu, role,
                [float(x) for x in t[::step]], a[::step], r[::step], n[::step],
            )
        )  # fmt: skip
    for host, ts, pid, path in _rows(con, "alloc_snapshots"):
        doc.events.append(
            Event(
                host=host,
                ts=iso_utc(ts) or "",
                kind="memory_snapshot",
                text=f"PyTorch memory snapshot of pid {pid}: {path} ({SNAPSHOT_HINT})",
            )
        )
    doc.events.sort(key=lambda e: (e.host, e.ts))


STALE_MINUTES = 10
STOPPED = "stopped reporting at"
OLD_DATA = "This forecast counts from its last sample, at"
OLD_AFTER = dt.timedelta(hours=1)  # data older than this at the analysis: its forecast is dated


def _ago(d: dt.timedelta) -> str:
    h = d.total_seconds() / 3600
    return f"{h:.0f} h" if h < 48 else f"{h / 24:.0f} days"


def stale_hosts(doc: FindingsDocument) -> list[str]:
    """Hosts whose samples end well before the fleet's do: they stopped reporting."""
    ends = {h.host: h.last_ts for h in doc.hosts if h.last_ts}
    if not ends:
        return []
    fleet_end = max(ends.values())
    end_t = iso_time(fleet_end)
    return [
        f"{h}: no GPU samples after {t} (data runs to {fleet_end})"
        for h, t in sorted(ends.items())
        if (end_t - iso_time(t)).total_seconds() > STALE_MINUTES * 60
    ]


def date_stale_forecasts(doc: FindingsDocument) -> None:
    """An OOM forecast counts from the GPU's last sample: where its host stopped
    reporting (see :func:`stale_hosts`), the summary says from when, and whether that
    time had passed when the fleet's data ends. Marks again from scratch when called
    again (the fan-out marks the merged document with the whole fleet's view)."""
    stale = {g.split(": ", 1)[0] for g in stale_hosts(doc)}
    ends = {h.host: h.last_ts for h in doc.hosts if h.last_ts}
    made = iso_time(doc.run.generated_at) if doc.run.generated_at else None
    for f in doc.findings:
        if f.category != "oom.forecast":
            continue
        mark = f" {f.host} {STOPPED} "
        f.summary = f.summary.split(mark, 1)[0].split(f" {OLD_DATA} ", 1)[0]
        end = ends.get(f.host)
        if f.host not in stale and end and made and made - iso_time(end) > OLD_AFTER:
            # old data: "in about 36 min" must not read as from now
            f.summary += f" {OLD_DATA} {end}, {_ago(made - iso_time(end))} before this analysis."
        if f.host in stale:
            fleet_end = max(ends.values())
            past = f.end is not None and iso_time(f.end) <= iso_time(fleet_end)
            f.summary += f"{mark}{ends[f.host]}: this forecast counts from then" + (
                f"; that time had passed by {fleet_end}, where the fleet's data ends."
                if past
                else "."
            )


def source_failures(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Collector sources that failed, per host, with the last error; allocator probe
    records dropped while its spool was full."""
    try:
        dropped = _rows(con, "alloc_dropped")
    except duckdb.CatalogException:  # a connection without the raw tables (the chart tests)
        dropped = []
    return [
        f"{host}: source {source} failed in {n} of {total} collector runs (last: {(err or '')[:200]})"
        for host, source, n, total, err in _rows(con, "source_failures")
    ] + [
        f"{host}: the allocator probe dropped {plural(int(n), 'record')} of "
        f"{plural(procs, 'process', 'processes')} while its spool was full (is "
        "`leakcollect run --probe-spool` moving it into the bucket?)"
        for host, n, procs in dropped
    ]
