"""Turn the bucket's raw log lines into a typed ``log_events`` table.

The collector keeps raw lines; parsing happens here with the same parser as
``leakreport logs parse``, so last month's traces benefit from today's parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb

from analyzer.bucket import to_arrow

if TYPE_CHECKING:  # polars (and the parser) load only when there are lines to parse
    import polars as pl

# Column types of log_events (fields of every event type, nullable), as DuckDB types.
COLUMNS: dict[str, str] = {
    "host": "VARCHAR",
    "ts": "TIMESTAMPTZ",
    "file": "VARCHAR",
    "offset": "BIGINT",
    "event": "VARCHAR",
    "engine": "VARCHAR",
    "line_ts": "VARCHAR",
    "text": "VARCHAR",
    "running_reqs": "BIGINT",
    "queue_reqs": "BIGINT",
    "kv_usage_ratio": "DOUBLE",
    "gen_throughput": "DOUBLE",
    "num_tokens": "BIGINT",
    "pool": "VARCHAR",
    "available_size": "BIGINT",
    "max_total_num_tokens": "BIGINT",
    "evictable_size": "BIGINT",
    "protected_size": "BIGINT",
    "tried_bytes": "BIGINT",
    "gpu": "BIGINT",
    "total_bytes": "BIGINT",
    "free_bytes": "BIGINT",
    "allocated_bytes": "BIGINT",
    "reserved_bytes": "BIGINT",
    "cached_bytes": "BIGINT",
    "mem_fraction_static": "DOUBLE",
    "disable_fast_image_processor": "BOOLEAN",
    "model_path": "VARCHAR",
    "tp_size": "BIGINT",
    "gpu_memory_utilization": "DOUBLE",
    "max_model_len": "BIGINT",
    "enforce_eager": "BOOLEAN",
    "enabled": "BOOLEAN",
    "version": "VARCHAR",
    "kv_tokens": "BIGINT",
    "gpu_blocks": "BIGINT",
    "kv_cache_bytes": "BIGINT",
    "max_concurrency": "DOUBLE",
}


def polars_columns() -> dict[str, pl.DataType]:
    """:data:`COLUMNS` as polars types."""
    import polars as pl

    types: dict[str, pl.DataType] = {
        "VARCHAR": pl.String(),
        "TIMESTAMPTZ": pl.Datetime("us", "UTC"),
        "BIGINT": pl.Int64(),
        "DOUBLE": pl.Float64(),
        "BOOLEAN": pl.Boolean(),
    }
    return {c: types[t] for c, t in COLUMNS.items()}


def _with_gaps(raw: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """The kept lines with an empty line wherever the file had lines the collector
    dropped, so the parser joins only lines that were adjacent in the file (a wrapped
    record), never two kept lines that had others between them. Returns the text and,
    per kept row, its 1-based line number in that text."""
    import polars as pl

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
    if not con.execute("SELECT 1 FROM log_lines LIMIT 1").fetchall():
        cols = ", ".join(f'"{c}" {t}' for c, t in COLUMNS.items())
        con.execute(f"CREATE OR REPLACE TABLE log_events ({cols})")
        con.execute(_SERVER_INFO)
        return 0
    import polars as pl

    from analyzer import logparse

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
            for c, t in polars_columns().items()
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
