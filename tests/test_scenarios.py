"""The simulated fleet is our labelled test ground: findings must match labels."""

from __future__ import annotations

import json

from analyzer.categories import LEAK_CATEGORIES
from analyzer.packs import load_packs
from analyzer.runner import analyze
from simulator.generate import simulate


def _found(doc) -> dict[str, dict[str, set[str]]]:
    out: dict[str, dict[str, set[str]]] = {}
    for f in doc.findings:
        key = "host" if f.gpu is None else f"gpu:{f.gpu}"
        out.setdefault(f.host, {}).setdefault(key, set()).add(f.category)
    return out


def test_findings_match_labels(sim_bucket, sim_doc) -> None:
    _, labels = sim_bucket
    found = _found(sim_doc)
    assert set(found) <= set(labels["hosts"]), "finding on a host the simulator did not make"
    for host, lab in labels["hosts"].items():
        allow = set(lab["allow"])
        for key, expected in lab["expect"].items():
            got = found.get(host, {}).get(key, set())
            missing = set(expected) - got
            extra = got - set(expected) - allow
            assert not missing, f"{host} {key}: missed {missing}"
            assert not extra, f"{host} {key}: unexpected {extra}"
        for key in found.get(host, {}):
            assert key in lab["expect"], f"{host}: finding on unexpected {key}"


def test_negative_scenarios_have_no_leak_findings(sim_bucket, sim_doc) -> None:
    _, labels = sim_bucket
    leaky_hosts = {f.host for f in sim_doc.findings if f.category in LEAK_CATEGORIES}
    negatives = {h for h, lab in labels["hosts"].items() if not any(lab["expect"].values())}
    assert negatives, "the suite needs negative scenarios"
    assert not leaky_hosts & negatives


def test_leak_host_verdict_numbers(sim_doc) -> None:
    host = "fast-image-processor-leak-00"
    mine = [f for f in sim_doc.findings if f.host == host]
    leak = next(f for f in mine if f.rule_id == "GM001")
    # 0.77 MiB per request at ~1 req/s busy: roughly 1.5-3 GiB/h
    assert 1000 <= leak.evidence["rate_mib_per_h"] <= 3500
    oom = next(f for f in mine if f.rule_id == "OF001")
    assert oom.severity == "critical" and oom.evidence["hours_to_oom"] < 4
    kb = next(f for f in mine if f.rule_id == "KB001")
    assert "--disable-fast-image-processor" in kb.remediation
    assert kb.severity == "critical"


def test_every_rule_ran(sim_doc) -> None:
    assert {r.status for r in sim_doc.run.rules} <= {"fired", "clean"}
    assert sim_doc.series and sim_doc.hosts and sim_doc.events


def test_simulation_is_deterministic(tmp_path) -> None:
    docs = []
    for k in range(2):
        b = tmp_path / f"b{k}"
        simulate("fast-image-processor-leak", b, hosts=1, hours=2, seed=3)
        d = analyze(b, load_packs()).to_dict()
        d["run"].pop("generated_at")
        d["run"].pop("bucket")
        for r in d["run"]["rules"]:
            r.pop("duration_s")
        docs.append(json.dumps(d, sort_keys=True))
    assert docs[0] == docs[1]


def test_different_seed_changes_the_data(tmp_path) -> None:
    import pyarrow.parquet as pq

    used = []
    for seed in (1, 2):
        b = tmp_path / f"s{seed}"
        simulate("cache-warmup", b, hosts=1, hours=1, seed=seed)
        files = sorted(b.rglob("gpu_samples-*.parquet"))
        used.append(
            [v for f in files for v in pq.read_table(f).column("memory_used_bytes").to_pylist()]
        )
    assert len(used[0]) == len(used[1]) and used[0] != used[1]


LONG_SPAN = ("fast-image-processor-leak", "nightly-restart", "restart-masked-leak")


def test_a_span_past_a_week_finds_what_its_labels_say(tmp_path) -> None:
    """Nine days of leaks whose servers rest only minutes at a time: a long span must keep
    buckets fine enough to see those rests (five-minute buckets missed every one of these
    leaks), and the findings still match the labels."""
    for scenario in LONG_SPAN:
        simulate(
            scenario,
            tmp_path / "bucket",
            hosts=1,
            hours=216,
            seed=11,
            labels_path=tmp_path / f"{scenario}.json",
        )
    doc = analyze(tmp_path / "bucket", load_packs())
    found = _found(doc)
    for scenario in LONG_SPAN:
        labels = json.loads((tmp_path / f"{scenario}.json").read_text())
        for host, lab in labels["hosts"].items():
            assert "leak.gpu" in lab["expect"].get("gpu:0", []), f"{host}: a leak scenario"
            for key, expected in lab["expect"].items():
                got = found.get(host, {}).get(key, set())
                assert not set(expected) - got, f"{host} {key}: missed {set(expected) - got}"
                assert not got - set(expected) - set(lab["allow"]), f"{host} {key}: unexpected"
