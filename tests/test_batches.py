"""Host batches of a local analysis weigh what each host brings: a host whose days are
stored in the rollup tier counts less, so a fleet with a tier runs in fewer batches, with
the same findings."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from analyzer import batches, tier
from analyzer.bucket import Scope
from analyzer.fanout import analyze_local
from analyzer.packs import load_packs
from simulator.generate import simulate

START = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
NOW = dt.datetime(2026, 11, 26, 6, tzinfo=dt.UTC)  # three finished days and today's six hours


@pytest.mark.parametrize(
    ("weights", "size", "want"),
    [
        ({}, 2, [["a", "b"], ["c", "d"], ["e"]]),  # no weights: plain host counts
        ({"b": 0.25, "c": 0.25}, 2, [["a", "b", "c"], ["d", "e"]]),
        ({h: 0.125 for h in "abcde"}, 1, [list("abcde")]),
        ({"a": 3.0}, 2, [["a"], ["b", "c"], ["d", "e"]]),  # heavier than a batch: alone
        ({}, 1, [["a"], ["b"], ["c"], ["d"], ["e"]]),
        # the fewest batches, as even as they can be: not [a, b, c, d], [e]
        ({h: 0.5 for h in "abcde"}, 2, [["a", "b", "c"], ["d", "e"]]),
    ],
)
def test_split_keeps_order_and_makes_the_fewest_batches_within_the_weight(
    weights, size, want
) -> None:
    assert batches.split(list("abcde"), weights, size) == want


@pytest.mark.parametrize(
    ("raw", "stored", "want"),
    [
        (1, 0, 1.0),  # raw samples: a host, whatever the span up to a week
        (7, 0, 1.0),
        (14, 0, 2.0),  # two weeks of them: two hosts' worth
        (1, 6, (1 + 6 / 8) / 7),  # the fleet week with its finished days stored
        (0, 7, 1 / 8),
        (1, 29, (1 + 29 / 8) / 7),  # a month: by the week, not by its share of stored days
        (0, 0, 1.0),
    ],
)
def test_weight_counts_raw_host_days_by_the_week_and_stored_ones_by_an_eighth(
    raw: int, stored: int, want: float
) -> None:
    assert batches.weight(raw, stored) == pytest.approx(want)


@pytest.fixture(scope="module")
def bucket(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("batches") / "bucket"
    for scenario in ("fast-image-processor-leak", "cache-warmup"):
        simulate(scenario, out, hosts=2, hours=78, seed=3, start=START)
    return out


def _run(bucket: Path, batch_hosts: int) -> tuple[list[str], dict]:
    said: list[str] = []
    doc = analyze_local(
        bucket, load_packs(), now=NOW, batch_hosts=batch_hosts, progress=said.append
    ).to_dict()
    for r in doc["run"]["rules"]:
        r.pop("duration_s")
    return said, doc


def test_a_stored_tier_makes_fewer_batches_with_the_same_findings(bucket: Path) -> None:
    raw_said, raw = _run(bucket, 2)
    assert raw["findings"], "the scenarios must find something to compare"
    names = [h["host"] for h in raw["hosts"]]
    assert len(names) == 4
    assert batches.host_weights(str(bucket), Scope()) == {h: 1.0 for h in names}
    assert raw_said[0].startswith(
        "4 hosts: analysing them in 2 batches of 2 hosts (--batch-hosts 2: a batch holds at "
        "most 2 hosts' weeks of raw samples; a host-day stored in the rollup tier weighs an "
        "eighth of a raw one)"
    )

    tier.build(bucket, before=NOW.date())  # the three finished days of each host
    w = batches.host_weights(str(bucket), Scope())
    # of each host's four days, three are stored: (1 + 3/8) / 4
    assert w == pytest.approx({h: (1 + 3 / 8) / 4 for h in names})
    said, doc = _run(bucket, 2)
    assert not [s for s in said if "batches of" in s]  # 4 x 0.34 hosts: one batch
    assert "rollup tier: 12 host-days stored, 4 derived from raw samples" in said
    assert json.dumps(doc["findings"], sort_keys=True) == json.dumps(
        raw["findings"], sort_keys=True
    )
    # a batch still holds at most its weight: one host's worth, at most three of these
    said, doc = _run(bucket, 1)
    assert said[0].startswith("4 hosts: analysing them in 2 batches of 2 hosts (--batch-hosts 1:")
    assert "batch 1/2 done (2 hosts)" in said and "batch 2/2 done (2 hosts)" in said  # even
    assert json.dumps(doc["findings"], sort_keys=True) == json.dumps(
        raw["findings"], sort_keys=True
    )
