"""Chart data for the findings document: hosts, downsampled series, events.

Reads the rollups only (never the raw samples again) and downsamples with
polars, keeping each chunk's peak and trough so spikes survive.
"""

from __future__ import annotations

import datetime as dt
import math

import duckdb
import polars as pl

from analyzer.bucket import to_arrow
from analyzer.findings import (
    AllocSeries,
    Event,
    FindingsDocument,
    GpuSeries,
    HostInfo,
    KvSeries,
    iso_utc,
)

MAX_POINTS = 480
EVENT_SIGNATURES = (
    "oom",
    "kv_leak_check",
    "restart",
    "server_args",
    "image_processor",
    "engine_version",
)
MAX_EVENTS_PER_HOST = 60


def _frame(con: duckdb.DuckDBPyConnection, sql: str) -> pl.DataFrame:
    out = pl.from_arrow(to_arrow(con.sql(sql)))
    assert isinstance(out, pl.DataFrame)
    return out


def downsample(df: pl.DataFrame, max_points: int = MAX_POINTS) -> pl.DataFrame:
    """Per (host, gpu_index): at most ``max_points`` rows of t, used_max, used_min."""
    counts = df.group_by("host", "gpu_index").len()
    df = df.join(counts, on=["host", "gpu_index"])
    df = df.sort("host", "gpu_index", "t").with_columns(
        (pl.int_range(pl.len()).over("host", "gpu_index")).alias("i"),
    )
    df = df.with_columns(
        (
            pl.col("i") // (pl.col("len") / max_points).ceil().cast(pl.Int64).clip(lower_bound=1)
        ).alias("chunk")
    )
    return (
        df.group_by("host", "gpu_index", "chunk", maintain_order=True)
        .agg(pl.col("t").first(), pl.col("used_max").max(), pl.col("used_min").min())
        .sort("host", "gpu_index", "t")
    )


def fill(con: duckdb.DuckDBPyConnection, doc: FindingsDocument) -> None:
    rng = con.execute("SELECT min(b), max(b_end) FROM gpu_buckets").fetchall()[0]
    if rng:
        doc.run.data_start, doc.run.data_end = iso_utc(rng[0]), iso_utc(rng[1])

    # a first reduction in DuckDB (at most 2 x MAX_POINTS rows per GPU reach polars)
    raw = _frame(
        con,
        f"""SELECT g.host, g.gpu_index, epoch(min(g.b)) AS t, max(g.used_max) AS used_max,
                   min(g.used_min) AS used_min
            FROM gpu_buckets g
            JOIN (SELECT i.host, i.gpu_index,
                         CAST(floor(epoch(i.first_ts) / s.bucket_s) AS BIGINT) AS bi0,
                         CAST(greatest(1, ceil((epoch(i.last_ts) - epoch(i.first_ts))
                                               / s.bucket_s / {2 * MAX_POINTS})) AS BIGINT) AS step
                  FROM gpu_info i, rollup_settings s) c
              USING (host, gpu_index)
            GROUP BY g.host, g.gpu_index, (g.bi - c.bi0) // c.step
            ORDER BY g.host, g.gpu_index, t""",
    )
    meta = {
        (h, g): (name, total)
        for h, g, name, total in con.execute(
            "SELECT host, gpu_index, gpu_name, total FROM gpu_info"
        ).fetchall()
    }
    windows: dict[tuple[str, int], list[list[float]]] = {}
    for h, g, s, e, base in con.execute(
        'SELECT host, gpu_index, epoch(start), epoch("end"), baseline FROM idle_windows ORDER BY host, gpu_index, start'
    ).fetchall():
        windows.setdefault((h, g), []).append([float(s), float(e), float(round(base))])
    trends: dict[tuple[str, int], list[list[float]]] = {}
    for h, g, t0, t1, b0, slope in con.execute(
        "SELECT host, gpu_index, t0, t1, intercept_bytes, slope_bps FROM idle_trend WHERE n >= 3 "
        "ORDER BY host, gpu_index, t0"
    ).fetchall():
        if b0 is None or any(math.isnan(x) for x in (t0, t1, b0, slope)):
            continue
        trends.setdefault((h, g), []).append(
            [float(t0), float(round(b0)), float(t1), float(round(b0 + slope * (t1 - t0)))]
        )
    if raw.height:
        small = downsample(raw)
        for (h, g), part in small.group_by("host", "gpu_index", maintain_order=True):
            name, total = meta.get((h, g), (None, None))
            doc.series.append(
                GpuSeries(
                    host=str(h),
                    gpu=int(g),  # type: ignore[call-overload]
                    gpu_name=name,
                    total_bytes=None if total is None else int(total),
                    t=[float(x) for x in part["t"]],
                    used_max=[int(x) for x in part["used_max"]],
                    used_min=[int(x) for x in part["used_min"]],
                    idle_windows=windows.get((h, g), []),  # type: ignore[arg-type]
                    trend=trends.get((h, g), []),  # type: ignore[arg-type]
                )
            )

    gpus = {
        h: (n, name, first, last)
        for h, n, name, first, last in con.execute(
            "SELECT host, count(*), any_value(gpu_name), min(first_ts), max(last_ts) FROM gpu_info GROUP BY host"
        ).fetchall()
    }
    servers = {
        h: row
        for h, *row in con.execute(
            "SELECT host, arg_max(engine, last_ts), arg_max(engine_version, last_ts), arg_max(model, last_ts), "
            "arg_max(mem_fraction_static, last_ts), "
            "arg_max(gpu_memory_utilization, last_ts), arg_max(disable_fast_image_processor, last_ts), "
            "arg_max(tp_size, last_ts) FROM server_info GROUP BY host"
        ).fetchall()
    }
    for h in sorted(set(gpus) | set(servers)):
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

    placeholders = ", ".join("?" for _ in EVENT_SIGNATURES)
    for h, ts, kind, text in con.execute(
        f"""SELECT host, ts, signature, text FROM (
              SELECT *, row_number() OVER (PARTITION BY host ORDER BY ts DESC, "offset" DESC) AS r
              FROM log_lines WHERE signature IN ({placeholders}))
            WHERE r <= {MAX_EVENTS_PER_HOST} ORDER BY host, ts, "offset" """,
        list(EVENT_SIGNATURES),
    ).fetchall():
        doc.events.append(Event(host=h, ts=iso_utc(ts) or "", kind=kind, text=text[:2000]))
    doc.run.gaps = stale_hosts(doc) + source_failures(con)
    # KV usage: :func:`downsample`'s chunks (row i of a host's n goes to chunk
    # i // ceil(n / MAX_POINTS)), reduced in DuckDB: a month of minutes never leaves it
    kv: dict[str, tuple[list[float], list[float]]] = {}
    for h, t, v in con.execute(
        f"""SELECT host, min(t) AS t, max(v) FROM (
              SELECT host, epoch(ts) AS t, kv_usage AS v,
                     (row_number() OVER (PARTITION BY host ORDER BY ts) - 1)
                       // greatest(1, CAST(ceil(count(*) OVER (PARTITION BY host) / {MAX_POINTS})
                                           AS BIGINT)) AS chunk
              FROM kv_usage)
            GROUP BY host, chunk ORDER BY host, t"""
    ).fetchall():
        ts, vs = kv.setdefault(str(h), ([], []))
        ts.append(float(t))
        vs.append(round(float(v), 4))
    doc.kv += [KvSeries(h, ts, vs) for h, (ts, vs) in kv.items()]
    fill_allocator(con, doc)


