"""The weekly fleet report: cohorts, ranking, week over week."""

from __future__ import annotations

import copy
import re
import subprocess
import sys

import pytest

from analyzer.fleet import build, cohort_of, compare, previous_week, week_range
from analyzer.verdicts import RATED


def test_iso_weeks() -> None:
    assert [d.isoformat() for d in week_range("2026-W48")] == ["2026-11-23", "2026-11-29"]
    assert previous_week("2026-W01") == "2025-W52"
    with pytest.raises(ValueError, match="ISO week"):
        week_range("2026-48")


def test_cohorts_show_the_flag_effect(sim_doc) -> None:
    view = build("2026-W48", sim_doc)
    by = {(c.version, c.flags.split(",")[0], c.model): c for c in view.cohorts}
    on = by[("0.4.9.post6", "fast image processor on", "Qwen/Qwen2.5-VL-7B-Instruct")]
    off = by[("0.4.9.post6", "fast image processor off", "Qwen/Qwen2.5-VL-7B-Instruct")]
    assert (on.share_affected, off.share_affected) == (1.0, 0.0)
    assert on.median_rate and on.median_rate > 1000 and off.rates == []
    assert view.affected_hosts == len({f.host for f in sim_doc.findings if f.category in RATED})


def test_week_over_week(sim_doc) -> None:
    prev = copy.deepcopy(sim_doc)
    cur = copy.deepcopy(sim_doc)
    # fixed: the leak host reports this week without its GPU leak finding
    cur.findings = [
        f for f in cur.findings if not (f.host == "rank-skew-00" and f.category == "leak.gpu")
    ]
    # silent: this host stopped reporting; its findings are not "resolved"
    cur.findings = [f for f in cur.findings if f.host != "kv-pool-leak-00"]
    cur.hosts = [h for h in cur.hosts if h.host != "kv-pool-leak-00"]
    # new: a finding last week did not have
    prev.findings = [f for f in prev.findings if f.host != "host-rss-leak-00"]
    status = {(c.host, c.category): c.status for c in compare(prev, cur)}
    assert status[("rank-skew-00", "leak.gpu")] == "resolved"
    # it was left off the page, which then read "no leak findings in either week"
    assert status[("kv-pool-leak-00", "leak.kv_pool")] == "silent"
    assert status[("host-rss-leak-00", "leak.host_rss")] == "new"
    assert status[("fast-image-processor-leak-00", "leak.gpu")] == "persisting"
    assert all(c.status == "new" for c in compare(None, cur))
    # a finding gone because its rules could not run this week (its logs missing, say) is
    # not "resolved"; one the week before could not have found is not plainly "new"
    host = "cuda-context-leak-00"
    rules = {f.rule_id for f in sim_doc.findings if f.host == host and f.category in RATED}
    assert rules
    blind = copy.deepcopy(sim_doc)
    blind.findings = [f for f in blind.findings if f.host != host]
    for c in blind.coverage:
        if c["host"] == host:
            c["checked"] = [r for r in c["checked"] if r not in rules]
    assert {c.status for c in compare(sim_doc, blind) if c.host == host} == {"unchecked"}
    assert {c.status for c in compare(blind, sim_doc) if c.host == host} == {"unchecked_before"}
    view = build("2026-W48", sim_doc, blind)
    assert view.previous_incomplete == blind.incomplete_reasons()


def test_fleet_command_writes_the_page(sim_bucket, tmp_path) -> None:
    out = tmp_path / "fleet.html"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "leakreport",
            "fleet",
            str(sim_bucket[0]),
            "--week",
            "2026-W48",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "Cohorts" in html and "fast image processor off" in html and "Week over week" in html
    assert "No data for the previous week" in html and "<script" not in html
    assert html.index("Soonest out of memory") < html.index("Cohorts")


