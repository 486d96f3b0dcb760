"""Named scenarios: how a host behaves, and what the analyzer must conclude.

Numbers follow the field reports summarised in DESIGN §1 and §7.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    engine: str  # "sglang" | "vllm"
    engine_version: str
    model: str
    gpu_name: str
    total_mib: int
    gpus: int = 1
    static_fraction: float = 0.9  # mem_fraction_static (SGLang) / gpu_memory_utilization (vLLM)
    overhead_mib: float = 600.0  # CUDA context, graphs, NCCL outside the static pool
    fast_image_processor: bool | None = None  # SGLang only; None = not applicable
    image_traffic: bool = False
    req_rate: float = 1.0  # requests per second while busy
    busy_s: tuple[int, int] = (240, 540)
    idle_s: tuple[int, int] = (60, 180)
    working_mib: float = 300.0  # transient activations while busy
    leak_mib_per_req: float = 0.0
    cache_max_mib: float = 0.0  # allocator cache that fills once and stays
    cache_tau_req: float = 1500.0
    leak_gpus: tuple[int, ...] | None = None  # GPUs that leak (None = all)
    restart_every_s: int = 0  # scheduled restarts (0 = only after an OOM)
    capture_mib: float = 0.0  # one-time jump (lazy CUDA-graph capture, warmup) ...
    capture_after_req: float = 0.0  # ... after this many requests of a process lifetime
    ctx_leak_every_s: int = 0  # a short-lived worker creates a CUDA context this often
    ctx_mib: float = 0.0  # ... whose memory stays on the GPU after it exits
    kv_leak_per_req: float = 0.0  # KV usage (0-1) not reclaimed, per request
    leak_check_log: bool = False  # SGLang's idle leak check prints when KV pages leak
    rss_leak_mib_per_req: float = 0.0  # host RSS growth of the server process
    host_ram_mib: int = 262144  # the host's memory (for the host-RSS leak's horizon)
    rate_decay: float = 0.0  # request rate falls by this fraction over the trace
    latency_s: float = 0.8  # mean end-to-end latency at rest
    latency_pressure: float = 0.0  # latency x (1 + this x leaked share of headroom)
    traffic: str = "cycles"  # cycles | constant | long_generation | hang
    probe: bool = False  # the allocator probe runs in the server (allocator_samples)
    leak_where: str = "tensors"  # tensors (allocated) | outside (NCCL, cuBLAS: not the allocator)
    probe_url: bool = False  # the collector sends one request per minute (http_probes)
    independent: bool = False  # each GPU runs its own server (tp_size 1), not TP ranks
    version_visible: bool = True  # the collector could read the engine's version
    min_hours: float = 0.0  # simulate at least this long (multi-day stories)
    decided_by: tuple[str, ...] = ()  # tables without which the scenario cannot be told apart
    decided_by_why: str = ""
    # what the analyzer must find: per GPU ("gpu") and for the host ("host")
    expect_gpu: tuple[str, ...] = ()
    expect_host: tuple[str, ...] = ()
    allow: tuple[str, ...] = field(default=())  # may appear, need not
    expect_gpus: dict[int, tuple[str, ...]] = field(default_factory=dict)  # per-GPU override

    @property
    def tp_size(self) -> int:
        return 1 if self.independent else self.gpus


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="healthy-static",
            description="vLLM pre-allocates 90 % of each GPU at start and stays flat.",
            engine="vllm",
            engine_version="0.11.0",
            model="Qwen/Qwen3-8B",
            gpu_name="NVIDIA H100 80GB HBM3",
            total_mib=81559,
            gpus=2,
            static_fraction=0.9,
            overhead_mib=520.0,
            req_rate=3.0,
            working_mib=0.0,
            probe_url=True,
        ),
        Scenario(
            name="cache-warmup",
            description="Memory rises under load while the allocator cache fills, then levels off.",
            engine="sglang",
            engine_version="0.5.4",
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu_name="NVIDIA L40S",
            total_mib=46068,
            static_fraction=0.85,
            req_rate=2.0,
            cache_max_mib=2200.0,
            cache_tau_req=1500.0,
            allow=("cache.growth",),
        ),
        Scenario(
            name="fast-image-processor-leak",
            description=(
                "SGLang 0.4.9.post6 serving Qwen2.5-VL with the fast image processor on: memory "
                "stays put at every idle window and rises with image requests until OOM."
            ),
            engine="sglang",
            engine_version="0.4.9.post6",
            model="Qwen/Qwen2.5-VL-7B-Instruct",
            gpu_name="NVIDIA RTX A4000",
            total_mib=16303,
            static_fraction=0.7,
            fast_image_processor=True,
            image_traffic=True,
            req_rate=1.0,
            leak_mib_per_req=0.77,  # ~20 min to OOM at 4 req/s full load
            cache_max_mib=200.0,
            cache_tau_req=300.0,
            expect_gpu=("leak.gpu", "oom.forecast", "oom.event", "memory.threshold"),
            expect_host=("known_bug.fast_image_processor", "restart.masked_leak"),
        ),
        Scenario(
            name="fast-image-processor-off",
            description="The same image traffic with --disable-fast-image-processor: flat.",
            engine="sglang",
            engine_version="0.4.9.post6",
            model="Qwen/Qwen2.5-VL-7B-Instruct",
            gpu_name="NVIDIA RTX A4000",
            total_mib=16303,
            static_fraction=0.7,
            fast_image_processor=False,
            image_traffic=True,
            req_rate=1.0,
            cache_max_mib=200.0,
            cache_tau_req=300.0,
        ),
        Scenario(
            name="kv-pool-leak",
            description=(
                "SGLang 0.5.3.post3 under high concurrency: KV pages not reclaimed, the idle "
                "leak check fires and KV usage at idle keeps rising; device memory is flat."
            ),
            engine="sglang",
            engine_version="0.5.3.post3",
            model="Qwen/Qwen3-30B-A3B",
            gpu_name="NVIDIA H100 80GB HBM3",
            total_mib=81559,
            static_fraction=0.88,
            req_rate=4.0,
            kv_leak_per_req=5e-6,
            leak_check_log=True,
            expect_host=("leak.kv_pool",),
        ),
        Scenario(
            name="host-rss-leak",
            description="vLLM 0.8.5 serving Qwen2-VL: host RSS grows while the request rate falls.",
            engine="vllm",
            engine_version="0.8.5",
            model="Qwen/Qwen2-VL-7B-Instruct",
            gpu_name="NVIDIA A100-SXM4-80GB",
            total_mib=81920,
            static_fraction=0.9,
            overhead_mib=520.0,
            working_mib=0.0,
            req_rate=2.0,
            rate_decay=0.3,
            rss_leak_mib_per_req=0.05,
            expect_host=("leak.host_rss",),
        ),
        Scenario(
            name="cuda-context-leak",
            description=(
                "A dynamic worker pool: short-lived GPU processes whose CUDA contexts stay on the "
                "GPU after they exit; the parent's /dev/nvidia* mappings keep growing."
            ),
            engine="vllm",
            engine_version="0.10.1",
            model="Qwen/Qwen3-8B",
            gpu_name="NVIDIA L40S",
            total_mib=46068,
            static_fraction=0.7,
            overhead_mib=520.0,
            working_mib=0.0,
            req_rate=2.0,
            ctx_leak_every_s=900,
            ctx_mib=500.0,
            expect_gpu=("leak.cuda_context",),
            allow=("leak.gpu", "oom.forecast", "memory.threshold"),
        ),
        Scenario(
            name="rank-skew",
            description="SGLang TP4 serving Qwen3-VL: rank 0 grows, ranks 1-3 stay flat.",
            engine="sglang",
            engine_version="0.5.4",
            model="Qwen/Qwen3-VL-235B-A22B-Instruct",
            gpu_name="NVIDIA H200",
            total_mib=143771,
            gpus=4,
            static_fraction=0.8,
            req_rate=2.0,
            leak_gpus=(0,),
            leak_mib_per_req=0.4,
            expect_gpus={0: ("leak.gpu", "memory.threshold")},
            expect_host=("skew.rank",),
            allow=("oom.forecast",),
        ),
        Scenario(
            name="restart-masked-leak",
            description="Scheduled restarts every 90 minutes hide a steady leak (a sawtooth).",
            engine="sglang",
            engine_version="0.5.4",
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu_name="NVIDIA L40S",
            total_mib=46068,
            static_fraction=0.85,
            req_rate=2.0,
            leak_mib_per_req=0.15,
            restart_every_s=5400,
            expect_gpu=("leak.gpu", "memory.threshold"),
            expect_host=("restart.masked_leak",),
            allow=("oom.forecast",),
        ),
        Scenario(
            name="latency-pressure",
            description="vLLM 0.11 serving Qwen3-VL: VRAM creeps up and requests get slower with it.",
            engine="vllm",
            engine_version="0.11.0",
            model="Qwen/Qwen3-VL-8B-Instruct",
            gpu_name="NVIDIA L40S",
            total_mib=46068,
            static_fraction=0.8,
            overhead_mib=520.0,
            req_rate=2.0,
            leak_mib_per_req=0.1,
            latency_pressure=4.0,
            probe_url=True,
            expect_gpu=("leak.gpu", "oom.forecast", "memory.threshold"),
            expect_host=("latency.pressure",),
        ),
        Scenario(
            name="cuda-graph-capture",
            description="A one-time 3 GiB jump half an hour in (lazy CUDA-graph capture), flat after.",
            engine="sglang",
            engine_version="0.5.4",
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu_name="NVIDIA H100 80GB HBM3",
            total_mib=81559,
            static_fraction=0.8,
            req_rate=2.0,
            capture_mib=3072.0,
            capture_after_req=3000.0,
            allow=("cache.growth",),
        ),
        Scenario(
            name="long-generation",
            description="KV usage climbs during one long generation and is freed when it ends.",
            engine="vllm",
            engine_version="0.11.0",
            model="Qwen/Qwen3-8B",
            gpu_name="NVIDIA H100 80GB HBM3",
            total_mib=81559,
            static_fraction=0.9,
            overhead_mib=520.0,
            working_mib=0.0,
            req_rate=0.05,
            traffic="long_generation",
            busy_s=(1500, 1800),
            idle_s=(120, 300),
        ),
        Scenario(
            name="kv-high-constant",
            description="KV usage 92 -> 95 % at a constant 16 running requests, no idle time.",
            engine="vllm",
            engine_version="0.11.0",
            model="Qwen/Qwen3-8B",
            gpu_name="NVIDIA H100 80GB HBM3",
            total_mib=81559,
            static_fraction=0.9,
            overhead_mib=520.0,
            working_mib=0.0,
            req_rate=2.0,
            traffic="constant",
        ),
        Scenario(
            name="hung-server",
            description="The server hangs: constant running and waiting counts, nothing completes.",
            engine="sglang",
            engine_version="0.5.4",
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu_name="NVIDIA L40S",
            total_mib=46068,
            static_fraction=0.85,
            req_rate=2.0,
            traffic="hang",
        ),
        Scenario(
            name="probe-tensor-leak",
            description=(
                "SGLang with the allocator probe: torch's allocated memory rises with requests "
                "(tensors kept alive per request), so the leak is certain."
            ),
            engine="sglang",
            engine_version="0.5.4",
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu_name="NVIDIA H100 80GB HBM3",
            total_mib=81559,
            static_fraction=0.8,
            req_rate=2.0,
            leak_mib_per_req=0.12,
            probe=True,
            expect_gpu=("leak.gpu",),
            allow=("oom.forecast", "memory.threshold"),
        ),
        Scenario(
            name="probe-cache-growth",
            description=(
                "SGLang with the allocator probe: nvidia-smi keeps rising for hours, but it is "
                "reserved (cached) memory; allocated is flat. Not a leak."
            ),
            engine="sglang",
            engine_version="0.5.4",
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu_name="NVIDIA H100 80GB HBM3",
            total_mib=81559,
            static_fraction=0.8,
            req_rate=2.0,
            cache_max_mib=4000.0,
            cache_tau_req=40000.0,
            probe=True,
            decided_by=("allocator_samples",),
            decided_by_why="nvidia-smi reads the same for allocator cache and memory outside PyTorch",
            expect_gpu=("cache.growth",),
            allow=("memory.threshold",),  # nvidia-smi does read 84 % and rising
        ),
        Scenario(
            name="probe-outside-leak",
            description=(
                "vLLM with the allocator probe: the process's GPU memory grows but torch's "
                "reserved memory does not: NCCL/cuBLAS-side memory, outside the allocator."
            ),
            engine="vllm",
            engine_version="0.11.0",
            model="Qwen/Qwen3-8B",
            gpu_name="NVIDIA H100 80GB HBM3",
            total_mib=81559,
            static_fraction=0.8,
            overhead_mib=520.0,
            req_rate=2.0,
            leak_mib_per_req=0.12,
            leak_where="outside",
            probe=True,
            decided_by=("allocator_samples",),
            decided_by_why="nvidia-smi reads the same for allocator cache and memory outside PyTorch",
            expect_gpu=("leak.outside_allocator",),
            allow=("oom.forecast", "memory.threshold"),
        ),
        Scenario(
            name="vision-oom-hourly",
            description=(
                "vLLM 0.11 serving Qwen3-VL: image traffic leaks until the server runs out of "
                "memory about every hour; a supervisor restarts it each time (OOM sawtooth)."
            ),
            engine="vllm",
            engine_version="0.11.0",
            model="Qwen/Qwen3-VL-8B-Instruct",
            gpu_name="NVIDIA L40S",
            total_mib=46068,
            static_fraction=0.85,
            overhead_mib=520.0,
            image_traffic=True,
            req_rate=2.0,
            leak_mib_per_req=1.6,
            expect_gpu=("leak.gpu", "oom.event"),
            expect_host=("restart.masked_leak",),
            allow=("oom.forecast", "memory.threshold"),
        ),
        Scenario(
            name="independent-servers",
            description=(
                "Two single-GPU SGLang servers on one host: the one on GPU 0 leaks, the one on "
                "GPU 1 is flat. Not tensor-parallel ranks: no rank skew."
            ),
            engine="sglang",
            engine_version="0.5.4",
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu_name="NVIDIA L40S",
            total_mib=46068,
            gpus=2,
            independent=True,
            static_fraction=0.85,
            req_rate=2.0,
            leak_gpus=(0,),
            leak_mib_per_req=0.1,
            expect_gpus={0: ("leak.gpu", "memory.threshold")},
            allow=("oom.forecast",),
        ),
        Scenario(
            name="nightly-restart",
            description=(
                "A leak of about 3 GB a day hidden by a restart every night, over three and a "
                "half days (the remedy-B sawtooth)."
            ),
            engine="sglang",
            engine_version="0.5.4",
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpu_name="NVIDIA H100 80GB HBM3",
            total_mib=81559,
            static_fraction=0.6,
            req_rate=1.0,
            leak_mib_per_req=0.05,
            restart_every_s=86400,
            min_hours=84.0,
            expect_gpu=("leak.gpu",),
            expect_host=("restart.masked_leak",),
        ),
        Scenario(
            name="fast-image-processor-no-version",
            description=(
                "The known fast-image-processor leak where no version could be read (no version "
                "line, site-packages out of the collector's reach): named as a suspect."
            ),
            engine="sglang",
            engine_version="0.4.9.post6",
            model="Qwen/Qwen2.5-VL-7B-Instruct",
            gpu_name="NVIDIA A10G",
            total_mib=23028,
            static_fraction=0.7,
            fast_image_processor=True,
            image_traffic=True,
            version_visible=False,
            req_rate=1.0,
            leak_mib_per_req=0.5,
            expect_gpu=("leak.gpu", "oom.forecast"),
            expect_host=("known_bug.fast_image_processor",),
            allow=("memory.threshold", "oom.event", "restart.masked_leak"),
        ),
    )
}


def resolve(name: str) -> list[Scenario]:
    if name == "all":
        return list(SCENARIOS.values())
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; choose one of: all, {', '.join(SCENARIOS)}")
    return [SCENARIOS[name]]
