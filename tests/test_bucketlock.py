"""One `compact` or `rollup` at a time on a bucket folder (a cron run that overran into
the next): the second says who holds the bucket, does nothing, exits 3; a holder killed
with SIGKILL leaves no lock behind."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_faults_analyzer import _analyze, _cli, _findings
from test_tier_week import BEFORE, START

from analyzer.bucketlock import LOCK
from simulator.generate import simulate

HOLD = """
import sys, time
from analyzer.bucketlock import held
with held(sys.argv[1], "a test holder"):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lock") / "bucket"
    simulate("cache-warmup", out, hosts=1, hours=30, seed=5, start=START)
    return out


def _holder(bucket: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(bucket)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


@pytest.mark.parametrize("command", ["rollup", "compact"])
def test_a_second_writer_says_who_holds_the_bucket_and_does_nothing(raw, tmp_path, command) -> None:
    bucket = Path(shutil.copytree(raw, tmp_path / "bucket"))
    before = sorted(str(p.relative_to(bucket)) for p in bucket.rglob("*.parquet"))
    p = _holder(bucket)
    try:
        r = _cli(command, str(bucket), "--before", BEFORE.isoformat())
    finally:
        p.kill()
        p.wait()
    assert r.returncode == 3, r.stderr
    assert f"{bucket / LOCK}: held by a test holder (pid {p.pid}, since " in r.stderr
    assert "one compact or rollup at a time on a bucket. Nothing done" in r.stderr
    assert sorted(str(p.relative_to(bucket)) for p in bucket.rglob("*.parquet")) == before


def test_a_killed_holder_leaves_no_lock_and_the_lock_file_is_no_trace_data(raw, tmp_path) -> None:
    bucket = Path(shutil.copytree(raw, tmp_path / "bucket"))
    _r, want = _analyze(bucket)
    p = _holder(bucket)
    p.send_signal(signal.SIGKILL)
    p.wait()
    r = _cli("rollup", str(bucket), "--before", BEFORE.isoformat(), "-q")
    assert r.returncode == 0, r.stderr
    assert (bucket / LOCK).exists() and (bucket / LOCK).read_text() == ""  # held by no one
    assert list((bucket / "tier_gpu_info_week").rglob("*.parquet"))
    r, doc = _analyze(bucket)
    assert r.returncode == 0, r.stderr  # the lock file is not taken for a table
    assert _findings(doc) == _findings(want)
    assert _cli("compact", str(bucket), "--before", BEFORE.isoformat()).returncode == 0