def test_cohort_trend_against_last_week(sim_doc) -> None:
    prev = copy.deepcopy(sim_doc)
    prev.findings = [f for f in prev.findings if f.host != "latency-pressure-00"]
    view = build("2026-W48", sim_doc, prev)
    host = next(h for h in sim_doc.hosts if h.host == "latency-pressure-00")
    c = next(c for c in view.cohorts if c.key == " / ".join(cohort_of(host)))
    assert (c.previous_share, c.share_affected) == (0.0, 1.0)


def test_fleet_gold_and_hostile_text(sim_doc) -> None:
    from test_report_gold import check_gold

    from reports.fleet import render_fleet

    hostile = copy.deepcopy(sim_doc)
    for h in hostile.hosts:
        h.model = "<script>alert(1)</script>\x1b[31m"
    html = render_fleet(build("2026-W48", hostile))
    assert "<script" not in html and "&lt;script&gt;" in html
    assert "\x1b" not in html and "&lt;/script&gt;\\x1b[31m" in html  # shown, not sent
    page = render_fleet(build("2026-W48", sim_doc), generated_at="2026-12-01T00:00:00Z")
    check_gold("fleet.html", page)


def test_soonest_first_and_every_leak_ranked(sim_doc) -> None:
    from analyzer.categories import LEAK_CATEGORIES
    from reports.fleet import render_fleet

    view = build("2026-W48", sim_doc)
    html = render_fleet(view)
    assert html.index('id="soonest"') < html.index('id="cohorts"') < html.index('id="ranking"')
    hours = [r.hours_to_oom for r in view.soonest]
    assert hours and hours == sorted(hours)
    # every GPU (or GPU-less host) with a leak finding is ranked, whatever its category
    leaking = {(f.host, f.gpu) for f in sim_doc.findings if f.category in LEAK_CATEGORIES}
    ranked_hosts = {r.host for r in view.ranking}
    assert {h for h, _g in leaking} <= ranked_hosts
    ranked_cats = {c for r in view.ranking for c in r.categories}
    assert {f.category for f in sim_doc.findings if f.category in LEAK_CATEGORIES} <= ranked_cats
    # one rate per GPU: no GPU listed twice
    keys = [(r.host, r.gpu) for r in view.ranking]
    assert len(keys) == len(set(keys))


def test_cohort_cells_say_what_they_show(sim_doc) -> None:
    from reports.fleet import rows

    view = build("2026-W48", sim_doc)
    for r in rows(view):
        n = len(r.c.rates)
        if n == 0:
            assert r.label == ""
        elif n == 1:
            assert r.label == f"{r.c.rates[0]:,.1f} (1 GPU)"
        else:
            assert r.label.startswith(f"median {r.c.median_rate:,.1f}, min–max ")
            assert r.label.endswith(f"({n} GPUs)")
    many = copy.deepcopy(view.cohorts[0])
    many.rates, many.median_rate, many.max_rate = [10.0, 20.0, 90.0], 20.0, 90.0
    view.cohorts = [many]
    (row,) = rows(view)
    assert row.label == "median 20.0, min–max 10.0–90.0 (3 GPUs)"


def test_an_empty_week_says_so() -> None:
    from analyzer.findings import FindingsDocument, RunInfo
    from reports.fleet import render_fleet

    run = RunInfo(
        bucket="b", since=None, until=None, hosts=[], generated_at="", analyzer_version="0"
    )
    html = render_fleet(build("2026-W49", FindingsDocument(run=run)))
    assert "No data for this week" in html and "2026-11-30" in html
    assert 'id="cohorts"' not in html and 'id="ranking"' not in html  # no all-zero tables


