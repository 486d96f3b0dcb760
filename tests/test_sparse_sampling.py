"""Device samples further apart than the default 15 s buckets, as `nvidia-smi -l 30` or a
Prometheus step of 60 s give them: a bucket without a sample ended every idle run, so a
day of such samples made no idle window at all, and a leak read "0 findings", exit 0.
The bucket width now follows the sampling interval (from the files' footers)."""

from __future__ import annotations

import datetime as dt
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


def _secs(t: pa.Table) -> pa.ChunkedArray:
    return pc.cast(pc.cast(t["ts"], pa.timestamp("s")), pa.int64())


def _thinned(
    dense: Path, to: Path, every_s: int, *, hosts: str = "", per_sample: bool = False
) -> Path:
    """The bucket with one device sample in ``every_s`` seconds kept (the files' own
    metadata kept, as a collector sampling that often would write them), for the hosts
    whose folder names start with ``hosts``; ``per_sample``: a file per sample, as a
    collector that takes one sample a run (--interval 60 from cron) writes them."""
    shutil.copytree(dense, to)
    for f in (to / "gpu_samples").glob(f"*/host={hosts}*/*.parquet"):
        t = pq.read_table(f)
        secs = _secs(t)
        whole = pc.multiply(pc.floor(pc.divide(secs, every_s)), every_s)
        t = t.filter(pc.equal(pc.subtract(secs, whole), 0))
        if not per_sample:
            pq.write_table(t, f)
            continue
        f.unlink()
        for v in sorted(set(_secs(t).to_pylist())):
            pq.write_table(t.filter(pc.equal(_secs(t), v)), f.parent / f"gpu_samples-{v}.parquet")
    return to


def _leaks(bucket: Path) -> tuple[set[str], dict]:
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "analyze", str(bucket), "--format", "json",
         "--fail-on", "never", "-q"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert r.returncode in (0, 3), r.stderr
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
    assert not doc["run"]["incomplete"], doc["run"]["incomplete"]


def test_a_sparse_host_is_found_however_its_files_come(dense, tmp_path) -> None:
    """Found in review: a file per sample gave no estimate at all, a sparse host among
    denser ones took their median, and one file wholly in the future dropped the
    estimate: each left the leak "clean", exit 0."""
    from collector.writer import BucketWriter

    want, _ = _leaks(dense)
    leak = "fast-image-processor-leak"
    cases = {
        "per-sample": _thinned(dense, tmp_path / "a", 60, per_sample=True),
        "mixed": _thinned(dense, tmp_path / "b", 60, hosts=leak),
        "future": _thinned(dense, tmp_path / "c", 60),
    }
    ahead = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    rows = [{"ts": ahead + dt.timedelta(seconds=10 * k), "host": "skewed-01", "gpu_index": 0,
             "memory_used_bytes": 1 << 30, "memory_total_bytes": 80 << 30} for k in range(3)]  # fmt: skip
    BucketWriter(cases["future"], "skewed-01").write("gpu_samples", rows)
    for name, bucket in cases.items():
        leaks, doc = _leaks(bucket)
        assert leaks == want, (name, [f["summary"] for f in doc["findings"]])
        assert not doc["run"]["incomplete"], (name, doc["run"]["incomplete"])


def test_a_host_sampled_sparser_than_the_widest_bucket_is_named(dense, tmp_path) -> None:
    thin = _thinned(dense, tmp_path / "thin", 600, hosts="fast-image-processor-leak")
    _found, doc = _leaks(thin)
    assert doc["run"]["incomplete"] == [
        "fast-image-processor-leak-00: device samples about 600 s apart, wider than this "
        "analysis's 300 s buckets: its idle windows cannot be told (give --param "
        "rollup.bucket_s=N, N at least the interval, with --host fast-image-processor-leak-00)"
    ]


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
        (6, 30.2, 30),  # nvidia-smi -l 30 drifting: a bucket empty once in 150 samples
        (6, 31, 60),
        (6, 60, 60),
        (48, 10, 60),
        (48, 60.05, 60),  # the stored tier's width still serves
        (48, 120, 120),
        (48, 86400, 300),  # the widest; such a host is named (test below)
    ],
)
def test_the_bucket_width_never_leaves_buckets_without_a_sample(span_h, interval_s, width) -> None:
    got = rollup.with_width({}, span_h * 3600.0, interval_s)["rollup"]["bucket_s"]
    assert got == width
    # a width asked for with --param stays
    asked = {"rollup": {"bucket_s": 15}}
    assert rollup.with_width(asked, span_h * 3600.0, interval_s) == asked
