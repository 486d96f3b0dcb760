"""Generated trace rows for rule test cases: ``[[case.gpu]]`` load/idle cycles.

Each spec makes gpu_samples and, when asked, engine metrics, process rows, /proc
maps, allocator-probe and latency-probe rows (see GEN_DEFAULTS for the keys).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

MIB = 1024 * 1024
GEN_DEFAULTS: dict[str, Any] = {
    "host": "host-a",
    "gpu": 0,
    "start": dt.datetime(2026, 1, 5, tzinfo=dt.UTC),
    "step_s": 10,
    "total_mib": 16000,
    "base_mib": 12000,
    "cycles": 10,
    "busy_s": 300,
    "idle_s": 120,
    "growth_mib_per_cycle": 0.0,
    "saturate_cycles": 0,  # growth stops after this many cycles; 0 = never
    "busy_extra_mib": 300.0,
    "restart_every_cycles": 0,  # new pid and memory back to base every N cycles; 0 = never
    "pid": 0,  # 0 = no gpu_processes rows
    "running_busy": 8,
    # engine metrics, emitted every 30 s when set (0 = not emitted)
    "kv_idle": -1.0,  # KV usage at idle (sglang:token_usage); < 0 = no KV metric
    "kv_idle_rise_per_cycle": 0.0,
    "kv_idle_offsets": [],  # added to the idle KV usage of cycle c: offsets[c % len], e.g. noise
    "requests_per_cycle": 0,  # sglang:num_requests_total counter
    "requests_rise_per_cycle": 0,  # requests_per_cycle grows by this each cycle
    "requests_offsets": [],  # added to requests_per_cycle in cycle c: offsets[c % len]
    "rss_mib": 0.0,  # process_resident_memory_bytes
    "rss_growth_mib_per_cycle": 0.0,
    "proc_rss_mib": 0.0,  # VmRSS of the main pid in gpu_processes (needs pid), same growth
    "latency_s": 0.0,  # sglang:e2e_request_latency_seconds histogram (needs requests_per_cycle)
    "latency_growth_per_cycle": 0.0,
    # a dynamic process pool: a worker every N cycles whose context stays after it exits
    "worker_every_cycles": 0,
    "worker_mib": 500.0,
    "map_growth_per_cycle": 0,  # /dev/nvidia* mappings of the main pid (needs pid)
    # the allocator probe (allocator_samples of the main pid, every 30 s); < 0 = none
    "alloc_mib": -1.0,  # torch allocated at idle, first cycle
    "alloc_growth_per_cycle": 0.0,
    "alloc_busy_mib": 200.0,  # allocated on top while busy
    "cache_mib": 500.0,  # reserved minus allocated at idle, first cycle
    "cache_growth_per_cycle": 0.0,
    # the request-latency probe (http_probes every 60 s); 0 = none
    "probe_latency_s": 0.0,
    "probe_latency_growth_per_cycle": 0.0,
    "idle_util_pct": 1.0,  # GPU utilisation while idle (busy is 85 %)
    # tables whose process rows carry process_start (the spec's start, or the restart's),
    # e.g. ["gpu_processes", "allocator_samples"]; [] = none, as from nvidia-smi
    "process_start_in": [],
}


def generate_gpu(spec: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Rows for gpu_samples, metric_samples and gpu_processes from a cycle spec."""
    unknown = set(spec) - set(GEN_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown [[case.gpu]] keys: {', '.join(sorted(unknown))}")
    p = {**GEN_DEFAULTS, **spec}
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    step, host, gpu = int(p["step_s"]), p["host"], int(p["gpu"])
    t = p["start"]
    leak = orphans = requests = latency_sum = 0.0
    pid = int(p["pid"])
    total = int(p["total_mib"]) * MIB
    started = {"process_start": p["start"]}
    unknown_tables = set(p["process_start_in"]) - {"gpu_processes", "allocator_samples"}
    if unknown_tables:
        raise ValueError(
            f"process_start_in: no process rows in {', '.join(sorted(unknown_tables))}"
        )

    def start_of(table: str) -> dict[str, Any]:
        return started if table in p["process_start_in"] else {}

    def metric(name: str, value: float, labels: dict[str, str] | None = None) -> None:
        rows["metric_samples"].append(
            {"ts": t, "host": host, "name": name, "labels": labels or {}, "value": value}
        )

    for c in range(int(p["cycles"])):
        if p["restart_every_cycles"] and c and c % int(p["restart_every_cycles"]) == 0:
            leak, pid = 0.0, (pid + 1 if pid else 0)
            started["process_start"] = t
        growing = not p["saturate_cycles"] or c < int(p["saturate_cycles"])
        worker = bool(p["worker_every_cycles"]) and c > 0 and c % int(p["worker_every_cycles"]) == 0
        for phase, length in (("busy", int(p["busy_s"])), ("idle", int(p["idle_s"]))):
            busy = phase == "busy"
            for k in range(0, length, step):
                if busy and growing:
                    leak += float(p["growth_mib_per_cycle"]) * step / max(int(p["busy_s"]), 1)
                alive = worker and busy and k < 60
                if worker and busy and k == 60:
                    orphans += float(p["worker_mib"])
                extra = float(p["busy_extra_mib"]) if busy else 0.0
                used = (
                    float(p["base_mib"])
                    + leak
                    + orphans
                    + extra
                    + (float(p["worker_mib"]) if alive else 0.0)
                )
                u = min(int(used * MIB), total)
                rows["gpu_samples"].append(
                    {
                        "ts": t,
                        "host": host,
                        "gpu_index": gpu,
                        "memory_total_bytes": total,
                        "memory_used_bytes": u,
                        "memory_free_bytes": total - u,
                        "utilization_gpu_pct": 85.0 if busy else float(p["idle_util_pct"]),
                    }
                )
                per_cycle = float(p["requests_per_cycle"]) + c * float(p["requests_rise_per_cycle"])
                if p["requests_offsets"]:
                    per_cycle += float(p["requests_offsets"][c % len(p["requests_offsets"])])
                done = per_cycle * step / max(int(p["busy_s"]), 1) if busy else 0.0
                requests += done
                latency_sum += done * (
                    float(p["latency_s"]) + c * float(p["latency_growth_per_cycle"])
                )
                if k % 30 == 0:
                    metric(
                        "sglang:num_running_reqs",
                        float(p["running_busy"]) if busy else 0.0,
                        {"tp_rank": str(gpu)},
                    )
                    if p["kv_idle"] >= 0:
                        offsets = p["kv_idle_offsets"]
                        kv = (
                            float(p["kv_idle"])
                            + c * float(p["kv_idle_rise_per_cycle"])
                            + (float(offsets[c % len(offsets)]) if offsets else 0.0)
                            + (0.3 if busy else 0.0)
                        )
                        metric("sglang:token_usage", min(kv, 1.0), {"tp_rank": str(gpu)})
                    if p["requests_per_cycle"]:
                        metric("sglang:num_requests_total", requests)
                    if p["latency_s"]:
                        metric("sglang:e2e_request_latency_seconds_sum", latency_sum)
                        metric("sglang:e2e_request_latency_seconds_count", requests)
                    if p["rss_mib"]:
                        rss = (float(p["rss_mib"]) + c * float(p["rss_growth_mib_per_cycle"])) * MIB
                        metric("process_resident_memory_bytes", rss)
                    if pid:
                        own = u - int((orphans + (float(p["worker_mib"]) if alive else 0.0)) * MIB)
                        prow = {
                            "ts": t,
                            "host": host,
                            "gpu_index": gpu,
                            "pid": pid,
                            "used_gpu_memory_bytes": own,
                            **start_of("gpu_processes"),
                        }
                        if p["proc_rss_mib"]:
                            prow["vm_rss_bytes"] = int(
                                (
                                    float(p["proc_rss_mib"])
                                    + c * float(p["rss_growth_mib_per_cycle"])
                                )
                                * MIB
                            )
                        rows["gpu_processes"].append(prow)
                        if p["map_growth_per_cycle"] and k == 0:
                            n = 40 + c * int(p["map_growth_per_cycle"])
                            rows["proc_maps"].append(
                                {"ts": t, "host": host, "pid": pid, "nvidia_device_count": n}
                            )
                    if p["alloc_mib"] >= 0:
                        held = float(p["alloc_mib"]) + c * float(p["alloc_growth_per_cycle"])
                        cached = float(p["cache_mib"]) + c * float(p["cache_growth_per_cycle"])
                        live = held + (float(p["alloc_busy_mib"]) if busy else 0.0)
                        rows["allocator_samples"].append(
                            {
                                "ts": t,
                                "host": host,
                                "pid": pid or 4242,
                                **start_of("allocator_samples"),
                                "device": 0,
                                "role": "scheduler",
                                "allocated_bytes": int(live * MIB),
                                "reserved_bytes": int(max(live, held + cached) * MIB),
                                "max_allocated_bytes": int(live * MIB),
                            }
                        )
                    if p["probe_latency_s"] and k % 60 == 0:
                        rows["http_probes"].append(
                            {
                                "ts": t,
                                "host": host,
                                "url": "http://127.0.0.1:30000/health",
                                "status": 200,
                                "latency_s": float(p["probe_latency_s"])
                                + c * float(p["probe_latency_growth_per_cycle"]),
                            }
                        )
                    if alive:
                        rows["gpu_processes"].append(
                            {
                                "ts": t,
                                "host": host,
                                "gpu_index": gpu,
                                "pid": 90000 + c,
                                "used_gpu_memory_bytes": int(float(p["worker_mib"]) * MIB),
                            }
                        )
                t = t + dt.timedelta(seconds=step)
    return rows
