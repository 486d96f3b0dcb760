"""The one vocabulary of finding categories and severities."""

from __future__ import annotations

CATEGORIES: dict[str, str] = {
    "leak.gpu": "GPU memory leak",
    "leak.kv_pool": "KV-cache pool pages not reclaimed",
    "leak.host_rss": "Host memory (RSS) leak of the server process",
    "leak.cuda_context": "CUDA contexts or memory held by exited processes",
    "leak.outside_allocator": "GPU memory outside PyTorch's allocator keeps growing",
    "cache.growth": "Allocator cache growth (not a leak)",
    "known_bug.fast_image_processor": "Known bug: SGLang fast image processor leak",
    "oom.forecast": "Out of memory forecast",
    "oom.event": "Out-of-memory event",
    "memory.threshold": "Memory above alert threshold",
    "skew.rank": "One tensor-parallel rank grows, the others do not",
    "restart.masked_leak": "Restarts hide a leak",
    "latency.pressure": "Latency rises with memory pressure",
}

LEAK_CATEGORIES = frozenset(
    c for c in CATEGORIES if c.startswith("leak.") or c.startswith("known_bug.")
)

# Ordered from least to most severe.
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")


def severity_rank(severity: str) -> int:
    try:
        return SEVERITIES.index(severity)
    except ValueError:
        raise ValueError(
            f"unknown severity {severity!r}; use one of {', '.join(SEVERITIES)}"
        ) from None
