"""Generate a synthetic "fleet week" trace bucket for benchmarks, fast and vectorised.

Usage: fleetweek.py OUT_DIR [HOSTS] [DAYS]. By default 125 hosts x 8 H100s sampled every
10 s for 7 days (~60 M gpu_samples rows), written a day and a few hosts at a time in the
collector's layout and file naming (``<table>/date=.../host=.../<table>-<start>-<tag>.parquet``).

Hosts serve by day with idle windows of 5-40 min and are idle at night. About 5 % leak
(baseline +50-250 MiB/h on every GPU; when the leak has used the headroom the server is
OOM-restarted with new pids), another 5 % grow an allocator cache that levels off.
Noise is polars hashing: one seed gives the same bucket (with one polars version).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from collector import __version__ as COLLECTOR_VERSION  # noqa: E402
from collector.schema import TABLES  # noqa: E402
from collector.writer import _file_metadata, to_arrow  # noqa: E402

MIB, GIB = 2**20, 2**30
TOTAL = 80 * GIB
GPU_NAME = "NVIDIA H100 80GB HBM3"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
IDLE_WINDOWS = 6  # daytime idle windows per host and day
HOSTS_PER_CHUNK = 25  # hosts generated together: bounds memory
UTC_US = pl.Datetime("us", "UTC")
# engine: version, memory fraction, command line, metric names for kv, running, queue, counter
ENGINES: dict[str, tuple[str, float, str, tuple[str, ...]]] = {
    "sglang": (
        "0.4.6",
        0.85,
        f"python -m sglang.launch_server --model-path {MODEL} --tp 8 --mem-fraction-static 0.85",
        ("sglang:token_usage", "sglang:num_running_reqs", "sglang:num_queue_reqs",
         "sglang:num_requests_total"),
    ),
    "vllm": (
        "0.8.5",
        0.90,
        f"vllm serve {MODEL} --tensor-parallel-size 8 --gpu-memory-utilization 0.9",
        ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
         "vllm:request_success_total"),
    ),
}  # fmt: skip
SOURCES = ("nvml", "procfs", "metrics", "logs")


def _u(key: pl.Expr, salt: int, seed: int) -> pl.Expr:
    """Uniform in (0, 1), a pure function of key, salt and seed."""
    return ((key.hash(seed * 1000 + salt) % 2**32).cast(pl.Float64) + 0.5) / 2**32


def _normal(key: pl.Expr, salt: int, seed: int) -> pl.Expr:
    """Standard normal (Box-Muller) from two hashes of key."""
    r = (-2.0 * _u(key, salt, seed).log()).sqrt()
    return r * (2 * math.pi * _u(key, salt + 1, seed)).cos()


def _plan(hosts: int, seed: int) -> pl.DataFrame:
    """One row per host: engine, kind (ok / leak / cache) and memory parameters."""
    rng = random.Random(seed)
    order = rng.sample(range(hosts), hosts)
    n = max(1, round(0.05 * hosts))
    leak, cache = set(order[:n]), set(order[n : 2 * n])
    rows = []
    for i in range(hosts):
        engine = "vllm" if i % 2 else "sglang"
        frac, off = ENGINES[engine][1], rng.randint(-4, 1)  # off: hours the day is shifted
        rows.append({
            "hi": i, "host": f"fw-host-{i + 1:04d}", "engine": engine, "frac": frac,
            "kind": "leak" if i in leak else "cache" if i in cache else "ok",
            "rate": rng.uniform(50, 250) * MIB / 3600 if i in leak else 0.0,  # bytes/s
            "head": TOTAL * (1 - frac) - 4 * GIB,  # leak headroom before the OOM restart
            "cap": rng.uniform(0.5, 2.0) * GIB if i in cache else 0.0,
            "ctau": rng.uniform(0.5, 1.5) * 12_000,  # requests that fill 63 % of the cache
            "day0": (7 + off) * 60, "day1": (23 + off) * 60, "hoff": rng.uniform(0, 256) * MIB,
        })  # fmt: skip
    return pl.DataFrame(rows)


def _minutes(hp: pl.DataFrame, day: int, seed: int, carry: pl.DataFrame, t0: int) -> pl.DataFrame:
    """Per host and minute: idle or busy, load, server lifetime (seg), memory baseline."""
    mi = pl.DataFrame({"mi": pl.int_range(day * 1440, (day + 1) * 1440, eager=True)})
    df = hp.join(mi, how="cross", maintain_order="left_right")
    mod, dn, c = pl.col("mi") % 1440, pl.col("mi") // 1440, pl.col
    windows = []
    for k in range(IDLE_WINDOWS):
        wk = c("hi") * 1_000_000 + dn * 100 + k
        s = c("day0") + (_u(wk, 10 + k, seed) * (c("day1") - c("day0") - 40)).floor()
        windows.append((mod >= s) & (mod < s + 5 + (_u(wk, 30 + k, seed) * 36).floor()))
    hm = c("hi") * 2**32 + c("mi")
    df = df.with_columns(
        idle=(mod < c("day0")) | (mod >= c("day1")) | pl.any_horizontal(windows),
        load=_u(hm, 1, seed),
        t=c("mi") * 60,
        ts=(t0 + c("mi") * 60_000_000).cast(UTC_US),
        seg=(c("rate") * c("mi") * 60 / c("head")).floor().cast(pl.Int64),
    )
    busy = ~c("idle")
    df = df.with_columns(
        running=pl.when(busy).then((4 + 60 * c("load")).round()).otherwise(0.0),
        queue=pl.when(busy).then(((c("load") - 0.75).clip(0) * 40).floor()).otherwise(0.0),
        kv=pl.when(busy).then(0.2 + 0.7 * c("load") + 0.05 * _u(hm, 2, seed)).otherwise(0.0),
        ps=pl.when(c("rate") > 0).then(c("seg") * c("head") / c("rate")).otherwise(0.0),
    ).join(carry, on=["hi", "seg"], how="left", maintain_order="left")
    req = (c("running") * (4 + 4 * _u(hm, 3, seed))).round()
    df = df.with_columns(
        counter=c("carry").fill_null(0.0) + req.cum_sum().over("hi", "seg", order_by="mi")
    )
    leaked = c("rate") * c("t") - c("seg") * c("head")
    cache = c("cap") * (1 - (-c("counter") / c("ctau")).exp())
    return df.with_columns(
        base=c("frac") * TOTAL + c("hoff") + leaked + cache,
        ws=pl.when(busy).then((0.5 + 2.5 * c("load")) * GIB).otherwise(0.0),
    )


def _tables(
    mins: pl.DataFrame, gpus: int, step_s: int, t0: int, seed: int
) -> dict[str, pl.DataFrame]:
    """All five tables for the hosts and day in ``mins``, ordered by host, ts, gpu."""
    c = pl.col
    gs = pl.DataFrame({"sub": pl.int_range(60 // step_s, eager=True)}).join(
        pl.DataFrame({"gpu_index": pl.int_range(gpus, eager=True, dtype=pl.Int32)}),
        how="cross", maintain_order="left_right",
    )  # fmt: skip
    ids = [(hi, g, f"GPU-{uuid.UUID(hashlib.md5(f'{seed}/{h}/{g}'.encode()).hexdigest())}")
           for hi, h in mins.select("hi", "host").unique().iter_rows() for g in range(gpus)]  # fmt: skip
    uids = pl.DataFrame(
        ids, schema={"hi": pl.Int64, "gpu_index": pl.Int32, "gpu_uuid": pl.String}, orient="row"
    )
    cols = ("hi", "host", "mi", "ts", "idle", "load", "base", "ws", "seg", "ps")
    df = mins.lazy().select(cols).join(gs.lazy(), how="cross", maintain_order="left_right")
    t = c("mi") * 60 + c("sub") * step_s
    key = (c("hi") * 64 + c("gpu_index")) * 2**32 + t
    idle, load, u = c("idle"), c("load"), _u(key, 5, seed)
    goff = c("gpu_index") * 48 * MIB + pl.when(c("gpu_index") == 0).then(320 * MIB).otherwise(0)
    noise = _normal(key, 6, seed) * pl.when(idle).then(MIB).otherwise(96 * MIB)
    used = (
        (((c("base") + goff + c("ws") + noise) / MIB).round() * MIB).clip(0, TOTAL).cast(pl.Int64)
    )
    smp = df.with_columns(
        ts=c("ts") + pl.duration(seconds=c("sub") * step_s),
        gpu_name=pl.lit(GPU_NAME),
        memory_total_bytes=pl.lit(TOTAL),
        memory_used_bytes=used,
        memory_free_bytes=TOTAL - used,
        utilization_gpu_pct=pl.when(idle).then((2 * u).round())
        .otherwise((50 + 40 * load + 10 * u).round().clip(0, 100)),
        utilization_memory_pct=pl.when(idle).then(0.0).otherwise((10 + 50 * load + 10 * u).round()),
    ).join(uids.lazy(), on=["hi", "gpu_index"], how="left", maintain_order="left").collect()  # fmt: skip
    rss = _normal(c("hi") * 2**40 + c("mi") * 64 + c("gpu_index"), 8, seed) * 16 * MIB
    gp = smp.filter(c("sub") == 0).with_columns(
        pid=10_000 + 100 * c("seg") + c("gpu_index"),
        used_gpu_memory_bytes=(c("memory_used_bytes") - 500 * MIB).clip(0),
        vm_rss_bytes=(6 * GIB + rss).cast(pl.Int64),
        vm_size_bytes=pl.lit(220 * GIB),
        process_start=(t0 + c("ps") * 1_000_000).cast(pl.Int64).cast(UTC_US),
    )
    eng = mins.select("hi", "engine").unique()
    eng = eng.with_columns(**{
        col: c("engine").replace_strict({e: v[i] for e, v in ENGINES.items()})
        for i, col in enumerate(("engine_version", "frac", "cmdline"))
    })  # fmt: skip
    vllm = c("engine") == "vllm"
    procs = gp.filter(c("mi") % 60 == 0).join(eng, on="hi", maintain_order="left").with_columns(
        torch_version=pl.lit("2.6.0"), model=pl.lit(MODEL), tp_size=pl.lit(8), tp_rank="gpu_index",
        mem_fraction_static=pl.when(~vllm).then("frac"), gpu_memory_utilization=pl.when(vllm).then("frac"),
    )  # fmt: skip
    met = mins.select("hi", "host", "engine", "ts", "kv", "running", "queue", "counter").unpivot(
        index=["hi", "host", "engine", "ts"], variable_name="m"
    ).sort("hi", "ts", maintain_order=True)  # fmt: skip
    name = pl.concat_str(pl.when(vllm).then(pl.lit("vllm:")).otherwise(pl.lit("sglang:")), "m")
    names = {f"{e}:{m}": n for e, v in ENGINES.items()
             for m, n in zip(("kv", "running", "queue", "counter"), v[3], strict=True)}  # fmt: skip
    met = met.with_columns(name=name.replace_strict(names), source=pl.lit("metrics"))
    src = pl.DataFrame({"source": SOURCES, "k": range(len(SOURCES))})
    runs = mins.select("hi", "host", "mi", "ts").join(src, how="cross", maintain_order="left_right")
    per_run = [(60 // step_s + 1) * gpus, 0, 4, 0]
    runs = runs.with_columns(
        run_id=(c("hi") * 2**32 + c("mi")).hash(seed).mod(10**16).cast(pl.String).str.zfill(16),
        collector_version=pl.lit(COLLECTOR_VERSION),
        status=pl.when(c("source") == "logs").then(pl.lit("skipped")).otherwise(pl.lit("ok")),
        rows=c("k").replace_strict(list(range(4)), per_run) + ((c("mi") % 60 == 0) & (c("k") == 1)).cast(pl.Int64) * gpus,
        duration_s=(0.05 * _u(c("hi") * 2**40 + c("mi") * 8 + c("k"), 9, seed)).round(4),
        finished=c("ts") + pl.duration(seconds=59),
    )  # fmt: skip
    return {"gpu_samples": smp, "gpu_processes": gp, "processes": procs,
            "metric_samples": met, "collector_runs": runs}  # fmt: skip


def generate(
    out: Path,
    hosts: int = 125,
    gpus_per_host: int = 8,
    days: int = 7,
    step_s: int = 10,
    start: datetime = datetime(2026, 11, 23, tzinfo=UTC),
    seed: int = 1,
    fraction: float = 1.0,
) -> dict[str, Any]:
    """Write the bucket; returns rows per table and the ground truth (leaking hosts)."""
    if 60 % step_s or start.utcoffset() is None or start.timestamp() % 86400:
        raise ValueError("step_s must divide 60 and start must be midnight, timezone-aware UTC")
    hp = _plan(hosts, seed).head(round(hosts * fraction))
    t0 = int(start.timestamp()) * 1_000_000
    rows: dict[str, int] = {}
    files = 0
    carry = pl.DataFrame(schema={"hi": pl.Int64, "seg": pl.Int64, "carry": pl.Float64})
    for day in range(days):
        when = start + timedelta(days=day)
        for first in range(0, hp.height, HOSTS_PER_CHUNK):
            mins = _minutes(hp.slice(first, HOSTS_PER_CHUNK), day, seed, carry, t0)
            last = mins.group_by("hi", "seg").agg(carry=pl.col("counter").max())
            carry = pl.concat([carry, last]).group_by("hi", "seg").agg(pl.col("carry").max())
            for name, df in _tables(mins, gpus_per_host, step_s, t0, seed).items():
                for (host,), part in df.partition_by("host", as_dict=True).items():
                    rows[name] = rows.get(name, 0) + _write(
                        Path(out), name, when, str(host), part, seed
                    )
                    files += 1
    return {
        "rows": rows,
        "files": files,
        "hosts": hp.height,
        "gpus": hp.height * gpus_per_host,
        "leaking_hosts": hp.filter(pl.col("kind") == "leak")["host"].to_list(),
        "caching_hosts": hp.filter(pl.col("kind") == "cache")["host"].to_list(),
    }


def _write(out: Path, name: str, day: datetime, host: str, df: pl.DataFrame, seed: int) -> int:
    """One file per table, date and host, named and stamped like the collector's."""
    tbl = df.select([col for col in df.columns if col in TABLES[name].columns]).to_arrow()
    if name == "metric_samples":  # labels: {"model_name": MODEL}
        n = tbl.num_rows
        offsets = pl.int_range(n + 1, dtype=pl.Int32, eager=True).to_arrow()
        labels = pa.MapArray.from_arrays(offsets, pa.repeat("model_name", n), pa.repeat(MODEL, n))
        tbl = tbl.append_column("labels", labels)
    tbl = to_arrow(name, tbl).replace_schema_metadata(_file_metadata(name))
    folder = out / name / f"date={day.date().isoformat()}" / f"host={host}"
    folder.mkdir(parents=True, exist_ok=True)
    tag = hashlib.sha1(f"{seed}/{name}/{host}/{day:%F}".encode()).hexdigest()[:12]
    pq.write_table(tbl, folder / f"{name}-{day:%Y%m%dT%H%M%S%fZ}-{tag}.parquet", compression="zstd")
    return tbl.num_rows


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the bucket folder to write")
    ap.add_argument("hosts", type=int, nargs="?", default=125)
    ap.add_argument("days", type=int, nargs="?", default=7)
    args = ap.parse_args()
    print(json.dumps(generate(args.out, args.hosts, days=args.days), indent=2))
