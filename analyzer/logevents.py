"""Turn the bucket's raw log lines into a typed ``log_events`` table.

The collector keeps raw lines; parsing happens here with the same parser as
``leakreport logs parse``, so last month's traces benefit from today's parser.
"""

from __future__ import annotations

import duckdb
import polars as pl

from analyzer import logparse
from analyzer.bucket import to_arrow

# Column types of log_events (fields of every event type, nullable).
COLUMNS: dict[str, pl.DataType] = {
    "host": pl.String(),
    "ts": pl.Datetime("us", "UTC"),
    "file": pl.String(),
    "offset": pl.Int64(),
    "event": pl.String(),
    "engine": pl.String(),
    "line_ts": pl.String(),
    "text": pl.String(),
    "running_reqs": pl.Int64(),
    "queue_reqs": pl.Int64(),
    "kv_usage_ratio": pl.Float64(),
    "gen_throughput": pl.Float64(),
    "num_tokens": pl.Int64(),
    "pool": pl.String(),
    "available_size": pl.Int64(),
    "max_total_num_tokens": pl.Int64(),
    "evictable_size": pl.Int64(),
    "protected_size": pl.Int64(),
    "tried_bytes": pl.Int64(),
    "gpu": pl.Int64(),
    "total_bytes": pl.Int64(),
    "free_bytes": pl.Int64(),
    "allocated_bytes": pl.Int64(),
    "reserved_bytes": pl.Int64(),
    "cached_bytes": pl.Int64(),
    "mem_fraction_static": pl.Float64(),
    "disable_fast_image_processor": pl.Boolean(),
    "model_path": pl.String(),
    "tp_size": pl.Int64(),
    "gpu_memory_utilization": pl.Float64(),
    "max_model_len": pl.Int64(),
    "enforce_eager": pl.Boolean(),
    "enabled": pl.Boolean(),
    "version": pl.String(),
    "kv_tokens": pl.Int64(),
    "gpu_blocks": pl.Int64(),
    "kv_cache_bytes": pl.Int64(),
    "max_concurrency": pl.Float64(),
}


def build(con: duckdb.DuckDBPyConnection) -> int:
    """Create ``log_events``; returns its row count."""
    raw = pl.from_arrow(
        to_arrow(
            con.sql(
                'SELECT host, ts, file, "offset", text FROM log_lines ORDER BY host, file, "offset"'
            )
        )
    )
    assert isinstance(raw, pl.DataFrame)
    frame = logparse.parse_frame(raw["text"]) if raw.height else pl.DataFrame()
    if frame.height:
        keys = (
            raw.drop("text")
            .with_row_index("line", offset=1)
            .with_columns(pl.col("line").cast(frame["line"].dtype))
        )
        frame = frame.rename({"ts": "line_ts"}).join(keys, on="line", how="left")
    out = pl.DataFrame(
        {
            c: (
                frame[c].cast(t, strict=False)
                if c in frame.columns
                else pl.Series(c, [None] * frame.height, dtype=t)
            )
            for c, t in COLUMNS.items()
        }
    )
    con.register("__log_events", out.to_arrow())
    con.execute("CREATE OR REPLACE TABLE log_events AS SELECT * FROM __log_events")
    con.unregister("__log_events")
    return out.height
