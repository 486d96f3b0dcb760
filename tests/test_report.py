"""The HTML report: structure, escaping, determinism, self-containment, a real browser."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.findings import (
    AllocSeries,
    Event,
    Finding,
    FindingsDocument,
    GpuSeries,
    HostInfo,
    RunInfo,
)
from collector.atomic import write_atomic
from reports import browser
from reports.render import render_report

FIXED = "2026-12-01T00:00:00Z"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def test_structure(sim_doc) -> None:
    from analyzer.verdicts import gpu_verdicts

    html = render_report(sim_doc, generated_at=FIXED)
    verdicts = gpu_verdicts(sim_doc)
    rows = re.findall(
        r'<tr class="sev-row-[^"]*"><td><a href="#[^"]+"><strong>([^<]+)</strong></a></td>'
        r'<td class="num">(\S+?)</td>',
        html,
    )
    assert rows == [(v.host, str(v.gpu)) for v in verdicts]  # one row per affected GPU, in order
    hours = [v.hours_to_oom for v in verdicts if v.hours_to_oom is not None]
    assert hours == sorted(hours) and verdicts[0].hours_to_oom == min(hours)
    # one section per GPU; the four tensor-parallel ranks of rank-skew-00 share one
    sections = re.findall(r'<section class="gpu" id="([^"]+)"', html)
    tp = {h.host: int(h.flags.get("tp_size") or 1) for h in sim_doc.hosts}
    per_host: dict[str, int] = {}
    for g in sim_doc.series:
        per_host[g.host] = per_host.get(g.host, 0) + 1
    assert len(sections) == sum(1 if tp.get(h, 1) > 1 and n > 1 else n for h, n in per_host.items())
    assert any(re.fullmatch(r"gpu-rank-skew-00-[0-9a-f]{6}-0-1-2-3", x) for x in sections)
    assert html.count('<figure class="chart"') == len(sections)
    # every finding is shown once, inside its GPU's section
    assert html.count('<div class="finding"') == len(sim_doc.findings)
    assert html.index('id="gpu-table"') < html.index('id="hosts"') < html.index('class="gpu"')
    assert "--disable-fast-image-processor" in html and "A. Restart with" in html
    for r in sim_doc.run.rules:
        assert f"<code>{r.rule_id}</code>" in html


def test_first_remedy_and_options() -> None:
    from reports.text import first_remedy, options

    text = (
        "A. Restart with --flag: costs 50 ms.\n   more.\nB. Lower it: costs restarts.\nC. Upgrade."
    )
    assert options(text) == [
        "A. Restart with --flag: costs 50 ms. more.",
        "B. Lower it: costs restarts.",
        "C. Upgrade.",
    ]
    assert first_remedy(text) == "A. Restart with --flag"
    assert first_remedy("The memory is held. Restart the server before the OOM.") == (
        "Restart the server before the OOM."
    )
    assert options("No list here.\nA. only one") == []
    assert first_remedy("Above the level: restart now, quietly.") == "Restart now, quietly."
    assert first_remedy("x " * 200).endswith("…") and len(first_remedy("x " * 200)) <= 110


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
    # our own scripts only: the chart data blocks and the one inline program
    assert html.count("<script") == html.count('<script type="application/json"') + 1
    assert "<script>alert" not in html and '</script>"' not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_control_bytes_are_shown_not_sent() -> None:
    doc = _hostile()
    doc.hosts[0].host = doc.series[0].host = doc.findings[0].host = "gpu\x1b[31mhost\x07"
    doc.events = [
        Event(doc.hosts[0].host, "1970-01-01T00:00:30Z", "oom", "boom \x1b[2J\x00 end\tok")
    ]
    doc.findings[0].summary = "bell\x07 and escape\x1b and del\x7f"
    html = render_report(doc, generated_at=FIXED)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", html)
    assert "gpu\\x1b[31mhost\\x07" in html and "bell\\x07 and escape\\x1b and del\\x7f" in html
    assert "boom \\x1b[2J\\x00 end\tok" in html  # the tab stays a tab


def test_empty_document() -> None:
    run = RunInfo(
        bucket="b", since=None, until=None, hosts=[], generated_at=FIXED, analyzer_version="0"
    )
    html = render_report(FindingsDocument(run=run))
    assert "No data in scope: nothing could be checked." in html and "<svg" not in html


def test_reports_do_not_load_duckdb_or_polars() -> None:
    code = "import sys, reports.render; print(' '.join(sys.modules))"
    mods = set(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert not mods & {"duckdb", "polars", "pyarrow"}


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


def test_allocator_lines_in_the_gpu_chart(sim_doc) -> None:
    """Where the probe ran, the GPU's one chart carries allocated, reserved and NVML of the
    process; elsewhere it does not."""
    from reports.model import build

    probed = {a.host for a in sim_doc.alloc}
    assert {"probe-tensor-leak-00", "probe-cache-growth-00", "probe-outside-leak-00"} <= probed
    model = build(sim_doc)
    for s in model.sections:
        assert s.chart is not None
        names = [label for label, _c in s.chart.legend]
        has = any(n.endswith(" allocated") for n in names)
        assert has == (s.host in probed), (s.host, names)
    leak = next(s for s in model.sections if s.host == "probe-tensor-leak-00")
    import json

    data = json.loads(leak.chart.data)
    (alloc,) = [x for x in data["s"] if x["n"].endswith(" allocated")]
    vals = [v for v in alloc["v"] if v is not None]
    assert len(vals) > 20 and vals[-1] > vals[len(vals) // 10] + 1000  # allocated rose > 1 GiB


def _slow_leak(rate_mib_h: float = 600.0, hours: float = 6.0) -> GpuSeries:
    """An 80 GiB GPU at about 60 GiB, leaking under 1 GiB/h, sampled every minute."""
    gib, n = 2**30, int(hours * 60)
    t = [1.8e9 + 60.0 * i for i in range(n)]
    used = [int(60 * gib + rate_mib_h * 2**20 * i / 60 + (i % 7) * 2**20) for i in range(n)]
    return GpuSeries("slow-00", 0, "H100", 80 * gib, t, used, [u - 50 * 2**20 for u in used],
                     trend=[[t[0], float(used[0]), t[-1], float(used[-1])]])  # fmt: skip


def test_a_slow_leak_is_visibly_rising() -> None:
    from reports.chartdata import build_spec
    from reports.charts import render_spec

    s = _slow_leak()
    spec = build_spec("c", "slow", [s], [], rate_mib_per_h=600.0)
    lo, hi = min(s.used_min) / 2**20, max(s.used_max) / 2**20
    # the y-axis spans the band the data lives in, not 0..80 GiB: the 3.5 GiB rise fills
    # most of the plot; the total is named, not forced into view
    assert spec.y0 <= lo and spec.y1 >= hi
    assert (hi - lo) / (spec.y1 - spec.y0) > 0.6
    assert not spec.total_in_view and spec.total == 80 * 1024
    chart = render_spec(spec)
    assert chart.note.startswith("limit 80.0 GiB, above the view")
    # the drawn line rises across most of the plot height (SVG y grows downwards)
    ys = [float(p.split(",")[1]) for p in chart.polys[0].points.split()]
    assert ys[0] - ys[-1] > 0.6 * chart.plot_h
    # the projection continues the trend to the right edge, and the note says when OOM comes
    assert spec.projection is not None and spec.projection[2] == spec.x1
    assert "limit at" in spec.projection_note and "beyond the right edge" in spec.projection_note
    # a full scale would have drawn the same rise as a few pixels: the reason for the zoom
    assert (hi - lo) / (80 * 1024) * chart.plot_h < 12


def test_projection_meets_the_limit_when_it_is_close() -> None:
    from reports.chartdata import build_spec

    s = _slow_leak(rate_mib_h=3000.0)  # 60 -> 77.6 GiB of 80
    spec = build_spec("c", "fast", [s], [], rate_mib_per_h=3000.0)
    assert spec.total_in_view and spec.y1 >= 80 * 1024
    assert spec.projection is not None
    assert spec.projection[3] == pytest.approx(80 * 1024)  # drawn to where it meets the limit
    assert spec.projection[2] > s.t[-1] and tuple(lbl for _v, lbl in spec.thresholds[-1:]) == (
        "limit",
    )


def test_an_oom_time_already_past_at_the_analysis_is_not_a_countdown(sim_doc) -> None:
    """The first screen counts an OOM from the GPU's last sample; analysed after that
    moment (old data), it says the moment has passed rather than "in 1 min"."""
    import dataclasses

    from analyzer.verdicts import gpu_verdicts

    soon = next(v for v in gpu_verdicts(sim_doc) if v.oom_at)
    for now, past in (("2030-01-01T00:00:00Z", True), ("2026-01-01T00:00:00Z", False)):
        doc = dataclasses.replace(sim_doc, run=dataclasses.replace(sim_doc.run, generated_at=now))
        line = re.search(r"Soonest out of memory: [^<]*", render_report(doc, generated_at=FIXED))
        assert line and soon.host in line[0], line
        assert ("already past when this was analysed" in line[0]) is past, line[0]
        assert (" in " in line[0].split(soon.host, 1)[1]) is not past, line[0]


def test_a_kind_at_the_analysis_cap_says_the_analysis_keeps_only_the_last() -> None:
    from analyzer.findings import MAX_EVENTS_PER_KIND
    from reports.chartdata import build_spec

    s = _slow_leak()
    evs = [
        Event("slow-00", f"2027-01-15T{8 + m // 60:02d}:{m % 60:02d}:00Z", "oom", f"oom {m}")
        for m in range(MAX_EVENTS_PER_KIND)
    ]
    s.t = [_iso(evs[0].ts) + 60.0 * i for i in range(len(s.t))]
    (oom,) = [m for m in build_spec("c", "m", [s], evs, plot_w=752).markers if "OOM" in m.label]
    assert oom.label == f"OOM ×{MAX_EVENTS_PER_KIND}" and "keeps the last" in oom.title
    fewer = build_spec("c", "m", [s], evs[1:], plot_w=752).markers
    (oom,) = [m for m in fewer if "OOM" in m.label]
    assert oom.label == f"OOM ×{MAX_EVENTS_PER_KIND - 1}" and "keeps the last" not in oom.title


def test_repeated_markers_merge_and_labels_never_overlap() -> None:
    from reports.chartdata import CHAR_PX, build_spec

    s = _slow_leak()
    evs = [
        Event("slow-00", f"2027-01-15T08:{m:02d}:00Z", "kv_leak_check", f"[x] leak {m}")
        for m in range(0, 43)
    ]
    evs += [
        Event("slow-00", "2027-01-15T08:20:00Z", k, "t") for k in ("oom", "restart", "server_args")
    ]
    evs += [Event("slow-00", "2027-01-15T08:21:00Z", "image_processor", "t")]
    t0 = _iso(evs[0].ts)
    s.t = [t0 + 60.0 * i for i in range(len(s.t))]
    spec = build_spec("c", "m", [s], evs, plot_w=752)
    kv = [m for m in spec.markers if m.label.startswith("KV leak check")]
    assert [m.label for m in kv] == ["KV leak check ×43"] and len(kv[0].ticks) == 43
    same = [m for m in spec.markers if "OOM" in m.label]
    assert len(same) == 1 and same[0].label == "OOM + restart + server start"
    boxes: dict[int, list[tuple[float, float]]] = {}
    for m in spec.markers:
        if m.lane is None:
            continue
        x = min((m.t - spec.x0) / (spec.x1 - spec.x0) * 752, 752 - len(m.label) * CHAR_PX - 8)
        for a, b in boxes.get(m.lane, []):
            assert x >= b or x + len(m.label) * CHAR_PX + 8 <= a, "labels overlap"
        boxes.setdefault(m.lane, []).append((x, x + len(m.label) * CHAR_PX + 8))
    assert sum(len(v) for v in boxes.values()) == len(spec.markers)  # every label found a lane


def _iso(ts: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def test_one_rate_per_gpu_on_both_pages(sim_doc) -> None:
    """The fleet ranking and the host report show the same rate and time to OOM per GPU."""
    from analyzer.fleet import build
    from reports.fleet import render_fleet
    from reports.model import build as build_model

    view = build("2026-W48", sim_doc)
    rows = {(r.host, r.gpu): r for r in build_model(sim_doc).rows}
    fleet_html = render_fleet(view)
    assert view.ranking
    for r in view.ranking:
        row = rows[(r.host, "—" if r.gpu is None else str(r.gpu))]
        rate = r.leak_mib_per_h if r.host_ram_mib_per_h is None else r.host_ram_mib_per_h
        shown = "—" if rate is None else f"{rate:,.0f} MiB/h"
        assert row.rate == shown, (r.host, row.rate, shown)
        if r.host_ram_mib_per_h is None:
            assert f'<td class="num nowrap">{shown}</td>' in fleet_html
        else:  # the host report labels it host RAM beside the number; the fleet page too
            assert row.rate_note == "host RAM"
            assert f'—<div class="sub">host RAM {shown}</div>' in fleet_html
    cats = {c for r in view.ranking for c in r.categories}
    assert "leak.kv_pool" in cats  # the critical KV-pool leak is ranked (it has no gpu)
    kv = next(r for r in view.ranking if "leak.kv_pool" in r.categories)
    assert kv.severity == "critical"
    first_warning = min(i for i, r in enumerate(view.ranking) if r.severity != "critical")
    assert view.ranking.index(kv) < first_warning  # severity first, then rate


needs_chromium = pytest.mark.skipif(
    browser.CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)"
)

FIRST_SCREEN = """(() => {
  const t = document.getElementById('gpu-table');
  const rows = [...t.tBodies[0].rows];
  return {top: t.getBoundingClientRect().top,
          verdict: document.getElementById('verdict').getBoundingClientRect().bottom,
          leak_rows: rows.filter(r => !r.classList.contains('noleak'))
                         .map(r => r.getBoundingClientRect().bottom),
          innerH: innerHeight, wide: document.documentElement.scrollWidth - innerWidth};
})()"""

OVERLAPS = """(() => {
  const out = [];
  for (const svg of document.querySelectorAll('figure.chart svg')) {
    const boxes = [...svg.querySelectorAll('text')].map(t => [t.textContent, t.getBoundingClientRect()]);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, r] = boxes[i], [b, s] = boxes[j];
      if (r.width && s.width && r.left < s.right - 0.5 && s.left < r.right - 0.5
          && r.top < s.bottom - 0.5 && s.top < r.bottom - 0.5) out.push(a + ' / ' + b);
    }
  }
  return out;
})()"""


@needs_chromium
def test_host_report_in_a_real_browser(sim_doc, tmp_path) -> None:
    """Offline Chromium: no console errors, no request but the page, the per-GPU table on
    the first screen (from DOM positions), hover values, drag-zoom and double-click reset."""
    import time

    page = write_atomic(tmp_path / "report.html", render_report(sim_doc, generated_at=FIXED))
    with browser.Page(1400, 900) as p:
        load_s = p.open(page)
        first = p.eval(FIRST_SCREEN)
        assert first["verdict"] <= first["top"] < 300
        assert first["leak_rows"] and max(first["leak_rows"]) <= first["innerH"], first
        assert first["wide"] <= 0, "the page scrolls sideways"
        p.screenshot(ARTIFACTS / "report-first-screen.png")
        p.eval("document.querySelector('figure.chart').scrollIntoView()")
        for _ in range(50):
            if p.eval("window.leakreport.charts.length") > 0:
                break
            time.sleep(0.1)
        over = p.eval("""(() => { const r = document.querySelector('figure.chart .u-over')
                          .getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()""")
        x, y, w, h = over
        p.mouse("mouseMoved", x + w * 0.5, y + h * 0.5)
        values = p.eval(
            "[...document.querySelector('figure.chart').querySelectorAll('.u-legend .u-value')].map(e => e.textContent)"
        )
        assert values[0].endswith("UTC") and any(v.endswith("GiB") for v in values[1:]), values
        full = p.eval(
            "(() => { const s = leakreport.charts[0].plot.scales.x; return [s.min, s.max]; })()"
        )
        p.mouse("mousePressed", x + w * 0.3, y + h * 0.5, button="left", clicks=1)
        p.mouse("mouseMoved", x + w * 0.6, y + h * 0.5)
        p.mouse("mouseReleased", x + w * 0.6, y + h * 0.5, button="left", clicks=1)
        zoomed = p.eval(
            "(() => { const s = leakreport.charts[0].plot.scales.x; return [s.min, s.max]; })()"
        )
        assert full[0] < zoomed[0] < zoomed[1] < full[1]
        assert (zoomed[1] - zoomed[0]) == pytest.approx((full[1] - full[0]) * 0.3, rel=0.1)
        p.screenshot(ARTIFACTS / "report-chart-zoomed.png")
        for kind in ("mousePressed", "mouseReleased"):
            p.mouse(kind, x + w * 0.5, y + h * 0.5, button="left", clicks=2)
        reset = p.eval(
            "(() => { const s = leakreport.charts[0].plot.scales.x; return [s.min, s.max]; })()"
        )
        assert reset == pytest.approx(full)
        # zoomed into two minutes, the time ticks are seconds apart: each says which
        p.eval(
            """(() => { const u = leakreport.charts[0].plot, a = u.scales.x.min;
                      u.setScale('x', {min: a, max: a + 120}); })()"""
        )
        time.sleep(0.3)  # drawn on the next frame
        ticks = p.eval("leakreport.charts[0].plot.axes[0]._values")
        assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
        assert all(len(t) == 8 for t in ticks), ticks  # HH:MM:SS
        for kind in ("mousePressed", "mouseReleased"):
            p.mouse(kind, x + w * 0.5, y + h * 0.5, button="left", clicks=2)
        before = p.eval("leakreport.charts[0].plot.width")
        p.call(
            "Emulation.setDeviceMetricsOverride",
            width=1000,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )
        for _ in range(30):
            if p.eval("leakreport.charts[0].plot.width") < before:
                break
            time.sleep(0.1)
        assert p.eval("leakreport.charts[0].plot.width") < before  # the chart follows the window
        assert p.errors() == []
        assert p.requests() == [page.resolve().as_uri()]
    assert load_s < 5


@needs_chromium
def test_the_gpu_table_fits_a_narrow_window_and_the_printed_page(sim_doc, tmp_path) -> None:
    """At 800 px and in print every column of "which GPU needs action" stays on the page
    (cells wrap), so the OOM time and the first remedy are neither behind a scrollbar nor
    cut off on paper."""
    page = write_atomic(tmp_path / "report.html", render_report(sim_doc, generated_at=FIXED))
    cut = """(() => { const t = document.getElementById('gpu-table');
        const last = [...t.tBodies[0].rows[0].cells].pop().getBoundingClientRect();
        return [t.scrollWidth - t.clientWidth, last.right - innerWidth,
                document.documentElement.scrollWidth - innerWidth]; })()"""
    with browser.Page(800, 900) as p:
        p.open(page)
        assert max(p.eval(cut)) <= 0, p.eval(cut)
        p.call("Emulation.setEmulatedMedia", media="print")
        p.call(
            "Emulation.setDeviceMetricsOverride",
            width=720,  # a Letter or A4 page's printable width at 96 dpi, about
            height=960,
            deviceScaleFactor=1,
            mobile=False,
        )
        assert max(p.eval(cut)) <= 0, p.eval(cut)


@needs_chromium
def test_host_report_reads_with_javascript_off(sim_doc, tmp_path) -> None:
    page = write_atomic(tmp_path / "report.html", render_report(sim_doc, generated_at=FIXED))
    with browser.Page(1400, 900, javascript=False) as p:
        p.open(page)
        # lay out every section (off-screen ones are skipped until scrolled to) before measuring
        p.eval("""document.head.insertAdjacentHTML('beforeend',
                  '<style>section.gpu { content-visibility: visible !important; }</style>')""")
        first = p.eval(FIRST_SCREEN)
        assert first["leak_rows"] and max(first["leak_rows"]) <= first["innerH"]
        shown = p.eval(
            "[...document.querySelectorAll('figure.chart svg')].filter(s => s.getBoundingClientRect().height > 100).length"
        )
        assert shown == len(render_report(sim_doc).split('<figure class="chart"')) - 1
        assert p.eval("document.querySelectorAll('table.evidence').length") == len(sim_doc.findings)
        assert p.eval(OVERLAPS) == []  # no label sits on another
        p.eval("document.querySelector('figure.chart').scrollIntoView()")
        p.screenshot(ARTIFACTS / "report-chart-static.png")
        assert p.errors() == [] and p.requests() == [page.resolve().as_uri()]


@needs_chromium
def test_fleet_report_in_a_real_browser(sim_doc, tmp_path) -> None:
    from analyzer.fleet import build
    from reports.fleet import render_fleet

    view = build("2026-W48", sim_doc)
    page = write_atomic(tmp_path / "fleet.html", render_fleet(view))
    with browser.Page(1400, 900) as p:
        p.open(page)
        top = p.eval("document.getElementById('soonest-table').getBoundingClientRect().top")
        rows = p.eval(
            "[...document.querySelectorAll('#soonest-table tbody tr')].map(r => r.getBoundingClientRect().bottom)"
        )
        assert top < 200 and len(rows) == len(view.soonest) and rows[0] < 900
        assert (
            p.eval(
                "document.getElementById('soonest').compareDocumentPosition(document.getElementById('cohorts'))"
            )
            == 4
        )
        p.screenshot(ARTIFACTS / "fleet-first-screen.png")
        assert p.errors() == [] and p.requests() == [page.resolve().as_uri()]


def test_flat_memory_is_not_zoomed_into_noise() -> None:
    from reports.chartdata import y_band

    flat = [70_000.0 + (i % 5) * 20 for i in range(300)]  # 80 MiB of noise at 70 GB
    y0, y1, near = y_band(flat, 81_920.0)
    assert y1 - y0 >= 0.03 * 70_000 and not near  # the noise stays a small wiggle
    assert (max(flat) - min(flat)) / (y1 - y0) < 0.05


def test_a_host_without_gpu_samples_gets_a_row_and_a_section() -> None:
    """A KV-pool leak found from logs alone: no series, still on the first screen."""
    run = RunInfo(
        bucket="b", since=None, until=None, hosts=[], generated_at=FIXED, analyzer_version="0"
    )
    doc = FindingsDocument(run=run, hosts=[HostInfo(host="logs-only-00")])
    doc.findings = [
        Finding("KV001", "leak.kv_pool", "critical", "logs-only-00", None, None, None, None,
                "KV pages are not reclaimed.", {"leak_checks": 5}, "Restart the server.")
    ]  # fmt: skip
    html = render_report(doc, generated_at=FIXED)
    (anchor,) = re.findall(r'<section class="gpu" id="(gpu-logs-only-00-[0-9a-f]{6}-x)"', html)
    assert f'href="#{anchor}"' in html
    assert "KV-POOL LEAK" in html.upper() and "Restart the server." in html
    assert "<figure" not in html  # no chart without samples, and no empty one


def test_soonest_in_the_same_order_on_both_pages(sim_doc) -> None:
    from analyzer.fleet import build
    from reports.model import build as build_model

    rows = [(r.host, r.gpu, r.hours) for r in build_model(sim_doc).rows if r.hours != "—"]
    soonest = build("2026-W48", sim_doc).soonest
    assert [(h, g) for h, g, _ in rows] == [(r.host, str(r.gpu)) for r in soonest]
    # an estimate beyond the forecast window is marked as one on both pages
    for (_h, _g, hours), r in zip(rows, soonest, strict=True):
        assert hours.startswith("≈") == r.oom_estimated


def test_oom_clock_counts_from_the_gpus_own_data_end(sim_doc) -> None:
    """Hosts end at different times: a forecast starts where its GPU's samples end, and the
    chart's caption names the same clock time as the table."""
    import datetime as dt

    from analyzer.verdicts import gpu_verdicts
    from reports.model import build as build_model

    # each GPU's last sample, not its last chart point (the start of a chunk of buckets)
    ends = {(s.host, s.gpu): s.last_t for s in sim_doc.series if s.last_t is not None}
    assert all(t > s.t[-1] for s in sim_doc.series if (t := ends.get((s.host, s.gpu))))
    assert len({round(t) for t in ends.values()}) > 1  # the fixture has hosts ending apart
    model = build_model(sim_doc)
    charts = {s.anchor: s.chart for s in model.sections}
    rows = {(r.host, r.gpu): r for r in model.rows}
    checked = 0
    for v in gpu_verdicts(sim_doc):
        if v.hours_to_oom is None or (v.host, v.gpu) not in ends:
            continue
        want = dt.datetime.fromtimestamp(ends[(v.host, v.gpu)] + v.hours_to_oom * 3600, dt.UTC)
        assert v.oom_at == want.strftime("%Y-%m-%dT%H:%MZ")
        row = rows[(v.host, str(v.gpu))]
        chart = charts[row.anchor]
        if chart is not None and "limit at" in chart.note:
            assert want.strftime("%m-%d %H:%M UTC") in chart.note, (chart.note, row.oom_at)
            checked += 1
    assert checked >= 3


def test_write_atomic_makes_files_as_open_would(tmp_path) -> None:
    """0666 less the umask (readable by the bucket's other readers), not mkstemp's 0600;
    no temporary file left beside it."""
    import os

    from collector.atomic import write_atomic

    mask = os.umask(0o022)
    try:
        p = write_atomic(tmp_path / "sub" / "x.json", "{}")
        assert p.read_text() == "{}" and p.stat().st_mode & 0o777 == 0o644
        os.umask(0o077)
        assert write_atomic(tmp_path / "y", b"1").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(mask)
    assert sorted(f.name for f in tmp_path.rglob("*")) == ["sub", "x.json", "y"]


def test_write_atomic_writes_through_links_and_into_fifos(tmp_path) -> None:
    """`--out` on a symlink replaces the file it names and keeps the link; on a FIFO (or
    a device: /dev/stdout) it writes into it instead of renaming a file over it."""
    import os
    import threading

    from collector.atomic import write_atomic

    real = tmp_path / "real.html"
    real.write_text("old")
    (tmp_path / "link.html").symlink_to(real)
    write_atomic(tmp_path / "link.html", "new")
    assert (tmp_path / "link.html").is_symlink() and real.read_text() == "new"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_atomic(fifo, "through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"]
    assert fifo.exists() and not fifo.is_file()  # still a FIFO
    assert sorted(f.name for f in tmp_path.iterdir()) == ["link.html", "pipe", "real.html"]


def test_a_reused_pid_has_one_legend_entry_per_process() -> None:
    """Two processes with one PID (a restarted container) are told apart by their start;
    a PID seen once keeps its plain label."""
    from reports.chartdata import build_spec

    gpu = _slow_leak(hours=6.0)
    t0 = gpu.t[0]

    def proc(pid: int, start: float) -> AllocSeries:
        t = [start + 300.0 * i for i in range(24)]
        return AllocSeries("slow-00", pid, 0, 0, "scheduler", t, [2**30] * 24, [2**31] * 24,
                           [None] * 24)  # fmt: skip

    alloc = [proc(4242, t0), proc(4242, t0 + 3 * 3600.0), proc(77, t0)]
    spec = build_spec("c", "reused", [gpu], [], alloc=alloc)
    names = [s.name for s in spec.series if s.name.endswith(" allocated")]
    assert names == [
        "pid 4242 from 01-15 08:00 allocated",
        "pid 4242 from 01-15 11:00 allocated",
        "pid 77 allocated",
    ]
