"""Device samples further apart than the default 15 s buckets, as `nvidia-smi -l 30` or a
Prometheus step of 60 s give them: a bucket without a sample ended every idle run, so a
day of such samples made no idle window at all, and a leak read "0 findings", exit 0.
The bucket width now follows the sampling interval (from the files' footers)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from analyzer import rollup
from analyzer.bucket import sampling_interval
from collector import filecheck, layout
from simulator.generate import simulate

SCENARIOS = ("fast-image-processor-leak", "cache-warmup")


@pytest.fixture(scope="module")
def dense(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sparse") / "dense"
    for k, name in enumerate(SCENARIOS):
        simulate(name, out, hosts=1, hours=8, seed=11 + k)
    return out


def _thinned(dense: Path, to: Path, every_s: int) -> Path:
    """The bucket with one device sample in ``every_s`` seconds kept (the files' own
    metadata kept, as a collector sampling that often would write them)."""
    shutil.copytree(dense, to)
    for f in (to / "gpu_samples").rglob("*.parquet"):
        t = pq.read_table(f)
        secs = pc.floor(pc.divide(pc.cast(pc.cast(t["ts"], pa.timestamp("s")), pa.int64()), 1.0))
        keep = pc.equal(
            pc.subtract(secs, pc.multiply(pc.floor(pc.divide(secs, every_s)), every_s)), 0
        )
        pq.write_table(t.filter(keep), f)
    return to


def _leaks(bucket: Path) -> tuple[set[str], dict]:
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "analyze", str(bucket), "--format", "json",
         "--fail-on", "never", "-q"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    return {f["host"] for f in doc["findings"] if f["category"] == "leak.gpu"}, doc


@pytest.mark.parametrize("every_s", [30, 60])
def test_a_leak_sampled_sparsely_is_found_and_a_cache_is_not_called_one(
    dense, tmp_path, every_s
) -> None:
    want, _ = _leaks(dense)
    assert want == {"fast-image-processor-leak-00"}  # at the simulator's 10 s
    leaks, doc = _leaks(_thinned(dense, tmp_path / f"every-{every_s}", every_s))
    assert leaks == want, [f["summary"] for f in doc["findings"]]


def test_the_sampling_interval_comes_from_the_footers(dense, tmp_path) -> None:
    thin = _thinned(dense, tmp_path / "thin", 30)
    for bucket, want in ((dense, 10.0), (thin, 30.0)):
        checks = [filecheck.check_file(e) for e in layout.list_entries(str(bucket), "gpu_samples")]
        assert sampling_interval(checks) == pytest.approx(want, rel=0.05)


@pytest.mark.parametrize(
    "span_h, interval_s, width",
    [
        (6, None, 15),  # unknown: as before
        (6, 10, 15),
        (6, 15, 15),  # exactly a bucket apart (a Prometheus step of 15 s)
        (6, 20, 20),
        (6, 25, 30),
        (6, 30, 30),
        (6, 30.2, 60),  # nvidia-smi -l 30 drifting: a 30 s bucket would go empty now and then
        (6, 60, 60),
        (48, 10, 60),
        (48, 60, 60),
        (48, 120, 120),
        (48, 86400, 3600),
    ],
)
def test_the_bucket_width_never_leaves_buckets_without_a_sample(span_h, interval_s, width) -> None:
    got = rollup.with_width({}, span_h * 3600.0, interval_s)["rollup"]["bucket_s"]
    assert got == width
    # a width asked for with --param stays
    asked = {"rollup": {"bucket_s": 15}}
    assert rollup.with_width(asked, span_h * 3600.0, interval_s) == asked
