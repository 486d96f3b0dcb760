"""An OOM forecast of a host that stopped reporting says from when it counts, and that
its time has passed where it has; a host still reporting keeps its plain forecast. The
one-process analysis and the fan-out over host batches agree."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from analyzer.bucket import Scope
from analyzer.fanout import analyze_local
from analyzer.findings import FindingsDocument
from analyzer.packs import load_packs
from analyzer.runner import analyze
from analyzer.series import OLD_DATA, STOPPED
from simulator.generate import simulate

LEAK = "fast-image-processor-leak-00"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stale") / "bucket"
    simulate("fast-image-processor-leak", out, hosts=1, hours=3, seed=2)
    simulate("healthy-static", out, hosts=1, hours=9, seed=2)  # reports 6 h longer
    return out


def _forecasts(doc: FindingsDocument, host: str) -> list[str]:
    return [f.summary for f in doc.findings if f.rule_id == "OF001" and f.host == host]


def test_the_forecast_of_a_silent_host_says_it_is_past(fleet: Path) -> None:
    doc = analyze(fleet, load_packs())
    (summary,) = _forecasts(doc, LEAK)
    last = next(h.last_ts for h in doc.hosts if h.host == LEAK)
    end = max(h.last_ts for h in doc.hosts if h.last_ts)
    assert summary.startswith(f"GPU 0 on {LEAK} will run out of memory in about")
    assert summary.endswith(
        f" {LEAK} {STOPPED} {last}: this forecast counts from then; "
        f"that time had passed by {end}, where the fleet's data ends."
    )
    assert any(g.startswith(f"{LEAK}: no GPU samples after") for g in doc.run.gaps)
    # the host batches of a fan-out see the whole fleet only when merged: same words
    fan = analyze_local(fleet, load_packs(), scope=Scope(), batch_hosts=1)
    assert _forecasts(fan, LEAK) == [summary]


def test_a_host_still_reporting_keeps_its_plain_forecast(fleet: Path) -> None:
    alone = Scope(hosts=[LEAK])  # alone: nobody reports longer
    last = next(h.last_ts for h in analyze(fleet, load_packs(), scope=alone).hosts)
    assert last is not None
    now = dt.datetime.fromisoformat(last.replace("Z", "+00:00")) + dt.timedelta(minutes=2)
    doc = analyze(fleet, load_packs(), scope=alone, now=now)
    (summary,) = _forecasts(doc, LEAK)
    assert STOPPED not in summary and summary.endswith("used).")


def test_a_forecast_on_old_data_says_from_when_it_counts(fleet: Path) -> None:
    """Found by a user's pass: on a trace of last week, "will run out of memory in about
    36 min" read as from now."""
    alone = Scope(hosts=[LEAK])
    last = next(h.last_ts for h in analyze(fleet, load_packs(), scope=alone).hosts)
    assert last is not None
    now = dt.datetime.fromisoformat(last.replace("Z", "+00:00")) + dt.timedelta(days=3, hours=1)
    (summary,) = _forecasts(analyze(fleet, load_packs(), scope=alone, now=now), LEAK)
    assert summary.endswith(f"used). {OLD_DATA} {last}, 3 days before this analysis.")


def test_a_forecast_still_ahead_says_only_from_when(tmp_path: Path) -> None:
    simulate("fast-image-processor-leak", tmp_path, hosts=1, hours=3, seed=2)
    simulate("healthy-static", tmp_path, hosts=1, hours=3.5, seed=2)  # 30 min longer
    doc = analyze(tmp_path, load_packs())
    (f,) = [f for f in doc.findings if f.rule_id == "OF001" and f.host == LEAK]
    last = next(h.last_ts for h in doc.hosts if h.host == LEAK)
    assert f.end is not None and f.end > max(h.last_ts for h in doc.hosts if h.last_ts)
    assert f.summary.endswith(f" {LEAK} {STOPPED} {last}: this forecast counts from then.")
