"""The scenario suite's targets, as `make eval` reports them (as in make eval)."""

from __future__ import annotations

import copy

from analyzer.evaluate import TARGET_SHARE, markdown, run_eval, score


def test_suite_meets_its_targets(tmp_path) -> None:
    res = run_eval(
        tmp_path,
        hosts_per_scenario=1,
        hours=6,
        seed=11,
        step_min=10,
        shapes=("native", "nvidia-smi-csv"),
    )
    assert res.misses == 0, res.mismatches
    assert res.leak_false_positives == 0, res.mismatches
    assert res.detections and all(
        d.share is not None and d.share <= TARGET_SHARE for d in res.detections
    )
    for shape in ("native", "nvidia-smi-csv"):
        assert {d.scenario for d in res.shapes[shape].detections} >= {
            "fast-image-processor-leak",
            "kv-pool-leak",
            "rank-skew",
            "vision-oom-hourly",
            "nightly-restart",
        }
        tp, total = res.shapes[shape].leak_found
        assert total and tp == total
    rows = {r.scenario: r for r in res.shapes["nvidia-smi-csv"].scenarios}
    assert rows["probe-cache-growth"].verdict == "undecidable"
    assert "allocator_samples" in rows["probe-cache-growth"].undecidable
    assert rows["independent-servers"].verdict == "right"
    md = markdown(res)
    assert "## nvidia-smi-csv" in md and "| leak.gpu |" in md and "Targets met: True" in md


def test_score_counts_misses_and_false_positives(sim_bucket, sim_doc) -> None:
    _, labels = sim_bucket
    confusion, mismatches = score(sim_doc, labels)
    assert not mismatches
    broken = copy.deepcopy(labels)
    broken["hosts"]["healthy-static-00"]["expect"]["gpu:0"] = ["leak.gpu"]  # a miss
    broken["hosts"]["fast-image-processor-leak-00"]["expect"]["gpu:0"].remove(
        "oom.forecast"
    )  # now an FP
    confusion, mismatches = score(sim_doc, broken)
    assert confusion["leak.gpu"]["fn"] == 1 and confusion["oom.forecast"]["fp"] == 1
    assert len(mismatches) == 2
