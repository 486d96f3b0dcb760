"""What SGLang, vLLM and PyTorch write, as patterns: recognisers, fields and prefixes.

Tables only; the parser (``analyzer.logparse``) applies them. Every form here was
seen in real logs (see tests/corpus, each block with its source). Patterns are
searched anywhere in a line (no positions), fields are found by their key.
"""

from __future__ import annotations

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
RECOGNISE: dict[str, str] = {
    # token_to_kv_pool_allocator / req_to_token_pool / "KV cache pool" / "SWA Pool Mem" / "pool memory"
    "kv_leak_check": r"[Pp]ool\w* (?:[Mm]em(?:ory)? )?[Ll]eak [Dd]etected",
    "oom": (
        r"(?:CUDA|HIP) out of memory|OutOfMemoryError|CUDA error: ?out of memory|cuda runtime error \(2\)"
        r"|error=2 : out of memory|Tried to allocate [\d.]+ ?\w+ \(GPU \d+;"
    ),
    "server_args": (
        r"ServerArgs\(|non-default args: \{|\bargs: Namespace\(|LLM engine (?:\(v[^)]*\) )?with config:"
    ),
    "fast_image_processor": r"[Ff]ast (?:image )?processor|[Ss]low (?:image )?processor|use_fast",
    "engine_version": (
        r"vLLM (?:API )?server version|LLM engine \(v\d|\bvLLM version \d|█ +version \d"
        r"|\b(?:sglang|SGLang)(?:==| version:? v?)\d"
    ),
    "batch_stats": r"(?:Prefill|Decode) batch[.,]|new fill batch|Avg prompt throughput:",
    "kv_capacity": (
        r"KV Cache is allocated|(?:^|\s)max_total_num_tokens=|(?:GPU|cuda|npu|xpu|hpu) blocks: \d|"
        r"kv_cache_size=|GPU KV cache size:|(?i:available KV cache memory)[: (]|kv cache memory in use is|"
        r"full_layer_tokens=|Maximum concurrency for [\d,]+ tokens|reserved for KV Cache is|"
        r"tokens that can be stored in KV cache \("
    ),
}

# Every line a recogniser above matches contains one of these (case as written): one
# cheap pass drops the lines no recogniser could name (most lines of a busy log). The
# regex engine searches a set of plain strings many at a time; ignoring case would cost
# three times as much, so only the one recogniser that ignores case does so here.
_SCREEN_WORDS = [
    "eak detected",
    "eak Detected",
    "out of memory",
    "OutOfMemoryError",
    "cuda runtime error",
    "Tried to allocate",
    "ServerArgs(",
    "non-default args: {",
    "args: Namespace(",
    "with config:",
    "processor",
    "use_fast",
    "version",
    "sglang==",
    "SGLang==",
    "LLM engine (v",
    " batch",
    "Avg prompt throughput:",
    "KV Cache is allocated",
    "max_total_num_tokens=",
    " blocks: ",
    "kv_cache_size=",
    "KV cache size:",
    "kv cache memory in use is",
    "full_layer_tokens=",
    "Maximum concurrency for",
    "reserved for KV Cache is",
    "tokens that can be stored in KV cache (",
]
SCREEN = (
    "|".join("".join("\\" + c if c in r"\.+*?()|[]{}^$" else c for c in w) for w in _SCREEN_WORDS)
    + "|(?i:available KV cache memory)"
)

# Lines that quote source code in a traceback never state an event.
CODE_LINE = r"^\s*(?:assert|raise|return|yield) |^\s*File \""
# A server's request log (SGLang --log-requests, vLLM's request logger) quotes what users
# sent and got: their text may say anything ("CUDA out of memory", "ServerArgs("), so such
# a line is never an event. Looked for in a line's first REQUEST_HEAD characters.
REQUEST_LINE = (
    r"\b(?:Receive|Finish): obj=\w+\(|\bReceived request \S+: |\bGenerated response \S+: "
)
REQUEST_HEAD = 400
# terminal colour codes, taken out of a line before anything is read from it
ANSI = r"\x1b\[[0-?]*[ -/]*[@-~]"

