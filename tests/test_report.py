"""The HTML report: structure, escaping, determinism, self-containment, a real browser."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.findings import Event, Finding, FindingsDocument, GpuSeries, HostInfo, RunInfo
from reports import browser
from reports.render import render_report, write_report

FIXED = "2026-12-01T00:00:00Z"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def test_structure(sim_doc) -> None:
    html = render_report(sim_doc, generated_at=FIXED)
    assert html.count('<section class="finding"') == len(sim_doc.findings)
    assert html.count("<svg") >= len(sim_doc.findings)
    assert "<polyline" in html and 'class="idle"' in html and 'class="trend"' in html
    assert 'class="thr-warn"' in html and "75 %" in html and "90 %" in html
    assert 'class="legend"' in html and "ev-oom" in html  # the OOM events are marked
    assert "Leaking:" in html and "fast-image-processor-leak-00" in html
    assert "--disable-fast-image-processor" in html
    for r in sim_doc.run.rules:
        assert f"<code>{r.rule_id}</code>" in html


def test_deterministic(sim_doc) -> None:
    assert render_report(sim_doc, generated_at=FIXED) == render_report(
        copy.deepcopy(sim_doc), generated_at=FIXED
    )


def test_self_contained(sim_doc) -> None:
    html = render_report(sim_doc, generated_at=FIXED)
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", html)
    assert "@import" not in html and "url(" not in html


def _hostile() -> FindingsDocument:
    evil = "<script>alert(1)</script>\"'&"
    run = RunInfo(
        bucket=evil, since=None, until=None, hosts=[], generated_at=FIXED, analyzer_version="0"
    )
    doc = FindingsDocument(run=run)
    doc.hosts = [HostInfo(host=evil, engine=evil, model=evil, gpus=1, flags={"x": evil})]
    doc.series = [GpuSeries(evil, 0, evil, 100, [0.0, 60.0], [10, 20], [5, 10])]
    doc.events = [Event(evil, "1970-01-01T00:00:30Z", "oom", evil)]
    doc.findings = [
        Finding(
            "GM001",
            "leak.gpu",
            "warning",
            evil,
            0,
            1,
            None,
            None,
            evil,
            {evil: evil},
            evil,
            evil,
            [evil],
        )
    ]
    return doc


def test_hostile_text_is_escaped() -> None:
    html = render_report(_hostile(), generated_at=FIXED)
    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_empty_document() -> None:
    run = RunInfo(
        bucket="b", since=None, until=None, hosts=[], generated_at=FIXED, analyzer_version="0"
    )
    html = render_report(FindingsDocument(run=run))
    assert "No leak found on any host." in html and "<svg" not in html


def test_reports_do_not_load_duckdb_or_polars() -> None:
    code = "import sys, reports.render; print(' '.join(sys.modules))"
    mods = set(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert not mods & {"duckdb", "polars", "pyarrow"}


@pytest.mark.skipif(
    browser.CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)"
)
def test_renders_in_a_real_browser_offline(sim_doc, tmp_path) -> None:
    page = write_report(sim_doc, tmp_path / "report.html", generated_at=FIXED)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    dom = browser.run(page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<svg") >= len(sim_doc.findings) and "<polyline" in dom.stdout
    assert not browser.console_errors(dom)
    assert browser.run(page, f"--screenshot={shot}", "--window-size=1280,2400").returncode == 0
    assert shot.stat().st_size > 20_000  # a blank page is a few KB


def test_data_gaps_reach_the_summary(tmp_path) -> None:
    import datetime as dt

    from analyzer.packs import load_packs
    from analyzer.runner import analyze
    from collector.writer import BucketWriter
    from simulator.generate import simulate

    simulate("healthy-static", tmp_path, hosts=1, hours=1, seed=1)
    simulate("cache-warmup", tmp_path, hosts=1, hours=0.5, seed=1)  # stops half-way
    t = dt.datetime(2026, 11, 23, 0, 10, tzinfo=dt.UTC)
    BucketWriter(tmp_path, "healthy-static-00").write(
        "collector_runs",
        [
            {
                "ts": t,
                "run_id": "r1",
                "source": "metrics",
                "status": "failed",
                "error": "http://127.0.0.1:30000/metrics: timed out",
            }
        ],
    )
    doc = analyze(tmp_path, load_packs())
    assert any(g.startswith("cache-warmup-00: no GPU samples after") for g in doc.run.gaps)
    assert any("source metrics failed in 1 of" in g and "timed out" in g for g in doc.run.gaps)
    html = render_report(doc, generated_at=FIXED)
    assert "Data gaps" in html and "timed out" in html


@pytest.mark.skipif(
    browser.CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)"
)
def test_fleet_report_renders_in_a_real_browser_offline(sim_doc, tmp_path) -> None:
    from analyzer.fleet import build
    from reports.fleet import write_fleet

    view = build("2026-W48", sim_doc)
    dom = browser.run(write_fleet(view, tmp_path / "fleet.html"), "--dump-dom")
    assert dom.returncode == 0
    assert "Cohorts" in dom.stdout and dom.stdout.count("<svg") >= len(view.cohorts)
    assert not browser.console_errors(dom)


def test_allocator_chart_per_process(sim_doc) -> None:
    """Findings from the allocator probe show allocated, reserved and NVML of their process."""
    from reports.model import build

    probed = {a.host for a in sim_doc.alloc}
    assert {"probe-tensor-leak-00", "probe-cache-growth-00", "probe-outside-leak-00"} <= probed
    model = build(sim_doc)
    views = [v for v in model.findings if v.rule_id in ("AP001", "AP002", "AP003")]
    assert sorted(v.rule_id for v in views) == ["AP001", "AP002", "AP003"]
    for v in views:
        (chart,) = [c for c in v.charts if "allocator view" in c.title]
        assert [line.css for line in chart.lines] == ["al-nvml", "al-reserved", "al-allocated"]
        assert all(len(line.points.split()) > 20 for line in chart.lines)
    leak = next(v for v in views if v.rule_id == "AP001")
    (chart,) = [c for c in leak.charts if "allocator view" in c.title]
    allocated = [float(p.split(",")[1]) for p in chart.lines[2].points.split()]
    assert allocated[-1] < allocated[0] - 10  # SVG y grows downwards: allocated rose
    # a host without the probe gets no allocator chart
    other = [v for v in model.findings if v.where.startswith("latency-pressure-00")]
    assert other and not any("allocator view" in c.title for v in other for c in v.charts)
    # every finding on a probed GPU carries its process's allocator view
    on_probed = sum(1 for f in sim_doc.findings if f.host in probed and f.gpu is not None)
    assert render_report(sim_doc).count('class="al-allocated"') == on_probed >= 3
