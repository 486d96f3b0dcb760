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


def _with_gaps(raw: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """The kept lines with an empty line wherever the file had lines the collector
    dropped, so the parser joins only lines that were adjacent in the file (a wrapped
    record), never two kept lines that had others between them. Returns the text and,
    per kept row, its 1-based line number in that text."""
    size = pl.col("text").str.len_bytes()
    adjacent = (
        (pl.col("host") == pl.col("host").shift(1))
        & (pl.col("file") == pl.col("file").shift(1))
        & (
            (pl.col("offset") == pl.col("offset").shift(1) + size.shift(1) + 1)
            | (pl.col("offset") == pl.col("offset").shift(1) + size.shift(1) + 2)  # CRLF
        )
    ).fill_null(False)
    gap = (~adjacent).cast(pl.Int64)
    gap = pl.when(pl.int_range(pl.len()) == 0).then(0).otherwise(gap)
    pos = raw.select((pl.int_range(pl.len()) + gap.cum_sum()).alias("pos"))["pos"]
    n = int(pos[-1]) + 1
    text = pl.Series("text", [""] * n, dtype=pl.String).scatter(pos, raw["text"].fill_null(""))
    return text, pos + 1


def build(con: duckdb.DuckDBPyConnection) -> int:
    """Create ``log_events``; returns its row count."""
    raw = pl.from_arrow(
        to_arrow(
            con.sql(
                'SELECT host, ts, file, "offset", text FROM log_lines '
                'ORDER BY host, file, "offset", ts, inode, line_id, text'
            )
        )
    )
    assert isinstance(raw, pl.DataFrame)
    text, line_of_row = _with_gaps(raw) if raw.height else (raw["text"], raw["text"])
    frame = logparse.parse_frame(text) if raw.height else pl.DataFrame()
    if frame.height:
        keys = (
            raw.drop("text")
            .with_columns(line_of_row.alias("line"))
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
    con.execute(_SERVER_INFO)
    return out.height


# What the servers' own logs say about their configuration, shaped like ``processes``
# rows (pid unknown), so server_info and the fleet cohorts carry the flags of servers
# seen only through their logs (vLLM states its flags in "non-default args" and the
# engine-config line; SGLang in its ServerArgs dump).
_SERVER_INFO = """
CREATE OR REPLACE VIEW log_server_info AS
SELECT a.ts, a.host, CAST(NULL AS BIGINT) AS pid, a.engine,
       (SELECT arg_max(v.version, (v.ts, v.file, v."offset")) FROM log_events v
         WHERE v.host = a.host AND v.event = 'engine_version') AS engine_version,
       a.model_path AS model, a.mem_fraction_static, a.gpu_memory_utilization,
       a.disable_fast_image_processor, CAST(a.tp_size AS INTEGER) AS tp_size,
       CAST(json_object('max_model_len', a.max_model_len, 'enforce_eager', a.enforce_eager,
                        'source', 'log') AS VARCHAR) AS flags_json,
       a.file AS log_file, a."offset" AS log_offset  -- which of lines read at one instant is last
FROM log_events a
WHERE a.event = 'server_args'
"""
