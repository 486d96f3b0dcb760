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
    # Known shortfalls of the early-detection target, said in eval.md as missed targets:
    # - vision-oom-hourly fills the GPU in about 45 minutes, so 20 % is 9 minutes, less
    #   than one 10-minute prefix step; it is flagged at 30 minutes, before the first OOM.
    # - with nvidia-smi CSV + logs the SGLang version is unknown, so the known bug needs
    #   three idle windows of growth before it is named (30 minutes, share 0.29).
    known_late = {
        ("native", "vision-oom-hourly"),
        ("nvidia-smi-csv", "vision-oom-hourly"),
        ("nvidia-smi-csv", "fast-image-processor-leak"),
    }
    late = {
        (d.shape, d.scenario) for d in res.detections if d.share is None or d.share > TARGET_SHARE
    }
    assert res.detections and late <= known_late, late - known_late
    assert all(d.share is not None and d.share < 1 for d in res.detections)  # before the OOM
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
    assert "## nvidia-smi-csv" in md and "| leak.gpu |" in md and "Targets met: " in md


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


def test_the_mismatch_list_is_in_one_order_whatever_the_hash_seed(
    sim_bucket, sim_doc, tmp_path
) -> None:
    """Misses were listed in set order, which changes with Python's string hash seed:
    eval.md differed between two identical runs."""
    import json
    import os
    import subprocess
    import sys

    _, labels = sim_bucket
    broken = copy.deepcopy(labels)
    cats = ["leak.gpu", "leak.kv_pool", "leak.host_rss", "cache.growth", "oom.event"]
    broken["hosts"]["healthy-static-00"]["expect"]["gpu:0"] = cats  # five misses
    (tmp_path / "labels.json").write_text(json.dumps(broken))
    (tmp_path / "doc.json").write_text(sim_doc.to_json())
    code = (
        "import json, sys; from analyzer.evaluate import score; "
        "from analyzer.findings import FindingsDocument as D; "
        "d = D.from_json(open(sys.argv[1]).read()); l = json.load(open(sys.argv[2])); "
        "print(json.dumps(score(d, l)[1]))"
    )
    got = set()
    for seed in ("1", "2", "3"):
        r = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "doc.json"), str(tmp_path / "labels.json")],
            capture_output=True, text=True, timeout=120, check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )  # fmt: skip
        got.add(r.stdout)
    assert len(got) == 1 and len(json.loads(got.pop())) == 5
