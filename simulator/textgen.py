"""Server log lines and /metrics text shaped like the real ones (see corpus).

These go through the collector's real signature matcher and metrics parser,
so the simulated fleet exercises the same code paths as a real host.
"""

from __future__ import annotations

import datetime as dt

from simulator.scenarios import Scenario


def sglang_prefix(ts: dt.datetime, tp_rank: int | None) -> str:
    tag = f" TP{tp_rank}" if tp_rank is not None else ""
    return f"[{ts:%Y-%m-%d %H:%M:%S}{tag}]"


def vllm_prefix(ts: dt.datetime, pid: int, where: str, level: str = "INFO") -> str:
    return f"(APIServer pid={pid}) {level} {ts:%m-%d %H:%M:%S} [{where}]"


def _old_sglang(s: Scenario) -> bool:
    parts = [int(p) for p in s.engine_version.split(".")[:2] if p.isdigit()]
    return parts < [0, 5]


def startup_lines(s: Scenario, ts: dt.datetime, pid: int) -> list[str]:
    if s.engine == "sglang":
        rank = 0 if s.tp_size > 1 else None
        dfip = "True" if s.fast_image_processor is False else "False"
        args = (
            f"model_path='{s.model}', tokenizer_path='{s.model}', tokenizer_mode='auto', "
            f"skip_tokenizer_init=False, load_format='auto', trust_remote_code=False, dtype='auto', "
            f"host='0.0.0.0', port=30000, mem_fraction_static={s.static_fraction}, "
            f"max_running_requests=None, chunked_prefill_size=8192, schedule_policy='fcfs', "
            f"tp_size={s.tp_size}, pp_size=1, stream_interval=1, random_seed={pid}, "
            f"log_level='info', enable_metrics=True, decode_log_interval=40, "
            f"served_model_name='{s.model}', attention_backend='flashinfer', "
            f"disable_radix_cache=False, disable_cuda_graph=False, "
            f"disable_fast_image_processor={dfip}, enable_memory_saver=False"
        )
        lines = [
            f"{sglang_prefix(ts, None)} server_args=ServerArgs({args})",
            f"{sglang_prefix(ts, rank)} Load weight end. type=Qwen2_5_VLForConditionalGeneration, "
            f"dtype=torch.bfloat16, avail mem={s.total_mib * 0.3 / 1024:.2f} GB, mem usage=15.52 GB.",
            f"{sglang_prefix(ts, rank)} KV Cache is allocated. #tokens: 120000, K size: 3.21 GB, V size: 3.21 GB",
        ]
        if s.image_traffic and s.fast_image_processor:
            lines.append(
                f"{sglang_prefix(ts, None)} Using fast image processor: Qwen2VLImageProcessorFast "
                "(set --disable-fast-image-processor to preprocess on the CPU)"
            )
        lines.append(f"{sglang_prefix(ts, None)} The server is fired up and ready to roll!")
        return lines
    return [
        f"{vllm_prefix(ts, pid, 'api_server.py:1839')} vLLM API server version {s.engine_version}",
        f"{vllm_prefix(ts, pid, 'gpu_worker.py:298')} Available KV cache memory: "
        f"{s.total_mib * s.static_fraction * 0.6 / 1024:.2f} GiB",
        f"{vllm_prefix(ts, pid, 'launcher.py:44')} Application startup complete.",
    ]


def batch_line(
    s: Scenario, ts: dt.datetime, pid: int, running: int, queued: int, kv: float, tput: float
) -> str:
    if s.engine == "sglang":
        rank = 0 if s.tp_size > 1 else None
        sep = "." if _old_sglang(s) else ","
        tail = "" if _old_sglang(s) else ", cuda graph: True"
        return (
            f"{sglang_prefix(ts, rank)} Decode batch{sep} #running-req: {running}, #token: {int(kv * 120000)}, "
            f"token usage: {kv:.2f}{tail}, gen throughput (token/s): {tput:.2f}, #queue-req: {queued}"
        )
    return (
        f"{vllm_prefix(ts, pid, 'loggers.py:123')} Engine 000: Avg prompt throughput: {tput * 4:.1f} tokens/s, "
        f"Avg generation throughput: {tput:.1f} tokens/s, Running: {running} reqs, Waiting: {queued} reqs, "
        f"GPU KV cache usage: {kv * 100:.1f}%, Prefix cache hit rate: 12.5%"
    )


