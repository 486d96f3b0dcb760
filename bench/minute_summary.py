"""Would per-minute summaries written by the collector speed up the analysis? (issue 17:
"measure before deciding").

The analysis's first pass over raw device samples makes ``gpu_info`` (one row per GPU)
and ``gpu_buckets`` (one row per GPU and minute, on spans over a day). A collector could
write, beside each samples file, a summary of it per GPU and minute (min, max, sum and
count of memory used, the greatest total and utilisation, first and last sample), as
this module does from the bucket's files. Both first passes are then timed side by side,
materialised as the rollups are, in one process:

- ``raw``: both tables from the samples (what the analysis does today);
- ``summary``: both from the summaries, regrouped by minute (summaries of two runs can
  share a minute);
- ``summary_unique``: ``gpu_buckets`` read as it is stored (one row per minute already,
  as a compacted host-day's summary would be) and ``gpu_info`` from it: the bound.

The rows are checked equal (count, samples and memory sum) across the three.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

SUMMARY = """COPY (
    SELECT host, gpu_index, CAST(floor(epoch(ts) / 60) AS BIGINT) AS m,
           min(gpu_name) AS gpu_name, min(gpu_uuid) AS gpu_uuid, min(ts) AS first_ts,
           max(ts) AS last_ts, min(memory_used_bytes) AS used_min,
           max(memory_used_bytes) AS used_max, sum(memory_used_bytes) AS used_sum,
           max(memory_total_bytes) AS total, max(utilization_gpu_pct) AS util_max, count(*) AS n
    FROM read_parquet('{src}') WHERE memory_used_bytes IS NOT NULL
    GROUP BY ALL ORDER BY ALL) TO '{dst}' (FORMAT parquet, COMPRESSION zstd)"""

FIRST_PASS = {
    "raw": (
        """CREATE OR REPLACE TABLE gi AS
        SELECT host, gpu_index, min(gpu_name), min(gpu_uuid), max(memory_total_bytes),
               min(ts), max(ts), count(*) FROM read_parquet({raw})
        WHERE memory_used_bytes IS NOT NULL GROUP BY host, gpu_index""",
        """CREATE OR REPLACE TABLE gb AS
        SELECT host, gpu_index, CAST(floor(epoch(ts) / 60) AS BIGINT) AS bi,
               min(memory_used_bytes) AS used_min, max(memory_used_bytes) AS used_max,
               avg(memory_used_bytes) AS used_avg, max(memory_total_bytes) AS total,
               max(utilization_gpu_pct) AS util_max, count(*) AS n
        FROM read_parquet({raw}) WHERE memory_used_bytes IS NOT NULL GROUP BY ALL""",
    ),
    "summary": (
        """CREATE OR REPLACE TABLE gi AS
        SELECT host, gpu_index, min(gpu_name), min(gpu_uuid), max(total), min(first_ts),
               max(last_ts), sum(n) FROM read_parquet({summary}) GROUP BY host, gpu_index""",
        """CREATE OR REPLACE TABLE gb AS
        SELECT host, gpu_index, m AS bi, min(used_min) AS used_min, max(used_max) AS used_max,
               sum(used_sum) / sum(n) AS used_avg, max(total) AS total,
               max(util_max) AS util_max, sum(n) AS n
        FROM read_parquet({summary}) GROUP BY ALL""",
    ),
    "summary_unique": (
        """CREATE OR REPLACE TABLE gb AS
        SELECT host, gpu_index, m AS bi, used_min, used_max, used_sum / n AS used_avg, total,
               util_max, n, gpu_name, gpu_uuid, first_ts, last_ts
        FROM read_parquet({summary})""",
        """CREATE OR REPLACE TABLE gi AS
        SELECT host, gpu_index, min(gpu_name), min(gpu_uuid), max(total), min(first_ts),
               max(last_ts), sum(n) FROM gb GROUP BY host, gpu_index""",
    ),
}


def _list(files: list[str]) -> str:
    return "[" + ", ".join(f"'{f}'" for f in files) + "]"


def summaries(bucket: Path, raw: list[str], con: Any) -> list[str]:
    """One summary file per samples file, under bench/data/<bucket>-minutes, made again
    when the bucket was generated again (its truth.json changed)."""
    import shutil

    out = bucket.parent / f"{bucket.name}-minutes"
    done, made = out / ".done", str((bucket / "truth.json").stat().st_mtime_ns)
    dst = [str(out / Path(f).relative_to(bucket)) for f in raw]
    if not done.exists() or done.read_text() != made:
        shutil.rmtree(out, ignore_errors=True)
        for src, d in zip(raw, dst, strict=True):
            Path(d).parent.mkdir(parents=True, exist_ok=True)
            con.execute(SUMMARY.format(src=src, dst=d))
        done.write_text(made)
    return dst


def measure(bucket: Path, raw: list[str], runs: int, memory_limit: str | None) -> dict[str, Any]:
    """Seconds (median of ``runs``, interleaved) of each first pass; rows; bytes read."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    mins = summaries(bucket, raw, con)
    files = {"raw": _list(raw), "summary": _list(mins)}
    took: dict[str, list[float]] = {k: [] for k in FIRST_PASS}
    rows: dict[str, Any] = {}
    for _ in range(runs):
        for kind, stmts in FIRST_PASS.items():
            t0 = time.perf_counter()
            for stmt in stmts:
                con.execute(stmt.format(**files))
            took[kind].append(time.perf_counter() - t0)
            rows[kind] = con.execute(
                "SELECT count(*), sum(n), sum(used_avg * n) FROM gb"
            ).fetchone()
    first = rows["raw"]
    res: dict[str, Any] = {k: round(statistics.median(v), 3) for k, v in took.items()}
    res["same_rows"] = all(
        r[0] == first[0] and r[1] == first[1] and abs(r[2] - first[2]) <= 1e-9 * abs(first[2])
        for r in rows.values()
    )
    res["mib_raw"] = round(sum(Path(f).stat().st_size for f in raw) / 2**20, 1)
    res["mib_summary"] = round(sum(Path(f).stat().st_size for f in mins) / 2**20, 1)
    return res