def test_each_gpu_series_keeps_its_last_sample(sim_doc) -> None:
    """last_t (where a forecast counts from: tests/test_report.py) is the GPU's last sample,
    after its last chart point; a document written before last_t counts from that point."""
    import dataclasses
    import datetime as dt

    from analyzer.findings import FindingsDocument, GpuSeries

    hosts = {h.host: h for h in sim_doc.hosts}
    for s in sim_doc.series:
        assert s.last_t is not None and s.last_t > s.t[-1] and s.data_end == s.last_t
        if hosts[s.host].gpus == 1:
            last = dt.datetime.fromtimestamp(s.last_t, dt.UTC)
            assert hosts[s.host].last_ts == last.isoformat().replace("+00:00", "Z")
    old = [
        GpuSeries(**{k: x for k, x in dataclasses.asdict(s).items() if k != "last_t"})
        for s in sim_doc.series
    ]
    assert [s.data_end for s in old] == [s.t[-1] for s in sim_doc.series]
    assert FindingsDocument.from_dict(sim_doc.to_dict()).series == sim_doc.series


def _ranked(html: str) -> int:
    section = html.split('id="ranking"', 1)[1].split("</section>", 1)[0]
    return section.count('<td class="num">') // 2  # the rank and the GPU cells of each row


def test_top_caps_the_tables_and_counts_the_rest(sim_bucket, sim_doc, tmp_path) -> None:
    """The ranking stopped at 50 rows with no way to see the others: --top sets it, 0 is
    every row, and what is left out is counted with the way to list it."""
    import re

    from reports.fleet import render_fleet

    view = build("2026-W48", sim_doc)
    assert len(view.ranking) > 2
    every = render_fleet(view, top=sys.maxsize)
    assert _ranked(every) == len(view.ranking) and "not listed" not in every
    out = tmp_path / "fleet.html"
    args = [sys.executable, "-m", "leakreport", "fleet", str(sim_bucket[0])]
    args += ["--week", "2026-W48", "--out", str(out), "--top", "1", "-q"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert _ranked(html) == 1
    said = re.search(r"(\d+) more leaking GPUs not listed \(<code>--top 0</code>", html)
    assert said and int(said.group(1)) == len(view.ranking) - 1


def test_a_leaking_host_gone_silent_makes_fleet_exit_3(tmp_path) -> None:
    """It leaked in W48 and sent nothing in W49: the page said "no leak findings in either
    week" and fleet exited 0. Now the row says "no data this week", and the exit says it."""
    import datetime as dt

    from simulator.generate import simulate

    bucket = tmp_path / "b"
    w48, w49 = (dt.datetime(2026, 11, d, tzinfo=dt.UTC) for d in (23, 30))
    simulate("fast-image-processor-leak", bucket, hosts=1, hours=8, seed=5, start=w48)
    simulate("healthy-static", bucket, hosts=1, hours=8, seed=5, start=w49)
    out = tmp_path / "fleet.html"
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "fleet", str(bucket), "--week", "2026-W49",
         "--out", str(out), "-q"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert (
        "leakreport: incomplete: fast-image-processor-leak-00 had leak findings in 2026-W48 "
        "and no data in 2026-W49" in r.stderr
    )
    page = out.read_text()
    assert "no data this week" in page and "1 leaking host of last week silent" in page


def test_a_host_that_stopped_mid_week_is_named_with_where_the_data_ends(tmp_path) -> None:
    """One host leaks and stops reporting 4 h into the week, the other runs on: the page
    said nothing, and its OOM read as hours from a moment days past. Now the header says
    where the data ends and a gap line names the host that stopped."""
    import datetime as dt

    from analyzer.fleet import build as build_view
    from analyzer.packs import load_packs
    from analyzer.runner import analyze
    from reports.fleet import render_fleet
    from simulator.generate import simulate

    bucket = tmp_path / "b"
    w48 = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
    simulate("fast-image-processor-leak", bucket, hosts=1, hours=4, seed=5, start=w48)
    simulate("healthy-static", bucket, hosts=1, hours=30, seed=5, start=w48)
    page = render_fleet(build_view("2026-W48", analyze(bucket, load_packs())))
    assert "data to 2026-11-24 06:00:00 UTC" in page
    (gaps,) = re.findall(r'<details class="incomplete" id="gaps">.*?</details>', page, re.S)
    assert "fast-image-processor-leak-00: no GPU samples after 2026-11-23T03:59:50Z" in gaps
    assert "healthy-static" not in gaps
