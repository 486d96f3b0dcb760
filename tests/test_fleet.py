"""The weekly fleet report: cohorts, ranking, week over week."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from analyzer.fleet import build, compare, previous_week, week_range


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
    assert view.ranking[0].leak_mib_per_h >= view.ranking[1].leak_mib_per_h
    assert view.affected_hosts == len(
        {f.host for f in sim_doc.findings if f.category.startswith(("leak.", "known_bug."))}
    )


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
    assert ("kv-pool-leak-00", "leak.kv_pool") not in status
    assert status[("host-rss-leak-00", "leak.host_rss")] == "new"
    assert status[("fast-image-processor-leak-00", "leak.gpu")] == "persisting"
    assert all(c.status == "new" for c in compare(None, cur))


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


def test_cohort_trend_against_last_week(sim_doc) -> None:
    prev = copy.deepcopy(sim_doc)
    prev.findings = [f for f in prev.findings if f.host != "latency-pressure-00"]
    view = build("2026-W48", sim_doc, prev)
    c = next(c for c in view.cohorts if c.model == "Qwen/Qwen3-VL-8B-Instruct")
    assert (c.previous_share, c.share_affected) == (0.0, 1.0)


def test_fleet_gold_and_hostile_text(sim_doc) -> None:
    import os
    from pathlib import Path

    from reports.fleet import render_fleet

    hostile = copy.deepcopy(sim_doc)
    for h in hostile.hosts:
        h.model = "<script>alert(1)</script>"
    html = render_fleet(build("2026-W48", hostile))
    assert "<script" not in html and "&lt;script&gt;" in html
    gold = Path(__file__).resolve().parent / "gold" / "fleet.html"
    page = render_fleet(build("2026-W48", sim_doc), generated_at="2026-12-01T00:00:00Z")
    if os.environ.get("LEAKREPORT_UPDATE_GOLD"):
        gold.write_text(page, encoding="utf-8")
    assert page == gold.read_text(encoding="utf-8"), (
        "fleet report differs from its gold (run `make gold`)"
    )
