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
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from analyzer import rollup
from analyzer.sampling import host_intervals
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


def _leaks(bucket: Path, *extra: str) -> tuple[set[str], dict]:
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "analyze", str(bucket), "--format", "json",
         "--fail-on", "never", "-q", *extra],
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
        # the host whose every sample lies in the future is named, nothing else
        said = [r.split(" rows ")[0] for r in doc["run"]["incomplete"]]
        assert said == (["host skewed-01: all 3 of its gpu_samples"] if name == "future" else [])


def test_a_host_sampled_sparser_than_the_widest_bucket_is_named(dense, tmp_path) -> None:
    thin = _thinned(dense, tmp_path / "thin", 600, hosts="fast-image-processor-leak")
    _found, doc = _leaks(thin)
    assert doc["run"]["incomplete"] == [
        "host fast-image-processor-leak-00: device samples about 600 s apart, wider than this "
        "analysis's 300 s buckets: its idle windows cannot be told (give --param "
        "rollup.bucket_s=N, N at least the interval, with --host fast-image-processor-leak-00)"
    ]


def test_the_sampling_interval_comes_from_the_footers(dense, tmp_path) -> None:
    thin = _thinned(dense, tmp_path / "thin", 30)
    for bucket, want in ((dense, 10.0), (thin, 30.0)):
        checks = [filecheck.check_file(e) for e in layout.list_entries(str(bucket), "gpu_samples")]
        assert max(host_intervals(checks).values()) == pytest.approx(want, rel=0.05)


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


def _rules(doc: dict, host: str) -> list[tuple[str, str]]:
    return sorted((f["rule_id"], f["summary"]) for f in doc["findings"] if f["host"] == host)


def test_a_sparse_host_does_not_coarsen_the_others(dense, tmp_path) -> None:
    """Found in the second review: one width for the whole scope, the sparsest host's,
    made a 10 s host's buckets 120 s wide, and its idle windows (and findings) went. Each
    host now gets the width its own samples need, in batches of one width, and a batch of
    one host gives what one batch of all gives."""
    mixed = _thinned(dense, tmp_path / "m", 120, hosts="fast-image-processor-leak")
    _l, alone = _leaks(dense)
    _l, doc = _leaks(mixed)
    cache = "cache-warmup-00"
    assert _rules(doc, cache) == _rules(alone, cache) and _rules(doc, cache)
    _l, one_by_one = _leaks(mixed, "--batch-hosts", "1")
    assert one_by_one["findings"] == doc["findings"]


def test_footer_bounds_widened_by_gaps_are_read_from_the_data(dense, tmp_path) -> None:
    """The footers' estimate is an upper bound: a compacted day with a late stray sample,
    or files without gpu_index statistics, made a 30 s host look 90 s apart (or unknown),
    and its leak read clean. Such hosts' intervals are read from their samples."""
    from collector.writer import BucketWriter

    want, _ = _leaks(dense)
    host = "fast-image-processor-leak-00"
    gapped = _thinned(dense, tmp_path / "g", 30)
    (day,) = {p.name for p in (gapped / "gpu_samples").iterdir()}
    late = dt.datetime.fromisoformat(day.removeprefix("date=") + "T23:50:00+00:00")
    row = {"ts": late, "host": host, "gpu_index": 0, "memory_used_bytes": 1 << 30,
           "memory_total_bytes": 80 << 30, "utilization_gpu_pct": 0.0}  # fmt: skip
    BucketWriter(gapped, host).write("gpu_samples", [row])
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "compact", str(gapped), "--before", "2100-01-01"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert len(list((gapped / "gpu_samples").glob(f"*/host={host}/*.parquet"))) == 1
    nostats = _thinned(dense, tmp_path / "n", 30)
    for f in (nostats / "gpu_samples").rglob("*.parquet"):
        t = pq.read_table(f)
        keep = [c for c in t.column_names if c != "gpu_index"]
        pq.write_table(t, f, write_statistics=keep)
    for name, bucket in (("compacted", gapped), ("no statistics", nostats)):
        leaks, doc = _leaks(bucket)
        assert leaks == want, (name, [f["summary"] for f in doc["findings"]])
        assert not doc["run"]["incomplete"], (name, doc["run"]["incomplete"])


def _hours_edited(dense: Path, to: Path, keep: Callable[[int], bool]) -> Path:
    """The bucket with the leak host's device samples kept where ``keep`` (of the
    sample's epoch second) is true."""
    shutil.copytree(dense, to)
    for f in (to / "gpu_samples").glob("*/host=fast-image-processor-leak*/*.parquet"):
        t = pq.read_table(f)
        mask = pa.array([keep(v) for v in _secs(t).to_pylist()])
        pq.write_table(t.filter(mask), f)
    return to


def _hour(s: int) -> int:
    return s % 86400 // 3600


def test_hours_sampled_sparser_than_the_rest_of_a_host_are_named(dense, tmp_path) -> None:
    """A host's width follows its densest samples: hours of it sampled 60 s apart (an
    nvidia-smi log beside the collector, an interval changed) had 15 s buckets, no idle
    window, and their leak or lifetimes went unseen, exit 0. Such hours are now named,
    with the width that serves them, and the run is incomplete."""
    host = "fast-image-processor-leak-00"
    mixed = _hours_edited(dense, tmp_path / "m", lambda s: _hour(s) < 4 or s % 60 == 0)
    _l, doc = _leaks(mixed)
    (day,) = {p.name.removeprefix("date=") for p in (mixed / "gpu_samples").iterdir()}
    assert doc["run"]["incomplete"] == [
        f"host {host}: device samples about 60 s apart for 4 h ({day} 04:00 to 08:00 UTC), "
        "further apart than this analysis's 15 s buckets: no idle window could be told in "
        "those hours, so a leak there would read clean (analyse them with "
        f"--host {host} --param rollup.bucket_s=60)"
    ]
    _l, served = _leaks(mixed, "--host", host, "--param", "rollup.bucket_s=60")
    assert not served["run"]["incomplete"], served["run"]["incomplete"]
    assert "GM001" in {rule for rule, _ in _rules(served, host)}
    twenty = _hours_edited(dense, tmp_path / "t", lambda s: _hour(s) not in (5, 6) or s % 20 == 0)
    _l, doc = _leaks(twenty)
    (line,) = doc["run"]["incomplete"]
    assert "about 20 s apart for 2 h" in line and "05:00 to 07:00" in line, line
    assert line.endswith("rollup.bucket_s=20)"), line


def test_gaps_that_leave_the_idle_runs_whole_are_not_named(dense, tmp_path) -> None:
    """False positives: an outage of the collector is one long step, and a sample missed
    now and then (every third minute's last) leaves most steps whole."""
    outage = _hours_edited(dense, tmp_path / "o", lambda s: _hour(s) not in (3, 4))
    missed = _hours_edited(dense, tmp_path / "x", lambda s: s % 180 != 170)
    for name, bucket in (("outage", outage), ("missed", missed)):
        _l, doc = _leaks(bucket)
        assert not doc["run"]["incomplete"], (name, doc["run"]["incomplete"])
        assert "GM001" in {r for r, _ in _rules(doc, "fast-image-processor-leak-00")}, name