def oom_line(s: Scenario, ts: dt.datetime, pid: int, gpu: int, used_mib: float) -> str:
    total_gib = s.total_mib / 1024
    free_mib = max(s.total_mib - used_mib, 1.0)
    msg = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 38.00 MiB. GPU {gpu} has a total "
        f"capacity of {total_gib:.2f} GiB of which {free_mib:.2f} MiB is free. Process {pid} has "
        f"{used_mib / 1024:.2f} GiB memory in use. Of the allocated memory {used_mib / 1024 * 0.93:.2f} GiB "
        f"is allocated by PyTorch, and 220.57 MiB is reserved by PyTorch but unallocated."
    )
    if s.engine == "sglang":
        rank = gpu if s.tp_size > 1 else None
        return f"{sglang_prefix(ts, rank)} Scheduler hit an exception: {msg}"
    return f"(EngineCore_DP0 pid={pid}) ERROR {ts:%m-%d %H:%M:%S} [core.py:710] {msg}"


def metrics_text(
    s: Scenario,
    running: int,
    queued: int,
    kv: float,
    requests_total: float,
    rss: float,
    latency_sum: float = 0.0,
) -> str:
    out: list[str] = []
    if s.engine == "sglang":
        ranks = range(s.tp_size)

        def fam(name: str, typ: str, help_: str, value: float) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {typ}")
            for r in ranks:
                labels = f'engine_type="unified",model_name="{s.model}",pp_rank="0",tp_rank="{r}"'
                out.append(f"{name}{{{labels}}} {value!r}")

        fam("sglang:num_running_reqs", "gauge", "The number of running requests.", float(running))
        fam(
            "sglang:num_queue_reqs",
            "gauge",
            "The number of requests in the waiting queue.",
            float(queued),
        )
        fam("sglang:token_usage", "gauge", "The token usage.", round(kv, 4))
        fam(
            "sglang:num_requests_total",
            "counter",
            "Number of requests processed.",
            float(requests_total),
        )
    else:
        labels = f'engine="0",model_name="{s.model}"'
        usage = (
            "vllm:kv_cache_usage_perc"
            if not s.engine_version.startswith("0.8")
            else "vllm:gpu_cache_usage_perc"
        )
        for name, typ, value in (
            ("vllm:num_requests_running", "gauge", float(running)),
            ("vllm:num_requests_waiting", "gauge", float(queued)),
            (usage, "gauge", round(kv, 4)),
        ):
            out += [f"# TYPE {name} {typ}", f"{name}{{{labels}}} {value!r}"]
        hist = "vllm:e2e_request_latency_seconds"
        out += [
            f"# TYPE {hist} histogram",
            f"{hist}_sum{{{labels}}} {round(latency_sum, 3)!r}",
            f"{hist}_count{{{labels}}} {float(requests_total)!r}",
            "# TYPE vllm:request_success counter",
            f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="{s.model}"}} {float(requests_total)!r}',
            "# TYPE process_resident_memory_bytes gauge",
            f"process_resident_memory_bytes {rss!r}",
        ]
    return "\n".join(out) + "\n"


def cmdline(s: Scenario) -> str:
    if s.engine == "sglang":
        parts = [
            "/usr/bin/python3 -m sglang.launch_server",
            f"--model-path {s.model}",
            f"--mem-fraction-static {s.static_fraction}",
            f"--tp-size {s.tp_size}",
            "--enable-metrics --port 30000",
        ]
        if s.fast_image_processor is False:
            parts.append("--disable-fast-image-processor")
        return " ".join(parts)
    return (
        f"/usr/bin/python3 /usr/local/bin/vllm serve {s.model} --gpu-memory-utilization {s.static_fraction} "
        f"--tensor-parallel-size {s.tp_size} --port 8000"
    )


def leak_check_line(
    s: Scenario, ts: dt.datetime, leaked_kv: float, max_tokens: int = 270331
) -> str:
    avail = int(max_tokens * (1 - leaked_kv))
    return (
        f"{sglang_prefix(ts, None)} /sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py:1326: "
        f"UserWarning: token_to_kv_pool_allocator memory leak detected! available_size={avail}, "
        f"protected_size=0, self.max_total_num_tokens={max_tokens}"
    )


def restart_line(s: Scenario, ts: dt.datetime, pid: int) -> str:
    if s.engine == "sglang":
        return f"{sglang_prefix(ts, None)} SIGQUIT received. signum=None, frame=None. Scheduled restart of pid {pid}."
    return f"{vllm_prefix(ts, pid, 'launcher.py:80')} Shutting down FastAPI HTTP server (scheduled restart)."
