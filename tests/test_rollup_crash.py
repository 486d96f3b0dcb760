"""`leakreport rollup` and `compact` killed (SIGKILL, as a machine that loses power or an
OOM killer would) at points through their run: every analysis between the kills gives the
findings of the raw samples, exit 0, and the next run finishes the work, leaving what an
uninterrupted run leaves. Bounded: four kills each."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_faults_analyzer import _analyze, _cli, _findings
from test_tier_week import BEFORE, START

from simulator.generate import simulate

ROLLUP = [sys.executable, "-m", "leakreport", "rollup", "--before", BEFORE.isoformat(), "-q"]


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> tuple[Path, list[tuple[str, str, str]]]:
    out = tmp_path_factory.mktemp("crash") / "bucket"
    for scenario in ("fast-image-processor-leak", "cache-warmup"):
        simulate(scenario, out, hosts=1, hours=40, seed=11, start=START)
    r, doc = _analyze(out)
    assert r.returncode == 0, r.stderr
    assert doc["findings"], "the comparison means little without findings"
    return out, _findings(doc)


def _stored(bucket: Path) -> set[str]:
    return {str(p.relative_to(bucket)) for p in bucket.glob("tier_*/**/*") if p.is_file()}


def test_a_rollup_killed_anywhere_leaves_a_bucket_that_analyses_the_same(raw, tmp_path) -> None:
    base, want = raw
    timed, whole = _timed(ROLLUP, base, tmp_path)
    shape = {str(Path(n).parent) for n in _stored(timed)}  # tables and folders of a whole tier
    killed: list[int] = []  # tier files there after each kill
    for frac in (0.35, 0.6, 0.8, 0.95):  # from the first derivations through the packing
        bucket = Path(shutil.copytree(base, tmp_path / f"at-{frac}"))
        if _kill_at(ROLLUP, bucket, whole * frac):
            killed.append(len(_stored(bucket)))
        r, doc = _analyze(bucket)
        assert r.returncode == 0, (frac, r.stderr)
        assert _findings(doc) == want, frac
        r = _cli("rollup", str(bucket), "--before", BEFORE.isoformat(), "-q")
        assert r.returncode == 0, (frac, r.stderr)
        assert not [n for n in _stored(bucket) if not n.endswith((".parquet", ".json"))]
        assert {str(Path(n).parent) for n in _stored(bucket)} == shape, frac
        r, doc = _analyze(bucket)
        assert r.returncode == 0 and _findings(doc) == want, (frac, r.stderr)
    # most kills came mid-run, with part of the tier written
    assert len(killed) >= 3 and len(set(killed)) >= 2, killed


def _timed(cmd: list[str], base: Path, tmp_path: Path) -> tuple[Path, float]:
    """A whole run of ``cmd`` on a copy of ``base``, and its time: the shorter of two runs
    (the first pays for a cold page cache), so the kills land within a run."""
    times = []
    for i in range(2):
        timed = Path(shutil.copytree(base, tmp_path / f"timed-{i}"))
        t0 = time.perf_counter()
        assert subprocess.run([*cmd, str(timed)], capture_output=True).returncode == 0
        times.append(time.perf_counter() - t0)
    return timed, min(times)


def _kill_at(cmd: list[str], bucket: Path, after_s: float) -> bool:
    """Run ``cmd`` on ``bucket`` and SIGKILL it after ``after_s``; whether it was killed."""
    p = subprocess.Popen([*cmd, str(bucket)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        p.wait(timeout=after_s)
        return False
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        p.wait()
        return True


def _files(bucket: Path) -> dict[str, int]:
    """Files of each folder of the bucket, hidden ones (temporary files) by name."""
    out: dict[str, int] = {}
    for p in bucket.rglob("*"):
        if p.is_file() and p.name != ".leakreport-writer.lock":
            key = str(
                p.relative_to(bucket) if p.name.startswith(".") else p.parent.relative_to(bucket)
            )
            out[key] = out.get(key, 0) + 1
    return out


def test_a_compact_killed_anywhere_leaves_a_bucket_that_analyses_the_same(raw, tmp_path) -> None:
    base, want = raw
    compact = [sys.executable, "-m", "leakreport", "compact", "--before", BEFORE.isoformat(), "-q"]
    timed, whole = _timed(compact, base, tmp_path)
    shape = _files(timed)  # one file per finished folder, the rest as they were
    killed = 0
    for frac in (0.3, 0.55, 0.75, 0.9):
        bucket = Path(shutil.copytree(base, tmp_path / f"at-{frac}"))
        killed += _kill_at(compact, bucket, whole * frac)
        r, doc = _analyze(bucket)
        assert r.returncode == 0, (frac, r.stderr)
        assert _findings(doc) == want, frac
        r = _cli("compact", str(bucket), "--before", BEFORE.isoformat(), "-q")
        assert r.returncode == 0, (frac, r.stderr)
        assert _files(bucket) == shape, frac
        r, doc = _analyze(bucket)
        assert r.returncode == 0 and _findings(doc) == want, (frac, r.stderr)
    assert killed >= 3, killed