SIZE = r"([\d.]+) ?(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b"
UNITS = {
    "bytes": 1,
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


def _kv(*keys: str, value: str) -> str:
    """``key=value`` (ServerArgs, Namespace, engine config) or ``'key': value`` (dicts),
    for any of ``keys``, in one pattern: one scan of a long configuration line."""
    alts = "|".join(rf"\b{k}=|'{k}': " for k in keys)
    return rf"(?:{alts}){value}"


_STR = r"'([^']*)'"
_BOOL = r"(True|False)"

# field -> (kind, [patterns]); kind: int, float, str, bool, bytes, pct (percent -> ratio), lower
FIELDS: dict[str, dict[str, tuple[str, list[str]]]] = {
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
        "pool": (
            "lower",
            [
                r"\[(\w+)\] total=",
                r"(?i)\b((?:KV cache |SWA |mamba )?\w*pool\w*) (?:mem(?:ory)? )?leak detected",
            ],
        ),
        "available_size": (
            "int",
            [r"(?:\b|full_)available_size(?:\(\))?=(\d+)", r"\bavailable=(\d+)"],
        ),
        "max_total_num_tokens": (
            "int",
            [
                r"max_total_num_tokens?=(\d+)",
                r"\btotal_size=(\d+)",
                r"\btotal=(\d+)",
                r"token_to_kv_pool_allocator\.size=(\d+)",
            ],
        ),
        "evictable_size": (
            "int",
            [r"(?:\b|full_)evictable_size(?:\(\))?=(\d+)", r"\bevictable=(\d+)"],
        ),
        "protected_size": (
            "int",
            [r"(?:\b|full_)protected_size(?:\(\))?=(\d+)", r"\bprotected=(\d+)"],
        ),
    },
    "oom": {
        "tried_bytes": ("bytes", [r"Tried to allocate " + SIZE]),
        "gpu": ("int", [r"\bGPU (\d+)"]),
        "total_bytes": (
            "bytes",
            [r"total capaci?ty of " + SIZE, SIZE + r" total capacity"],
        ),
        "free_bytes": ("bytes", [r"of which " + SIZE + r" is free", SIZE + r" free\b"]),
        "allocated_bytes": (
            "bytes",
            [SIZE + r" is allocated by PyTorch", SIZE + r" already allocated"],
        ),
        "reserved_bytes": (
            "bytes",
            [SIZE + r" reserved in total", SIZE + r" is reserved by PyTorch"],
        ),
        "cached_bytes": ("bytes", [SIZE + r" cached\b"]),
    },
    "server_args": {
        "mem_fraction_static": ("float", [_kv("mem_fraction_static", value=r"([\d.]+)")]),
        "disable_fast_image_processor": (
            "bool",
            [_kv("disable_fast_image_processor", value=_BOOL)],
        ),
        "model_path": (
            "str",
            [_kv("model_path", "model", "model_tag", value=_STR), r'\bmodel_path="([^"]*)"'],
        ),
        "tp_size": ("int", [_kv("tp_size", "tensor_parallel_size", value=r"(\d+)")]),
        "gpu_memory_utilization": ("float", [_kv("gpu_memory_utilization", value=r"([\d.]+)")]),
        "max_model_len": (
            "int",
            [_kv("max_model_len", "max_seq_len", "context_length", value=r"(\d+)")],
        ),
        "enforce_eager": ("bool", [_kv("enforce_eager", value=_BOOL)]),
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
                r"(?:server |vLLM |█ +)version v?(\d+\.\d+[\w.+-]*)",
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
                r"tokens that can be stored in KV cache \((\d+)\)",
            ],
        ),
        "gpu_blocks": ("int", [r"(?:GPU|cuda|npu|xpu|hpu) blocks: *(\d+)"]),
        "kv_cache_bytes": (
            "bytes",
            [
                r"kv_cache_size=" + SIZE,
                r"(?i)available KV cache memory:? *\(?" + SIZE,
                r"kv cache memory in use is " + SIZE,
                r"reserved for KV Cache is " + SIZE,
            ],
        ),
        "max_concurrency": (
            "float",
            [r"Maximum concurrency for [\d,]+ tokens per request: *([\d.]+)x"],
        ),
    },
}

# A line that starts a new record (so it does not continue the line before it).
NEW_RECORD = (
    r"^(?:\[|\(|\{|#|\d{4}-\d\d-\d\d|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b|Traceback"
    r"|[\w.]*(?:Error|Exception|Warning|Interrupt)\b|[\w.-]+ +\| "
    # an indented line continues unless it is traceback or source (or a prefixed record)
    r"|\s+(?:[\[({]|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b|\d|File \"|[\^~]|\S*\.py\b|.*[(=,]\s*$))"
)
MAX_CONTINUATION = 5

# Stamps. OUTER: a shipper's/collector's stamp at the very start (docker --timestamps, CRI,
# a log viewer's "date | "). The engine's own stamp is searched in the rest of the line.
OUTER = (
    r"^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,]\d+)?(Z|[+-]\d\d:?\d\d)?"
    r"(?: +(?:stdout|stderr) [FP])?(?: +\|)? "
)
FULL = r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,]\d+)?(?: ?(Z|[+-]\d\d:?\d\d)\b)?"
MONTH_DAY = r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})"

SGLANG = (
    r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[^\]]*\]|\[rank=\d+\]|ServerArgs\(|token_to_kv_pool"
    r"|req_to_token_pool|(?:Prefill|Decode) batch|new fill batch|(?i:sglang)"
)
VLLM = (
    r"(?:INFO|WARNING|ERROR|DEBUG) \d{2}-\d{2} \d{2}:\d{2}:\d{2} \[?\w+\.py:\d+\]|Engine \d+:"
    r"|(?i:vllm)|\((?:APIServer|EngineCore\w*|VllmWorkerProcess|Worker\w*) pid=\d+\)"
    r"|non-default args: \{|LLM engine \(v"
)
