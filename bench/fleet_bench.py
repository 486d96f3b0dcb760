"""Benchmark the reports: the host report for about 100 GPUs and the weekly fleet page for
about 1,000, each written and then opened in offline headless Chromium.

Usage: fleet_bench.py OUT.json [GPUS] [HOURS] [FLEET_GPUS]. A simulated bucket of about
GPUS GPUs is analysed (the bucket is cached under bench/data/ between runs); the host
report is rendered from that findings document. The fleet page's document is the same
analysis repeated under new host names until it holds FLEET_GPUS GPUs (reports read only
the findings document, so this measures the page, not the analyzer).

Targets (issue 15): host report for 100 GPUs under 3 MB and laid out in under 1 s; fleet
page for 1,000 GPUs under 1 MB.
"""

from __future__ import annotations

import copy
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

HOST_REPORT_MB, HOST_LAYOUT_S, FLEET_PAGE_MB = 3.0, 1.0, 1.0


def replicate(doc, copies: int):  # type: ignore[no-untyped-def]
    """The document ``copies`` times, hosts renamed (-r1, -r2, ...)."""
    out = copy.deepcopy(doc)
    for k in range(1, copies):
        extra = copy.deepcopy(doc)
        for part in (
            extra.findings,
            extra.hosts,
            extra.series,
            extra.events,
            extra.kv,
            extra.alloc,
        ):
            for x in part:
                x.host = f"{x.host}-r{k}"
        out.findings += extra.findings
        out.hosts += extra.hosts
        out.series += extra.series
        out.events += extra.events
        out.kv += extra.kv
        out.alloc += extra.alloc
    return out


def open_in_chromium(page: Path, res: dict[str, object], key: str) -> None:
    from reports import browser

    if browser.CHROMIUM is None:
        res[f"{key}_browser"] = "not measured: Debian chromium is not installed"
        return
    runs = []
    with browser.Page(1400, 900) as p:
        for _ in range(3):
            p.events.clear()
            runs.append(p.open(page))  # navigation to load event plus a forced layout
        # the browser's own clock: navigation start to the load event, and to a layout after it
        res[f"{key}_load_event_ms"] = round(
            p.eval("performance.getEntriesByType('navigation')[0].loadEventEnd")
        )
        res[f"{key}_errors"] = len(p.errors())
        res[f"{key}_requests_besides_the_page"] = len(set(p.requests()) - {page.resolve().as_uri()})
    res[f"{key}_layout_s"] = round(sorted(runs)[1], 3)  # median of 3


def main(out: str, gpus: int = 100, hours: float = 2.0, fleet_gpus: int = 1000) -> None:
    from analyzer import fleet
    from analyzer.packs import load_packs
    from analyzer.runner import analyze
    from collector.atomic import write_atomic
    from reports.fleet import render_fleet
    from reports.render import render_report
    from simulator.generate import simulate
    from simulator.scenarios import SCENARIOS

    per_host = sum(s.gpus for s in SCENARIOS.values()) / len(SCENARIOS)
    hosts = max(len(SCENARIOS), math.ceil(gpus / per_host))
    bucket = REPO / "bench" / "data" / f"reports-{hosts}h-{hours:g}"
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
        page = Path(tmp) / "report.html"
        t0 = time.perf_counter()
        write_atomic(page, render_report(doc))
        res["host_report_render_s"] = round(time.perf_counter() - t0, 3)
        res["host_report_mb"] = round(page.stat().st_size / 2**20, 3)
        open_in_chromium(page, res, "host_report")

        copies = max(1, math.ceil(fleet_gpus / max(len(doc.series), 1)))
        big = replicate(doc, copies)
        res["fleet_gpus"] = len(big.series)
        res["fleet_hosts"] = len(big.hosts)
        fpage = Path(tmp) / "fleet.html"
        t0 = time.perf_counter()
        view = fleet.build("2026-W48", big)
        write_atomic(fpage, render_fleet(view))
        res["fleet_render_s"] = round(time.perf_counter() - t0, 3)
        res["fleet_html_mb"] = round(fpage.stat().st_size / 2**20, 3)
        open_in_chromium(fpage, res, "fleet")
    res["targets"] = {
        "host_report_under_3_mb": res["host_report_mb"] < HOST_REPORT_MB,  # type: ignore[operator]
        "host_report_laid_out_under_1_s": isinstance(res.get("host_report_layout_s"), float)
        and res["host_report_layout_s"] < HOST_LAYOUT_S,  # type: ignore[operator]
        "fleet_page_under_1_mb": res["fleet_html_mb"] < FLEET_PAGE_MB,  # type: ignore[operator]
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(
        a[0] if a else "bench/fleet.json",
        int(a[1]) if len(a) > 1 else 100,
        float(a[2]) if len(a) > 2 else 2.0,
        int(a[3]) if len(a) > 3 else 1000,
    )
