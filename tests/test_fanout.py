"""Per-host fan-out gives the same document as one connection."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from analyzer.bucket import Scope
from analyzer.fanout import analyze_fanout, list_hosts
from analyzer.packs import load_packs
from analyzer.runner import analyze

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _comparable(doc) -> dict:
    d = json.loads(doc.to_json())
    d["run"].pop("bucket")
    for r in d["run"]["rules"]:
        r.pop("duration_s")
    return d


def test_thread_fanout_is_identical(sim_bucket) -> None:
    packs = load_packs()
    local = analyze(sim_bucket[0], packs, now=NOW)
    with ThreadPoolExecutor(2) as ex:
        fanned = analyze_fanout(sim_bucket[0], packs, ex, now=NOW, hosts_per_task=3)
    assert _comparable(fanned) == _comparable(local)
    assert [f.rule_id for f in fanned.findings] == [f.rule_id for f in local.findings]


def test_list_hosts_respects_scope(sim_bucket) -> None:
    all_hosts = list_hosts(sim_bucket[0], Scope())
    assert "healthy-static-00" in all_hosts and len(all_hosts) == len(sim_bucket[1]["hosts"])
    assert list_hosts(sim_bucket[0], Scope(hosts=["rank-skew-00"])) == ["rank-skew-00"]
    assert list_hosts(sim_bucket[0], Scope(since=dt.date(2030, 1, 1))) == []


def test_dask_local_cluster_via_cli(sim_bucket) -> None:
    pytest.importorskip("distributed")
    args = [
        sys.executable,
        "-m",
        "analyzer.cli",
        "analyze",
        str(sim_bucket[0]),
        "--format",
        "json",
        "--fail-on",
        "never",
    ]
    local = subprocess.run([*args, "-q"], capture_output=True, text=True, timeout=300)
    dask = subprocess.run(
        [*args, "--executor", "dask", "--workers", "2"], capture_output=True, text=True, timeout=300
    )
    assert dask.returncode == 0, dask.stderr[-3000:]
    assert "local cluster, 2 workers" in dask.stderr
    a, b = json.loads(local.stdout), json.loads(dask.stdout)
    for d in (a, b):
        d["run"].pop("generated_at")
        for r in d["run"]["rules"]:
            r.pop("duration_s")
    assert a == b


def test_fanout_sees_hosts_that_stopped_reporting(tmp_path) -> None:
    from analyzer.sim.generate import simulate

    simulate("healthy-static", tmp_path, hosts=1, hours=1, seed=1)
    simulate("cache-warmup", tmp_path, hosts=1, hours=0.5, seed=1)
    packs = load_packs()
    local = analyze(tmp_path, packs, now=NOW)
    with ThreadPoolExecutor(2) as ex:
        fanned = analyze_fanout(tmp_path, packs, ex, now=NOW)
    assert local.run.gaps and fanned.run.gaps == local.run.gaps
