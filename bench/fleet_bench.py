"""Benchmark the weekly fleet report on a simulated fleet of about N GPUs.

Usage: fleet_bench.py OUT.json [GPUS] [HOURS]. The simulated bucket is cached
under bench/data/ between runs. Measures, side by side: simulation (once),
analysis, fleet view + rendering, the page's size, and how long headless
Chromium takes to load and lay it out (when Chromium is installed).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(out: str, gpus: int = 1000, hours: float = 2.0) -> None:
    from analyzer import fleet
    from analyzer.packs import load_packs
    from analyzer.runner import analyze
    from reports.fleet import write_fleet
    from simulator.generate import simulate
    from simulator.scenarios import SCENARIOS

    per_host = sum(s.gpus for s in SCENARIOS.values()) / len(SCENARIOS)
    hosts = max(len(SCENARIOS), math.ceil(gpus / per_host))
    bucket = REPO / "bench" / "data" / f"fleet-{hosts}h-{hours:g}"
    res: dict[str, object] = {"hosts": hosts, "hours": hours}
    if not (bucket / ".done").exists():
        shutil.rmtree(bucket, ignore_errors=True)
        t0 = time.perf_counter()
        simulate("all", bucket, hosts=hosts, hours=hours, seed=3)
        (bucket / ".done").write_text("")
        res["simulate_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    doc = analyze(bucket, load_packs(), now=dt.datetime(2026, 12, 1, tzinfo=dt.UTC))
    res["analyze_s"] = round(time.perf_counter() - t0, 2)
    res["gpus"] = len(doc.series)
    res["findings"] = len(doc.findings)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "fleet.html"
        t0 = time.perf_counter()
        view = fleet.build("2026-W48", doc)
        write_fleet(view, page)
        res["fleet_render_s"] = round(time.perf_counter() - t0, 3)
        res["fleet_html_mb"] = round(page.stat().st_size / 2**20, 3)
        from reports import browser

        if browser.CHROMIUM:
            t0 = time.perf_counter()
            browser.run(page, "--dump-dom", timeout=300).check_returncode()
            res["browser_load_s"] = round(time.perf_counter() - t0, 2)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(
        a[0] if a else "bench/fleet.json",
        int(a[1]) if len(a) > 1 else 1000,
        float(a[2]) if len(a) > 2 else 2.0,
    )
