"""Which questions a shape of data can answer at all, and why not.

Each finding category needs some input; a shape that lacks it cannot decide
that category (the eval says so instead of scoring it as a miss). A few
scenarios cannot be told apart at all without one input: nvidia-smi reads the
same for allocator cache and a leak outside PyTorch, only the probe can tell.
"""

from __future__ import annotations

from simulator.scenarios import Scenario
from simulator.shapes import PROVIDES

# category -> (tables of which at least one is needed, what it takes to collect them)
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "leak.gpu": (("gpu_samples",), "device memory samples"),
    "cache.growth": (("gpu_samples",), "device memory samples"),
    "oom.forecast": (("gpu_samples",), "device memory samples"),
    "memory.threshold": (("gpu_samples",), "device memory samples"),
    "skew.rank": (("gpu_samples",), "device memory samples"),
    "restart.masked_leak": (("gpu_samples",), "device memory samples"),
    "oom.event": (("log_lines",), "the server log"),
    "leak.kv_pool": (("log_lines", "metric_samples"), "the server log or /metrics"),
    "known_bug.fast_image_processor": (("log_lines", "processes"), "the server log"),
    "leak.host_rss": (
        ("metric_samples", "gpu_processes"),
        "the server's RSS (/metrics or the collector's /proc figures)",
    ),
    "leak.cuda_context": (
        ("gpu_processes",),
        "per-process GPU memory and /proc maps (leakcollect on the host)",
    ),
    "leak.outside_allocator": (("allocator_samples",), "the allocator probe"),
    "latency.pressure": (
        ("metric_samples", "http_probes"),
        "request latency (/metrics or --probe-url)",
    ),
}


def undecidable(s: Scenario, shape: str) -> tuple[str | None, dict[str, str]]:
    """(why the whole scenario cannot be decided in ``shape``, or None;
    {category: why it cannot be decided})."""
    have = PROVIDES[shape]
    whole = None
    lacking = [t for t in s.decided_by if t not in have]
    if lacking:
        whole = f"needs {', '.join(lacking)} to tell it apart ({s.decided_by_why})"
    cats: dict[str, str] = {}
    expected = {*s.expect_gpu, *s.expect_host, *(c for cs in s.expect_gpus.values() for c in cs)}
    for c in sorted(expected):
        tables, what = NEEDS[c]
        if not any(t in have for t in tables):
            cats[c] = f"needs {what}"
    known = "known_bug.fast_image_processor"
    version_known = "processes" in have and s.version_visible
    if known in expected and known not in cats and not version_known and "gpu_samples" not in have:
        # SGLang prints no version line: without the process table only growth names it
        cats[known] = "needs the engine version (leakcollect) or device memory growth"
    return whole, cats


def version_unknown_suspect(s: Scenario, shape: str) -> bool:
    """A shape without the process table knows SGLang's version only if the log says
    it; KB001 then names a vision model with the fast processor on and growing
    memory as a suspect. That is the rule's stated behaviour, not a false alarm."""
    from_procs = "processes" in PROVIDES[shape] and s.version_visible
    vision = "vl" in s.model.lower() or "vision" in s.model.lower()
    grows = s.leak_mib_per_req > 0
    return (
        s.engine == "sglang"
        and not from_procs
        and vision
        and s.fast_image_processor is not False
        and grows
    )
