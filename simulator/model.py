"""The memory model of a simulated host, vectorised with polars.

Per GPU: used = static pool + leak since the process started + allocator
cache (fills once, saturates) + one-time capture + leaked worker contexts +
transient working set while busy. A leak that exhausts the headroom ends in an
OOM and a restart (a new process lifetime, ``segment``); scheduled restarts
cut lifetimes too. All GPUs of a host share its traffic.
"""

from __future__ import annotations

import random

import polars as pl

from simulator.scenarios import Scenario

STEP_S = 10
STARTUP_S = 60


def traffic(s: Scenario, n: int, rng: random.Random) -> list[bool]:
    if s.traffic in ("constant", "hang"):
        return [True] * n
    busy: list[bool] = []
    on = False
    while len(busy) < n:
        lo, hi = s.busy_s if on else s.idle_s
        busy += [on] * max(1, rng.randint(lo, hi) // STEP_S)
        on = not on
    return busy[:n]


def base_mib(s: Scenario) -> float:
    return s.static_fraction * s.total_mib + s.overhead_mib


def headroom_mib(s: Scenario) -> float:
    return max(
        s.total_mib - 100 - base_mib(s) - s.working_mib - s.cache_max_mib - s.capture_mib, 1.0
    )


def host_frame(s: Scenario, hours: float, seed: int) -> pl.DataFrame:
    """Host-level columns: t, busy, requests, cum_req, segment, since_start, seg_req, kv."""
    rng = random.Random(seed)
    n = int(hours * 3600 // STEP_S)
    busy = traffic(s, n, rng)
    z = [rng.gauss(0.0, 1.0) for _ in range(n)]
    total_s = max(n * STEP_S, 1)
    rate = pl.lit(s.req_rate) * (1 - s.rate_decay * pl.col("t") / total_s)
    hung = pl.lit(s.traffic == "hang") & (pl.col("t") > total_s * 0.25)
    df = pl.DataFrame({"i": range(n), "busy": busy, "z": z}).with_columns(
        (pl.col("i") * STEP_S).alias("t")
    )
    df = df.with_columns(
        pl.when(pl.col("busy") & ~hung)
        .then(rate * STEP_S * (1 + 0.1 * pl.col("z")))
        .otherwise(0.0)
        .clip(lower_bound=0.0)
        .alias("requests"),
        hung.alias("hung"),
    ).with_columns(pl.col("requests").cum_sum().alias("cum_req"))
    leaks_first = s.leak_gpus is None or 0 in s.leak_gpus
    if s.restart_every_s:
        seg = (pl.col("t") // s.restart_every_s).cast(pl.Int64)
    elif s.leak_mib_per_req > 0 and leaks_first:
        seg = (pl.col("cum_req") * s.leak_mib_per_req / headroom_mib(s)).floor().cast(pl.Int64)
    else:
        seg = pl.lit(0, pl.Int64)
    df = df.with_columns(seg.alias("segment")).with_columns(
        (pl.col("t") - pl.col("t").min().over("segment")).alias("since_start"),
        (pl.col("cum_req") - pl.col("cum_req").min().over("segment")).alias("seg_req"),
    )
    # busy-time within the current busy stretch (long generations fill KV as they go)
    stretch = (pl.col("busy") != pl.col("busy").shift(1)).fill_null(True).cum_sum()
    df = df.with_columns(stretch.alias("stretch")).with_columns(
        (pl.col("t") - pl.col("t").min().over("stretch")).alias("in_stretch")
    )
    running = pl.when(pl.col("busy")).then(max(1, round(s.req_rate * 8))).otherwise(0)
    if s.traffic == "long_generation":
        running = pl.when(pl.col("busy")).then(1).otherwise(0)
        load_kv = (
            pl.when(pl.col("busy"))
            .then((pl.col("in_stretch") / s.busy_s[1] * 0.85).clip(0, 0.9))
            .otherwise(0.0)
        )
    elif s.traffic == "constant":
        load_kv = pl.when(pl.col("busy")).then(0.92 + 0.03 * (pl.col("t") / total_s)).otherwise(0.0)
    else:
        load_kv = pl.when(pl.col("busy")).then(0.05 + 0.02 * running).otherwise(0.0)
    leaked_kv = (pl.col("seg_req") * s.kv_leak_per_req).clip(0.0, 0.9)
    df = df.with_columns(running.alias("running")).with_columns(
        (load_kv + leaked_kv).clip(0.0, 0.99).alias("kv"),
        leaked_kv.alias("leaked_kv"),
    )
    return df


def gpu_frame(s: Scenario, host: pl.DataFrame, gpu: int, seed: int) -> pl.DataFrame:
    """Per-GPU memory (MiB) and utilisation over the host frame."""
    rng = random.Random(seed)
    z = pl.Series("zg", [rng.gauss(0.0, 1.0) for _ in range(host.height)])
    leaks = s.leak_gpus is None or gpu in s.leak_gpus
    rate = s.leak_mib_per_req if leaks else 0.0
    base = base_mib(s)
    df = host.with_columns(z)
    starting = pl.col("since_start") < STARTUP_S
    ramp = (pl.col("since_start") / STARTUP_S).clip(0.0, 1.0)
    cache = s.cache_max_mib * (1 - (-pl.col("seg_req") / s.cache_tau_req).exp())
    capture = pl.when(pl.col("seg_req") > s.capture_after_req).then(s.capture_mib).otherwise(0.0)
    working = (
        pl.when(pl.col("busy") & ~pl.col("hung"))
        .then(s.working_mib * (0.85 + 0.05 * pl.col("zg")))
        .otherwise(0.0)
    )
    contexts = (
        (pl.col("t") // s.ctx_leak_every_s).cast(pl.Float64) * s.ctx_mib
        if s.ctx_leak_every_s and gpu == 0
        else pl.lit(0.0)
    )
    leak = pl.col("seg_req") * rate
    used = (
        pl.when(starting)
        .then(base * ramp + contexts)
        .otherwise(base + leak + cache + capture + working + contexts + 1.5 * pl.col("zg"))
        .clip(0.0, s.total_mib)
    )
    util = (
        pl.when(starting)
        .then(35.0)
        .when(pl.col("hung"))
        .then(0.0)
        .when(pl.col("busy"))
        .then((82 + 6 * pl.col("zg")).clip(40.0, 100.0))
        .otherwise((0.5 + 0.3 * pl.col("zg")).clip(0.0, 2.0))
    )
    share = (leak / headroom_mib(s)).clip(0.0, 1.0)
    latency = s.latency_s * (1 + s.latency_pressure * share) * (1 + 0.03 * pl.col("zg"))
    # PyTorch's view (the allocator probe): the static pool, tensor leaks and the
    # working set are allocated; cache and captures are reserved on top; the
    # context, NCCL/cuBLAS overhead and leaks outside the allocator are neither.
    in_tensors = leak if s.leak_where == "tensors" else pl.lit(0.0)
    static = s.static_fraction * s.total_mib
    allocated = (
        pl.when(starting).then(static * ramp).otherwise(static + in_tensors + working).clip(0.0)
    )
    reserved = pl.when(starting).then(allocated).otherwise(allocated + cache + capture)
    return df.select(
        "t",
        "segment",
        "busy",
        used.alias("used_mib"),
        allocated.alias("allocated_mib"),
        reserved.alias("reserved_mib"),
        util.alias("util"),
        starting.alias("starting"),
        latency.alias("latency_s"),
        contexts.alias("ctx_mib"),
    )


def exhaustion_s(s: Scenario, hours: float, seed: int) -> float | None:
    """Ground truth: seconds from the start until the leak exhausts what it eats
    (GPU headroom, KV pool, host RAM), ignoring restarts; extrapolated linearly
    past the end of the trace. None when the scenario does not leak."""
    hf = host_frame(s, hours, seed)
    t_end = float(hf["t"].cast(pl.Float64).max() or 0.0) + STEP_S  # type: ignore[arg-type]
    budgets = []  # in requests
    if s.leak_mib_per_req:
        budgets.append(headroom_mib(s) / s.leak_mib_per_req)
    if s.kv_leak_per_req:
        budgets.append(0.9 / s.kv_leak_per_req)
    if s.rss_leak_mib_per_req:
        budgets.append((s.host_ram_mib - 3.2e9 / 2**20) / s.rss_leak_mib_per_req)
    times = []
    if budgets:
        budget = min(budgets)
        reached = hf.filter(pl.col("cum_req") >= budget)
        total = float(hf["cum_req"].max() or 0.0)  # type: ignore[arg-type]
        times.append(
            float(reached["t"][0]) if reached.height else t_end * budget / max(total, 1e-9)
        )
    if s.ctx_leak_every_s and s.ctx_mib:
        times.append(headroom_mib(s) / s.ctx_mib * s.ctx_leak_every_s)
    return min(times) if times else None
