"""`leakreport rollup` killed (SIGKILL, as a machine that loses power or an OOM killer
would) at points through its run: every analysis between the kills gives the findings of
the raw samples, exit 0, and the next rollup finishes the tier. Bounded: four kills."""

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
    timed = Path(shutil.copytree(base, tmp_path / "timed"))
    t0 = time.perf_counter()
    assert subprocess.run([*ROLLUP, str(timed)], capture_output=True).returncode == 0
    whole = time.perf_counter() - t0
    shape = {str(Path(n).parent) for n in _stored(timed)}  # tables and folders of a whole tier
    killed: list[int] = []  # tier files there after each kill
    for frac in (0.35, 0.6, 0.8, 0.95):  # from the first derivations through the packing
        bucket = Path(shutil.copytree(base, tmp_path / f"at-{frac}"))
        p = subprocess.Popen(
            [*ROLLUP, str(bucket)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            p.wait(timeout=whole * frac)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
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
