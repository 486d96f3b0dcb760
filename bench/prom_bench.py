"""Import throughput from a real Prometheus, beside a local scan of the same bucket.

Usage: prom_bench.py OUT.json [HOSTS] [HOURS] [WORKDIR]  (a WORKDIR that holds a TSDB is reused)
       prom_bench.py OUT.json --synthetic GPUS HOURS [WORKDIR]  (dcgm-exporter series alone, 15 s)

A simulated fleet (the simulator's scenarios, round robin) is written natively,
turned into dcgm-exporter and engine OpenMetrics, backfilled with promtool and
served by prometheus on 127.0.0.1; then `leakcollect import prometheus` runs in a
child process (samples read per second, peak RSS from the child's rusage), and the
imported bucket's gpu_samples are scanned in DuckDB (rows per second) for scale.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import promfleet  # noqa: E402


def main(
    hosts: int, hours: float, work: Path | None = None, synthetic_gpus: int = 0
) -> dict[str, object]:
    from simulator.generate import DEFAULT_START, generate_host, plan_fleet

    step = 15 if synthetic_gpus else 10
    res: dict[str, object] = {"hosts": hosts, "hours": hours, "step_s": step}
    if synthetic_gpus:
        res |= {"synthetic_gpus": synthetic_gpus, "hosts": (synthetic_gpus + 7) // 8}
    if not promfleet.have_prometheus():
        res["skipped"] = "prometheus/promtool not installed (Debian package `prometheus`)"
        return res
    with tempfile.TemporaryDirectory(prefix="prom-bench-") as tmp:
        root = work or Path(tmp)
        if not (root / "tsdb").exists() and synthetic_gpus:
            t = time.perf_counter()
            with open(root / "fleet.om", "w", encoding="utf-8") as f:
                res["samples_backfilled"] = promfleet.synthetic(f, synthetic_gpus, hours, step)
            promfleet.backfill(root / "fleet.om", root / "tsdb")
            res["backfill_s"] = round(time.perf_counter() - t, 2)
        elif not (root / "tsdb").exists():
            t = time.perf_counter()
            plans = plan_fleet("all", hosts, 11)[:hosts]
            for p in plans:
                generate_host(p, hours, DEFAULT_START, root / "native")
            res["simulate_s"] = round(time.perf_counter() - t, 2)
            t = time.perf_counter()
            with open(root / "fleet.om", "w", encoding="utf-8") as f:
                res["samples_backfilled"] = promfleet.openmetrics(
                    root / "native", f, {p.host for p in plans[::2]}
                )
            promfleet.backfill(root / "fleet.om", root / "tsdb")
            res["backfill_s"] = round(time.perf_counter() - t, 2)
        shutil.rmtree(root / "imported", ignore_errors=True)
        end = DEFAULT_START.timestamp() + hours * 3600 - step
        with promfleet.PromServer(root / "tsdb", root) as server:
            args = ["--url", server.url, "--start", DEFAULT_START.isoformat()]
            args += ["--end", dt.datetime.fromtimestamp(end, dt.UTC).isoformat()]
            args += ["--step", f"{step}s", "--bucket", str(root / "imported")]
            t = time.perf_counter()
            r = subprocess.run(
                [sys.executable, "-c", promfleet.IMPORT_CHILD, *args],
                capture_output=True,
                text=True,
                cwd=REPO,
            )
            wall = time.perf_counter() - t
        if r.returncode != 0:
            raise SystemExit(f"import failed ({r.returncode}): {r.stderr[-2000:]}")
        m = re.search(r"([0-9,]+) samples in ([0-9.]+)s", r.stderr)
        samples = int(m.group(1).replace(",", "")) if m else 0
        k = re.search(r"PEAK_RSS_KB (\d+)", r.stderr)
        peak_kb = int(k.group(1)) if k else 0
        res["import"] = {
            "samples": samples,
            "seconds": round(wall, 2),
            "samples_per_s": round(samples / wall) if wall else None,
            "peak_rss_mb": round(peak_kb / 1024, 1),  # the import process alone
        }
        import duckdb

        con = duckdb.connect()
        glob = str(root / "imported" / "gpu_samples" / "*" / "*" / "*.parquet")
        t = time.perf_counter()
        n = con.execute(
            f"SELECT count(*), sum(memory_used_bytes) FROM read_parquet('{glob}')"
        ).fetchone()
        scan = time.perf_counter() - t
        rows = int(n[0]) if n else 0
        res["local_scan"] = {
            "rows": rows,
            "seconds": round(scan, 3),
            "rows_per_s": round(rows / scan) if scan else None,
        }
    return res


if __name__ == "__main__":
    argv = sys.argv[1:]
    synth = 0
    if "--synthetic" in argv:  # OUT.json --synthetic GPUS HOURS [WORKDIR]
        argv.remove("--synthetic")
        synth = int(argv[1])
    out = Path(argv[0])
    hosts = int(argv[1]) if len(argv) > 1 else 16
    hours = float(argv[2]) if len(argv) > 2 else 24.0
    result = main(hosts, hours, Path(argv[3]) if len(argv) > 3 else None, synth)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