SNAPSHOT_HINT = "open it at https://pytorch.org/memory_viz"


def fill_allocator(con: duckdb.DuckDBPyConnection, doc: FindingsDocument) -> None:
    """Allocator-probe series (bin floors, at most MAX_POINTS per process) and snapshots."""
    rows = con.execute(
        """SELECT host, pid, device, any_value(gpu_index), any_value(role),
                  list(epoch(b) ORDER BY b), list(alloc_floor ORDER BY b),
                  list(reserved_floor ORDER BY b), list(nvml_floor ORDER BY b)
           FROM alloc_bins GROUP BY host, pid, device ORDER BY host, pid, device"""
    ).fetchall()
    for host, pid, device, gpu, role, t, a, r, n in rows:
        step = max(1, math.ceil(len(t) / MAX_POINTS))
        doc.alloc.append(
            AllocSeries(
                host, int(pid), int(device), gpu, role,
                [float(x) for x in t[::step]], a[::step], r[::step], n[::step],
            )
        )  # fmt: skip
    for host, ts, pid, path in con.execute(
        "SELECT host, ts, pid, path FROM allocator_snapshots ORDER BY host, ts"
    ).fetchall():
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


def stale_hosts(doc: FindingsDocument) -> list[str]:
    """Hosts whose samples end well before the fleet's do: they stopped reporting."""
    ends = {h.host: h.last_ts for h in doc.hosts if h.last_ts}
    if not ends:
        return []
    fleet_end = max(ends.values())
    end_t = dt.datetime.fromisoformat(fleet_end.replace("Z", "+00:00"))
    return [
        f"{h}: no GPU samples after {t} (data runs to {fleet_end})"
        for h, t in sorted(ends.items())
        if (end_t - dt.datetime.fromisoformat(t.replace("Z", "+00:00"))).total_seconds()
        > STALE_MINUTES * 60
    ]


def source_failures(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Collector sources that failed, per host, with the last error."""
    return [
        f"{host}: source {source} failed in {n} of {total} collector runs (last: {(err or '')[:200]})"
        for host, source, n, total, err in con.execute(
            """SELECT host, source, count(*) FILTER (WHERE status = 'failed') AS n, count(*) AS total,
                      arg_max(error, ts) FILTER (WHERE status = 'failed') AS err
               FROM collector_runs GROUP BY host, source HAVING n > 0 ORDER BY host, source"""
        ).fetchall()
    ]
