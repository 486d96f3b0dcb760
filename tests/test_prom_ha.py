"""`import prometheus` from an HA pair, and its overlap guard on an S3 bucket.

A real Prometheus (127.0.0.1, a TSDB backfilled with promtool) holds every series of
a small simulated fleet twice, as two replicas scraping the same targets would: with
a ``replica`` label, each replica missing a different hour. The import must store one
sample per series and step, fill each replica's gap from the other, and give the
analyzer the verdicts the native tables give. The S3 part uses moto's server.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from motoserver import MOTO, s3_environ
from test_prometheus import _analyze, _import, _rows, _verdicts

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import promfleet  # noqa: E402

pytestmark = pytest.mark.skipif(
    not promfleet.have_prometheus(),
    reason="prometheus and promtool are not installed (Debian package `prometheus`)",
)
HOURS = 6
START, END = "2026-11-23T00:00:00Z", "2026-11-23T05:59:50Z"
T0 = 1795392000.0  # START


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from simulator.generate import DEFAULT_START, HostPlan, generate_host
    from simulator.scenarios import SCENARIOS

    root = tmp_path_factory.mktemp("prom-ha")
    native = root / "native"
    for k, name in enumerate(("latency-pressure", "cache-warmup")):
        plan = HostPlan(f"{name}-00", SCENARIOS[name], 7300 + k, 4000 + 100 * k)
        generate_host(plan, HOURS, DEFAULT_START, native)
    ref = root / "ref"
    for t in ("gpu_samples", "metric_samples"):
        shutil.copytree(native / t, ref / t)
    gaps = {"a": (T0 + 3600, T0 + 7200), "b": (T0 + 4 * 3600, T0 + 5 * 3600)}
    with open(root / "ha.om", "w", encoding="utf-8") as f:
        promfleet.openmetrics(native, f, {"cache-warmup-00"}, replicas=gaps)
    promfleet.backfill(root / "ha.om", root / "tsdb")
    with promfleet.PromServer(root / "tsdb", root) as server:
        yield {"root": root, "ref": ref, "url": server.url}


def test_replicas_are_read_once_and_fill_each_others_gaps(ha: dict[str, Any]) -> None:
    bucket = ha["root"] / "dedup"
    r = _import(ha["url"], bucket, start=START, end=END)
    assert r.returncode == 0, r.stderr
    for table in ("gpu_samples", "metric_samples"):
        got = _rows(bucket, table)
        want = _rows(ha["ref"], table)
        keys = [(x["host"], x.get("gpu_index"), x.get("name"), x["ts"]) for x in got]
        assert len(keys) == len(set(keys)), f"{table}: doubled samples"
        assert not any("replica" in dict(x.get("labels") or []) for x in got)
        if table == "gpu_samples":  # one row per native sample, gaps filled
            assert sorted(keys) == sorted((x["host"], x["gpu_index"], None, x["ts"]) for x in want)
            assert all(x["pod"] is None or "replica" not in x["pod"] for x in got)
        else:  # every scraped sample (steps between scrapes repeat the last value)
            assert {(x["host"], x["name"], x["ts"]) for x in want} <= {
                (h, n, t) for h, _, n, t in keys
            }
    assert _verdicts(_analyze(bucket)) == _verdicts(_analyze(ha["ref"]))


def test_without_dedup_the_replicas_would_double(ha: dict[str, Any]) -> None:
    # the control: reading the replicas as separate series doubles the engine samples
    one, two = ha["root"] / "one", ha["root"] / "two"
    end = "2026-11-23T00:30:00Z"
    assert _import(ha["url"], one, start=START, end=end).returncode == 0
    r = _import(ha["url"], two, "--replica-label", "", start=START, end=end)
    assert r.returncode == 0, r.stderr
    n1, n2 = len(_rows(one, "metric_samples")), len(_rows(two, "metric_samples"))
    assert n2 == 2 * n1 > 0
    bad = _import(ha["url"], two, "--replica-label", "a-b", start=START, end=end)
    assert bad.returncode == 2 and "--replica-label 'a-b'" in bad.stderr


@pytest.fixture
def s3_env() -> Iterator[dict[str, str]]:
    if MOTO is None:
        pytest.skip("moto[server] missing")
    with s3_environ("leaktraces") as env:  # the CLI child inherits them
        yield env


def test_overlap_guard_on_an_s3_bucket(ha: dict[str, Any], s3_env: dict[str, str]) -> None:
    b = "s3://leaktraces/prom"
    first = _import(ha["url"], b, start=START, end="2026-11-23T01:00:00Z")
    assert first.returncode == 0, first.stderr
    again = _import(ha["url"], b, start="2026-11-23T00:30:00Z", end="2026-11-23T02:00:00Z")
    assert again.returncode == 2, again.stderr
    assert again.stderr.count("\n") == 1 and "already holds" in again.stderr
    later = _import(ha["url"], b, start="2026-11-23T01:00:10Z", end="2026-11-23T02:00:00Z")
    assert later.returncode == 0, later.stderr
    # another host of the same window is welcome
    other = _import(ha["url"], "s3://leaktraces/other", "--host", "cache-warmup-00")
    assert other.returncode == 0, other.stderr
    again = _import(ha["url"], "s3://leaktraces/other", "--host", "latency-pressure-00")
    assert again.returncode == 0, again.stderr
