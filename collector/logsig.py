"""The log signature catalogue: which server log lines the collector keeps.

The collector stores facts; this module only tags a line with the first
signature it matches (cheap, no parsing). Interpretation of the fields happens
in the analyzer, so old traces benefit from new parsers.
"""

from __future__ import annotations

import re

# Priority order: the first signature that matches names the line.
SIGNATURES: tuple[tuple[str, str], ...] = (
    ("kv_leak_check", r"memory leak detected"),
    ("oom", r"out of memory|OutOfMemoryError"),
    ("server_args", r"ServerArgs\("),
    (
        "engine_version",
        r"API server version|LLM engine \(v\d|vLLM version|sglang==\d|(?i:sglang version)",
    ),
    (
        "image_processor",
        r"fast (?:image )?processor|slow (?:image )?processor|use_fast=|disable.fast.image.processor",
    ),
    ("batch_stats", r"(?:Prefill|Decode) batch[.,]|new fill batch|Avg prompt throughput:"),
    (
        "kv_capacity",
        r"KV Cache is allocated|max_total_num_tokens=|GPU blocks:|kv_cache_size=|KV cache (?:memory|size)",
    ),
    (
        "memory_info",
        r"[Aa]vail mem=|mem usage=|Memory profiling|Loading model weights took|Model loading took",
    ),
    ("traceback", r"Traceback \(most recent call last\)"),
    (
        "restart",
        r"SIGQUIT received|Started server process|Uvicorn running on|The server is fired up|Application startup complete|Killed process",
    ),
)

_COMPILED = tuple((name, re.compile(rx)) for name, rx in SIGNATURES)
_ANY = re.compile("|".join(f"(?:{rx})" for _, rx in SIGNATURES))

MAX_LINE_BYTES = 64 * 1024


def match(line: str) -> str | None:
    """The name of the first signature the line matches, or None."""
    if not _ANY.search(line):
        return None
    for name, rx in _COMPILED:
        if rx.search(line):
            return name
    return None  # pragma: no cover - _ANY matched, so one of them does
