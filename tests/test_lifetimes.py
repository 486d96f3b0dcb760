"""Server lifetimes without a process table: from each log family, from memory resets."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analyzer import logevents, rollup
from analyzer.bucket import Scope, open_bucket
from analyzer.packs import load_packs
from analyzer.runner import analyze
from simulator.generate import simulate


def lifetimes(bucket: Path) -> list[tuple[int, int, str]]:
    con, _ = open_bucket(bucket, Scope())
    try:
        logevents.build(con)
        rollup.build(con)
        rows = con.execute(
            "SELECT gpu_index, pid, lifetime_source FROM gpu_lifetimes ORDER BY gpu_index, first_ts"
        ).fetchall()
    finally:
        con.close()
    return [(int(g), int(p), str(s)) for g, p, s in rows]


@pytest.fixture(scope="module")
def sawtooth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SGLang restarted every 90 min, as nvidia-smi CSV + server log (3.5 h: 3 lifetimes)."""
    b = tmp_path_factory.mktemp("saw") / "b"
    simulate("restart-masked-leak", b, hosts=1, hours=3.5, seed=5, shape="nvidia-smi-csv")
    return b


def test_sglang_log_start_lines_make_lifetimes(sawtooth: Path) -> None:
    got = lifetimes(sawtooth)
    assert [(g, p) for g, p, _ in got] == [(0, -1), (0, -2), (0, -3)]
    assert {s for _, _, s in got} == {"server log"}


def test_memory_resets_make_lifetimes_without_a_log(sawtooth: Path, tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(sawtooth, b)
    shutil.rmtree(b / "log_lines")  # nvidia-smi alone: the restarts show as memory resets
    got = lifetimes(b)
    assert len(got) == 3 and {s for _, _, s in got} == {"memory reset"}


def test_no_reset_no_log_is_one_lifetime(tmp_path: Path) -> None:
    b = tmp_path / "b"
    simulate("cache-warmup", b, hosts=1, hours=2, seed=5, shape="nvidia-smi-csv")
    shutil.rmtree(b / "log_lines")
    assert lifetimes(b) == [(0, -1, "memory reset")]


def test_native_keeps_process_table_lifetimes(tmp_path: Path) -> None:
    b = tmp_path / "b"
    simulate("restart-masked-leak", b, hosts=1, hours=3.5, seed=5)
    got = lifetimes(b)
    assert len(got) == 3 and all(p > 0 and s == "process table" for _, p, s in got)


def test_vllm_oom_restarts_are_a_sawtooth_not_a_load_spike(tmp_path: Path) -> None:
    """The hourly vision OOM story: vLLM's start-up lines and pid prefixes cut the
    lifetimes, so the OOMs are tied to the growth before them."""
    b = tmp_path / "b"
    simulate("vision-oom-hourly", b, hosts=1, hours=4, seed=5, shape="nvidia-smi-csv")
    got = lifetimes(b)
    assert len(got) >= 3 and {s for _, _, s in got} == {"server log"}
    doc = analyze(b, load_packs(), with_series=False)
    by_rule = {f.rule_id: f for f in doc.findings}
    assert by_rule["RM001"].evidence["lifetime_source"] == "server log"
    assert by_rule["OE001"].evidence["leak_before"] is True
    assert "the end of a leak" in by_rule["OE001"].summary
    assert by_rule["GM001"].evidence["lifetime_source"] == "server log"


def test_oom_with_no_device_samples_says_it_cannot_tell(tmp_path: Path) -> None:
    b = tmp_path / "b"
    simulate("vision-oom-hourly", b, hosts=1, hours=2, seed=5, shape="logs-only")
    doc = analyze(b, load_packs(), with_series=False)
    (oe,) = [f for f in doc.findings if f.rule_id == "OE001"]
    assert "cannot be told from a load spike" in oe.summary and oe.evidence["leak_before"] is False
    cov = {c["host"]: c for c in doc.coverage}[oe.host]
    assert cov["inputs"] == ["log_lines"] and not cov["complete"]
    lacked = {m["rule_id"]: m for m in cov["not_checked"]}
    assert "device memory" in lacked["GM001"]["lacked"][0]
    assert "nvidia-smi" in lacked["GM001"]["hint"]
    skipped = {r.rule_id: r for r in doc.run.rules if r.status == "skipped"}
    assert skipped["CC001"].hint and "leakcollect run" in skipped["CC001"].hint
