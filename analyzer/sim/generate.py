"""Generate a simulated fleet into a bucket, through the collector's writer.

Memory per GPU = static pool + leak since the process started + allocator
cache (fills and saturates) + transient working set while busy. A leak that
exhausts the headroom ends in an OOM, logged, and a restart with a new PID.
The arithmetic is vectorised with polars; text goes through the collector's
real log-signature matcher and /metrics parser.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from analyzer.sim import textgen
from analyzer.sim.scenarios import Scenario, resolve
from collector import __version__ as collector_version
from collector import logsig, metrics
from collector.procinfo import parse_cmdline
from collector.writer import BucketWriter

MIB = 1024 * 1024
STEP_S = 10
SCRAPE_S = 30
PROCESS_EVERY_S = 300
STARTUP_S = 60
DEFAULT_START = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)


@dataclass
class HostPlan:
    host: str
    scenario: Scenario
    seed: int
    pid0: int


def _traffic(s: Scenario, n: int, rng: random.Random) -> list[bool]:
    busy: list[bool] = []
    on = False
    while len(busy) < n:
        lo, hi = s.busy_s if on else s.idle_s
        busy += [on] * max(1, rng.randint(lo, hi) // STEP_S)
        on = not on
    return busy[:n]


def simulate_gpu_frame(s: Scenario, hours: float, rng: random.Random) -> pl.DataFrame:
    """Per-sample frame: t (s), busy, requests, segment, since_start, memory parts (MiB)."""
    n = int(hours * 3600 // STEP_S)
    busy = _traffic(s, n, rng)
    noise = [rng.gauss(0.0, 1.0) for _ in range(n)]
    base = s.static_fraction * s.total_mib + s.overhead_mib
    headroom = max(s.total_mib - 100 - base - s.working_mib - s.cache_max_mib, 1.0)
    df = pl.DataFrame({"i": range(n), "busy": busy, "z": noise}).with_columns(
        (pl.col("i") * STEP_S).alias("t"),
        pl.when(pl.col("busy"))
        .then(s.req_rate * STEP_S * (1 + 0.1 * pl.col("z")))
        .otherwise(0.0)
        .clip(lower_bound=0.0)
        .alias("requests"),
    )
    df = df.with_columns(pl.col("requests").cum_sum().alias("cum_req"))
    df = df.with_columns((pl.col("cum_req") * s.leak_mib_per_req).alias("leak_total"))
    if s.leak_mib_per_req > 0:
        df = df.with_columns(
            (pl.col("leak_total") / headroom).floor().cast(pl.Int64).alias("segment")
        )
    else:
        df = df.with_columns(pl.lit(0, pl.Int64).alias("segment"))
    df = df.with_columns(
        (pl.col("leak_total") - pl.col("segment") * headroom).alias("leak"),
        (pl.col("t") - pl.col("t").min().over("segment")).alias("since_start"),
        (pl.col("cum_req") - pl.col("cum_req").min().over("segment")).alias("seg_req"),
    )
    starting = pl.col("since_start") < STARTUP_S
    ramp = (pl.col("since_start") / STARTUP_S).clip(0.0, 1.0)
    cache = s.cache_max_mib * (1 - (-pl.col("seg_req") / s.cache_tau_req).exp())
    working = (
        pl.when(pl.col("busy")).then(s.working_mib * (0.85 + 0.05 * pl.col("z"))).otherwise(0.0)
    )
    used = (
        pl.when(starting)
        .then(base * ramp)
        .otherwise(base + pl.col("leak") + cache + working + 1.5 * pl.col("z"))
        .clip(0.0, s.total_mib)
    )
    util = (
        pl.when(starting)
        .then(35.0)
        .when(pl.col("busy"))
        .then((82 + 6 * pl.col("z")).clip(40.0, 100.0))
        .otherwise((0.5 + 0.3 * pl.col("z")).clip(0.0, 2.0))
    )
    return df.with_columns(used.alias("used_mib"), util.alias("util"), starting.alias("starting"))


def _pids(plan: HostPlan, segment: int) -> list[int]:
    return [plan.pid0 + 17 * segment + g for g in range(plan.scenario.gpus)]


def generate_host(plan: HostPlan, hours: float, start: dt.datetime, out: Path) -> dict[str, int]:
    s = plan.scenario
    rng = random.Random(plan.seed)
    frames = [
        simulate_gpu_frame(s, hours, random.Random(plan.seed * 100 + g)) for g in range(s.gpus)
    ]
    f0 = frames[0]
    ts = [start + dt.timedelta(seconds=int(t)) for t in f0["t"]]
    tables: dict[str, list[dict[str, Any]]] = {
        k: []
        for k in (
            "gpu_samples",
            "gpu_processes",
            "processes",
            "metric_samples",
            "log_lines",
            "collector_runs",
        )
    }
    for g, f in enumerate(frames):
        for when, used, util in zip(ts, f["used_mib"], f["util"], strict=True):
            u = int(used * MIB)
            tables["gpu_samples"].append(
                {
                    "ts": when,
                    "gpu_index": g,
                    "gpu_uuid": f"GPU-{plan.seed:08x}-{g:04x}-sim",
                    "gpu_name": s.gpu_name,
                    "memory_total_bytes": s.total_mib * MIB,
                    "memory_used_bytes": u,
                    "memory_free_bytes": s.total_mib * MIB - u,
                    "utilization_gpu_pct": float(util),
                }
            )
    # Process lifetimes follow GPU 0's restarts (TP ranks restart together).
    segs = f0["segment"].to_list()
    cmd = textgen.cmdline(s)
    info = parse_cmdline(cmd)
    log_file = f"/var/log/{s.engine}/server.log"
    offset = 0

    def log(when: dt.datetime, line: str) -> None:
        nonlocal offset
        sig = logsig.match(line)
        if sig is not None:
            tables["log_lines"].append(
                {
                    "ts": when,
                    "file": log_file,
                    "inode": 1000 + plan.seed,
                    "offset": offset,
                    "text": line,
                    "signature": sig,
                }
            )
        offset += len(line.encode()) + 1

    requests_total = 0.0
    prev_seg = -1
    seg_start = ts[0]
    busy_col, req_col = f0["busy"].to_list(), f0["requests"].to_list()
    for i, when in enumerate(ts):
        seg = segs[i]
        pids = _pids(plan, seg)
        if seg != prev_seg:
            if prev_seg >= 0:
                log(when, textgen.oom_line(s, when, _pids(plan, prev_seg)[0], 0, s.total_mib - 40))
                requests_total = 0.0
            seg_start = when
            for line in textgen.startup_lines(s, when, pids[0]):
                log(when, line)
            prev_seg = seg
        requests_total += req_col[i]
        sec = i * STEP_S
        running = int(round(s.req_rate * 8)) if busy_col[i] else 0
        kv = min(0.95, 0.05 + 0.02 * running) if running else 0.0
        if busy_col[i]:
            log(when, textgen.batch_line(s, when, pids[0], running, 0, kv, 40.0 * running))
        if sec % SCRAPE_S == 0:
            parsed = metrics.parse(textgen.metrics_text(s, running, 0, kv, requests_total, 3.2e9))
            for smp in parsed.samples:
                tables["metric_samples"].append(
                    {
                        "ts": when,
                        "source": "http://127.0.0.1:30000/metrics",
                        "name": smp.name,
                        "labels": smp.labels,
                        "value": smp.value,
                    }
                )
            for g, pid in enumerate(pids):
                used = int(frames[g]["used_mib"][i] * MIB)
                tables["gpu_processes"].append(
                    {
                        "ts": when,
                        "gpu_index": g,
                        "pid": pid,
                        "used_gpu_memory_bytes": max(used - 400 * MIB, 0),
                        "vm_rss_bytes": int(3.2e9),
                        "vm_size_bytes": int(48e9),
                        "process_start": seg_start,
                    }
                )
        if sec % PROCESS_EVERY_S == 0 or when == seg_start:
            for rank, pid in enumerate(pids):
                tables["processes"].append(
                    {
                        "ts": when,
                        "pid": pid,
                        "process_start": seg_start,
                        "cmdline": cmd,
                        "engine": info.engine,
                        "engine_version": s.engine_version,
                        "torch_version": "2.7.1",
                        "model": info.model,
                        "mem_fraction_static": info.mem_fraction_static,
                        "gpu_memory_utilization": info.gpu_memory_utilization,
                        "disable_fast_image_processor": info.disable_fast_image_processor,
                        "tp_size": info.tp_size,
                        "tp_rank": rank,
                        "flags_json": info.flags_json(),
                    }
                )
        if sec % 3600 == 0:
            run_id = f"sim-{plan.host}-{i}"
            for src in ("nvml", "procfs", "logs", "metrics"):
                tables["collector_runs"].append(
                    {
                        "ts": when,
                        "run_id": run_id,
                        "collector_version": collector_version,
                        "source": src,
                        "status": "ok",
                        "rows": 0,
                        "duration_s": 0.05,
                        "finished": when,
                    }
                )
    writer = BucketWriter(out, plan.host)
    counts = {}
    for name, rows in tables.items():
        counts[name] = len(rows)
        # one file per table per simulated hour, as hourly batches of cron runs
        by_hour: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            by_hour.setdefault(int((r["ts"] - start).total_seconds() // 3600), []).append(r)
        for hour in sorted(by_hour):
            writer.write(name, by_hour[hour])
    _ = rng
    return counts


def plan_fleet(scenario: str, hosts: int, seed: int) -> list[HostPlan]:
    scenarios = resolve(scenario)
    n = max(hosts, len(scenarios))
    plans = []
    for k in range(n):
        s = scenarios[k % len(scenarios)]
        idx = k // len(scenarios)
        plans.append(HostPlan(f"{s.name}-{idx:02d}", s, seed * 1000 + k, 4000 + 100 * k))
    return plans


def labels(plans: list[HostPlan], seed: int, hours: float) -> dict[str, Any]:
    return {
        "seed": seed,
        "hours": hours,
        "hosts": {
            p.host: {
                "scenario": p.scenario.name,
                "expect": {
                    **{f"gpu:{g}": sorted(p.scenario.expect_gpu) for g in range(p.scenario.gpus)},
                    "host": sorted(p.scenario.expect_host),
                },
                "allow": sorted(p.scenario.allow),
            }
            for p in plans
        },
    }


def simulate(
    scenario: str,
    out: str | Path,
    *,
    hosts: int = 4,
    hours: float = 6.0,
    seed: int = 7,
    start: dt.datetime = DEFAULT_START,
    labels_path: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[HostPlan]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plans = plan_fleet(scenario, hosts, seed)
    for k, p in enumerate(plans, 1):
        counts = generate_host(p, hours, start, out)
        if progress:
            progress(
                f"[{k}/{len(plans)}] {p.host}: {counts['gpu_samples']} GPU samples, {counts['log_lines']} log lines"
            )
    if labels_path is not None:
        lp = Path(labels_path)
        lp.parent.mkdir(parents=True, exist_ok=True)
        tmp = lp.with_name(lp.name + ".tmp")
        tmp.write_text(json.dumps(labels(plans, seed, hours), indent=2, sort_keys=True) + "\n")
        tmp.replace(lp)
    return plans
