"""A large fleet's window through `leakcollect import prometheus`: peak RSS and samples/s.

Usage: prom_week.py OUT.json [--gpus N] [--hours H] [--workdir DIR] [--points N]

Defaults: 64 GPUs for 24 h (what `make bench` runs). The issue's size is
``--gpus 1000 --hours 168`` (a week at 15 s: 40.3 M samples per metric, 121 M for
DCGM_FI_DEV_FB_USED/FREE/GPU_UTIL together).

A real Prometheus serves it: synthetic dcgm-exporter series (promfleet.synthetic:
8 GPUs a host, varying values) are backfilled with ``promtool tsdb create-blocks-from
openmetrics`` one 2-hour block at a time (promtool reads its whole input once per
block it writes, so one file for a week would be read 84 times), into ``DIR/tsdb``,
kept for the next run with the same size. ``prometheus`` serves it on 127.0.0.1 with
compaction off; the import runs in a child process that reports its own peak RSS
(``ru_maxrss``); then the imported ``gpu_samples`` are scanned locally in DuckDB.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import promfleet  # noqa: E402

STEP = 15
T0 = 1795392000.0  # 2026-11-23T00:00:00Z
BLOCK_STEPS = 7200 // STEP


def backfill(work: Path, gpus: int, hours: float) -> dict[str, Any]:
    """The TSDB for this size in ``work/tsdb`` (reused when a finished one is there)."""
    tsdb, done = work / "tsdb", work / "tsdb.done"
    want = {"gpus": gpus, "hours": hours, "step_s": STEP, "generator": 2}
    if done.exists() and json.loads(done.read_text()) == want:
        return {"reused": True}
    shutil.rmtree(tsdb, ignore_errors=True)
    done.unlink(missing_ok=True)
    n = int(hours * 3600 // STEP)
    samples, t_gen, t_tool = 0, 0.0, 0.0
    om = work / "block.om"
    for k, first in enumerate(range(0, n, BLOCK_STEPS)):
        t = time.perf_counter()
        with open(om, "w", encoding="utf-8") as f:
            samples += promfleet.synthetic(f, gpus, hours, STEP, T0, first, BLOCK_STEPS)
        t_gen += time.perf_counter() - t
        t = time.perf_counter()
        promfleet.backfill(om, tsdb)
        t_tool += time.perf_counter() - t
        print(f"backfill block {k + 1}/{-(-n // BLOCK_STEPS)}: {samples:,} samples", flush=True)
    om.unlink(missing_ok=True)
    done.write_text(json.dumps(want))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "samples": samples,
        "generate_s": round(t_gen, 1),
        "promtool_s": round(t_tool, 1),
        "promtool_samples_per_s": round(samples / t_tool) if t_tool else None,
        "promtool_peak_rss_mb": round(peak / 1024, 1),
        "tsdb_mb": round(sum(p.stat().st_size for p in tsdb.rglob("*") if p.is_file()) / 1e6, 1),
    }


def run(gpus: int, hours: float, work: Path, points: int | None = None) -> dict[str, Any]:
    res: dict[str, Any] = {"source": "prometheus (real server, promtool backfill)"}
    res |= {"gpus": gpus, "hosts": -(-gpus // 8), "hours": hours, "step_s": STEP}
    if not promfleet.have_prometheus():
        res["skipped"] = "prometheus/promtool not installed (Debian package `prometheus`)"
        return res
    res["backfill"] = backfill(work, gpus, hours)
    bucket = work / "imported"
    shutil.rmtree(bucket, ignore_errors=True)
    end = T0 + (int(hours * 3600 // STEP) - 1) * STEP
    log = work / "import.log"
    with promfleet.PromServer(work / "tsdb", work, compact=False) as server:
        args = ["--url", server.url, "--start", _iso(T0), "--end", _iso(end)]
        args += ["--step", f"{STEP}s", "--bucket", str(bucket), "--timeout", "300"]
        if points:
            args += ["--points", str(points)]
        t = time.perf_counter()
        with open(log, "w", encoding="utf-8") as err:
            r = subprocess.run(
                [sys.executable, "-c", promfleet.IMPORT_CHILD, *args],
                stderr=err,
                cwd=REPO,
                check=False,
            )
        wall = time.perf_counter() - t
    text = log.read_text(encoding="utf-8")
    if r.returncode != 0:
        raise SystemExit(f"import failed ({r.returncode}): {text[-2000:]}")
    m = re.search(r"([0-9,]+) samples in ([0-9.]+)s \(.*?([0-9,]+) requests\)", text)
    k = re.search(r"PEAK_RSS_KB (\d+)", text)
    samples = int(m.group(1).replace(",", "")) if m else 0
    res["import"] = {
        "samples": samples,
        "seconds": round(wall, 1),
        "samples_per_s": round(samples / wall) if wall else None,
        "requests": int(m.group(3).replace(",", "")) if m else None,
        "peak_rss_mb": round(int(k.group(1)) / 1024, 1) if k else None,
    }
    res["local_scan"] = scan(bucket)
    return res


def scan(bucket: Path) -> dict[str, Any]:
    """The imported gpu_samples read back in DuckDB: rows per second, for scale."""
    import duckdb

    con = duckdb.connect()
    glob = str(bucket / "gpu_samples" / "*" / "*" / "*.parquet")
    t = time.perf_counter()
    row = con.execute(
        f"SELECT count(*), sum(memory_used_bytes), max(utilization_gpu_pct) FROM read_parquet('{glob}')"
    ).fetchone()
    took = time.perf_counter() - t
    rows = int(row[0]) if row else 0
    return {
        "rows": rows,
        "seconds": round(took, 3),
        "rows_per_s": round(rows / took) if took else None,
    }


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat().replace("+00:00", "Z")


def main(argv: list[str]) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--workdir", type=Path, help="keeps the TSDB for the next run")
    ap.add_argument("--points", type=int, help="passed to the import (--points)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="prom-week-") as tmp:
        work = a.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        res = run(a.gpus, a.hours, work, a.points)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
