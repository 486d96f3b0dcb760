"""Parse SGLang / vLLM / PyTorch log text into events, vectorised with polars.

Lines are classified by what they say, not where: each event type has a
recognising pattern, and each field is pulled out by its key (``#running-req:``,
``Running: N reqs``, ``mem_fraction_static=``...), so reordered, truncated or
newer formats still yield what they carry. Lines that match nothing produce
nothing; nothing stops the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

EVENT_TYPES = (
    "kv_leak_check",
    "oom",
    "server_args",
    "fast_image_processor",
    "engine_version",
    "batch_stats",
    "kv_capacity",
)

# Recognisers in priority order (the first that matches names the line).
_RECOGNISE: dict[str, str] = {
    "kv_leak_check": r"memory leak detected",
    "oom": r"(?i)CUDA out of memory|OutOfMemoryError|Tried to allocate [\d.]+ ?\w+ \(GPU \d+;",
    "server_args": r"ServerArgs\(",
    "fast_image_processor": r"(?i)fast (?:image )?processor|slow (?:image )?processor|use_fast",
    "engine_version": r"vLLM API server version|LLM engine \(v\d|\bvLLM version \d|(?i:\bsglang(?:==| version:? v?)\d)",
    "batch_stats": r"(?:Prefill|Decode) batch[.,]|new fill batch|Avg prompt throughput:",
    "kv_capacity": (
        r"KV Cache is allocated|^\S*\s*max_total_num_tokens=|\] max_total_num_tokens=|GPU blocks: \d|"
        r"kv_cache_size=|GPU KV cache size:|(?i:available KV cache memory)[: (]|kv cache memory in use is|full_layer_tokens="
    ),
}

_SIZE = r"([\d.]+) ?(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)"
_UNITS = {
    "B": 1,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "KB": 2**10,
    "MB": 2**20,
    "GB": 2**30,
    "TB": 2**40,
}

# field -> (kind, [patterns]); kind: int, float, str, bool, bytes, pct (percent -> ratio)
_FIELDS: dict[str, dict[str, tuple[str, list[str]]]] = {
    "batch_stats": {
        "running_reqs": ("int", [r"#running[-_]req: *(\d+)", r"Running: *(\d+) reqs"]),
        "queue_reqs": (
            "int",
            [r"#queue[-_]req: *(\d+)", r"Pending: *(\d+) reqs", r"Waiting: *(\d+) reqs"],
        ),
        "kv_usage_ratio": ("float", [r"token usage: *([\d.]+)"]),
        "kv_usage_pct": ("pct", [r"GPU KV cache usage: *([\d.]+)%"]),
        "gen_throughput": (
            "float",
            [r"gen throughput \(token/s\): *([\d.]+)", r"Avg generation throughput: *([\d.]+)"],
        ),
        "num_tokens": ("int", [r"#token: *(\d+)"]),
    },
    "kv_leak_check": {
        "pool": ("str", [r"(\w+) memory leak detected"]),
        "available_size": ("int", [r"available_size=(\d+)"]),
        "max_total_num_tokens": ("int", [r"max_total_num_tokens=(\d+)", r"total_size=(\d+)"]),
        "evictable_size": ("int", [r"evictable_size=(\d+)"]),
        "protected_size": ("int", [r"protected_size=(\d+)"]),
    },
    "oom": {
        "tried_bytes": ("bytes", [r"Tried to allocate " + _SIZE]),
        "gpu": ("int", [r"GPU (\d+)"]),
        "total_bytes": ("bytes", [r"total capacity of " + _SIZE, _SIZE + r" total capacity"]),
        "free_bytes": ("bytes", [r"of which " + _SIZE + r" is free", _SIZE + r" free;"]),
        "allocated_bytes": (
            "bytes",
            [_SIZE + r" is allocated by PyTorch", _SIZE + r" already allocated"],
        ),
        "reserved_bytes": (
            "bytes",
            [_SIZE + r" reserved in total", _SIZE + r" is reserved by PyTorch"],
        ),
    },
    "server_args": {
        "mem_fraction_static": ("float", [r"\bmem_fraction_static=([\d.]+)"]),
        "disable_fast_image_processor": ("bool", [r"\bdisable_fast_image_processor=(True|False)"]),
        "model_path": ("str", [r"\bmodel_path='([^']*)'", r'\bmodel_path="([^"]*)"']),
        "tp_size": ("int", [r"\btp_size=(\d+)"]),
    },
    "fast_image_processor": {
        "enabled": (
            "bool",
            [
                r"(?i)(?:loaded as a|using an?|uses? the) (fast) (?:image )?processor",
                r"(?i)(?:loaded as a|using an?|uses? the) (slow) (?:image )?processor",
                r"(?i)\b(fast|slow) image processor",
                r"use_fast=(False|True)",
            ],
        ),
    },
    "engine_version": {
        "version": (
            "str",
            [
                r"version v?(\d+\.\d+[\w.+-]*)",
                r"LLM engine \(v(\d+\.\d+[\w.+-]*)\)",
                r"(?i)sglang(?:==| version:? v?)(\d+\.\d+[\w.+-]*)",
            ],
        ),
    },
    "kv_capacity": {
        "kv_tokens": (
            "int",
            [
                r"#tokens: *(\d+)",
                r"full_layer_tokens=(\d+)",
                r"max_total_num_tokens=(\d+)",
                r"GPU KV cache size: *([\d,]+) tokens",
            ],
        ),
        "gpu_blocks": ("int", [r"GPU blocks: *(\d+)"]),
        "kv_cache_bytes": (
            "bytes",
            [
                r"kv_cache_size=" + _SIZE,
                r"(?i)available KV cache memory:? *\(?" + _SIZE,
                r"kv cache memory in use is " + _SIZE,
            ],
        ),
    },
}

_TS_FULL = r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})"
_TS_VLLM = r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})"
_SGLANG = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[^\]]*\]|\[rank=\d+\]|ServerArgs\(|token_to_kv_pool|req_to_token_pool|(?:Prefill|Decode) batch|new fill batch|(?i:sglang)"
_VLLM = r"(?:INFO|WARNING|ERROR|DEBUG) \d{2}-\d{2} \d{2}:\d{2}:\d{2} \[?\w+\.py:\d+\]|Engine \d+:|(?i:vllm)|\((?:APIServer|EngineCore\w*|VllmWorkerProcess|Worker\w*) pid=\d+\)"


def _first(patterns: list[str], group: int = 1) -> pl.Expr:
    col = pl.col("text")
    exprs = [col.str.extract(p, group) for p in patterns]
    return pl.coalesce(exprs) if len(exprs) > 1 else exprs[0]


def _field_expr(kind: str, patterns: list[str]) -> pl.Expr:
    if kind == "bytes":
        num = _first(patterns, 1).cast(pl.Float64, strict=False)
        unit = _first(patterns, 2).replace_strict(_UNITS, default=None, return_dtype=pl.Float64)
        return (num * unit).round(0).cast(pl.Int64, strict=False)
    raw = _first(patterns)
    if kind == "int":
        return raw.str.replace_all(",", "").cast(pl.Int64, strict=False)
    if kind == "float":
        return raw.cast(pl.Float64, strict=False)
    if kind == "pct":
        return raw.cast(pl.Float64, strict=False) / 100.0
    if kind == "bool":
        return raw.str.to_lowercase().replace_strict(
            {"true": True, "fast": True, "false": False, "slow": False},
            default=None,
            return_dtype=pl.Boolean,
        )
    return raw


def parse_frame(lines: pl.Series, engine: str = "auto", year: int | None = None) -> pl.DataFrame:
    """One row per recognised event: line (1-based), event, engine, ts, and field columns."""
    df = pl.DataFrame({"text": lines.cast(pl.String)}).with_row_index("line", offset=1)
    # comment lines ("# ...") are never events, except vLLM's "# GPU blocks: N"
    text = pl.col("text")
    df = df.filter(~text.str.contains(r"^\s*#") | text.str.contains(r"^\s*# GPU blocks:"))
    event = pl.lit(None, dtype=pl.String)
    for name in reversed(EVENT_TYPES):
        event = (
            pl.when(pl.col("text").str.contains(_RECOGNISE[name]))
            .then(pl.lit(name))
            .otherwise(event)
        )
    df = df.with_columns(event.alias("event")).filter(pl.col("event").is_not_null())
    if engine == "auto":
        eng = (
            pl.when(pl.col("text").str.contains(_SGLANG))
            .then(pl.lit("sglang"))
            .when(pl.col("text").str.contains(_VLLM))
            .then(pl.lit("vllm"))
            .otherwise(pl.lit(None, dtype=pl.String))
        )
    else:
        eng = pl.lit(engine)
    full = pl.col("text").str.extract(_TS_FULL, 1) + "T" + pl.col("text").str.extract(_TS_FULL, 2)
    md = pl.col("text").str.extract(_TS_VLLM, 1) + "T" + pl.col("text").str.extract(_TS_VLLM, 2)
    md_ts = (pl.lit(str(year)) + "-" + md) if year else (pl.lit("--") + md)
    df = df.with_columns(eng.alias("engine"), pl.coalesce(full, md_ts).alias("ts"))
    parts = []
    for name in EVENT_TYPES:
        sub = df.filter(pl.col("event") == name)
        if sub.height == 0:
            continue
        fields = _FIELDS[name]
        sub = sub.with_columns(
            [_field_expr(kind, pats).alias(f) for f, (kind, pats) in fields.items()]
        )
        if name == "batch_stats":  # one KV-usage ratio whatever the engine logged
            sub = sub.with_columns(
                pl.coalesce("kv_usage_ratio", "kv_usage_pct").alias("kv_usage_ratio")
            ).drop("kv_usage_pct")
        parts.append(sub)
        if name == "server_args":  # a ServerArgs dump also states the image processor
            fip = sub.filter(pl.col("disable_fast_image_processor").is_not_null()).select(
                "line",
                "text",
                "engine",
                "ts",
                pl.lit("fast_image_processor").alias("event"),
                (~pl.col("disable_fast_image_processor")).alias("enabled"),
            )
            parts.append(fip)
    if not parts:
        return df.select("line", "event", "engine", "ts", "text").clear()
    out = pl.concat(parts, how="diagonal_relaxed")
    # the engine of a line that does not say falls back to the file's majority
    known = out.filter(pl.col("engine").is_not_null())["engine"]
    if known.len():
        out = out.with_columns(pl.col("engine").fill_null(known.mode().sort()[0]))
    return out.sort("line", "event")


def read_lines(path: str | Path) -> pl.Series:
    """Every line of the file (empty lines kept, so line numbers hold), read in Rust.

    Invalid UTF-8 is replaced. A line containing the unit-separator byte (0x1f) is
    cut there: the reader splits on it."""
    if Path(path).stat().st_size == 0:
        return pl.Series("text", [], dtype=pl.String)
    df = pl.read_csv(
        path,
        has_header=False,
        separator="\x1f",
        quote_char=None,
        new_columns=["text"],
        truncate_ragged_lines=True,
        encoding="utf8-lossy",
        infer_schema=False,
    )
    return df["text"].fill_null("")


def events(frame: pl.DataFrame) -> Iterator[dict[str, Any]]:
    """JSON-ready events: {line, event, engine, ts, fields} with only the fields found."""
    cols = [c for c in frame.columns if c not in ("line", "event", "engine", "ts", "text")]
    for row in frame.iter_rows(named=True):
        wanted = _FIELDS[row["event"]]
        fields = {
            k: row[k]
            for k in cols
            if row[k] is not None
            and (k in wanted or (row["event"] == "fast_image_processor" and k == "enabled"))
        }
        if row["event"] == "batch_stats" and row.get("kv_usage_ratio") is not None:
            fields["kv_usage_ratio"] = round(row["kv_usage_ratio"], 6)
        yield {
            "line": row["line"],
            "event": row["event"],
            "engine": row["engine"],
            "ts": row["ts"],
            "fields": fields,
        }


def to_jsonl(frame: pl.DataFrame) -> str:
    return "".join(json.dumps(e, sort_keys=False) + "\n" for e in events(frame))
