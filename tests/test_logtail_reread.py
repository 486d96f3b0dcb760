"""An unchanged log read again gives 0 new rows: on every run, after every kind of
rotation, and through leakcollect itself (duplicates exactly 0, not "whatever the
readers' de-duplication hides")."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from collector import exitcodes
from collector.logcursor import load_cursors, save_cursors
from collector.logtail import tail

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
BATCH = "[2025-11-11 04:28:30] Decode batch, #running-req: {n}, #token: 7171, token usage: 0.04, gen throughput (token/s): 86.14, #queue-req: 0\n"


def _append(path: Path, first: int, count: int) -> None:
    with path.open("a", encoding="utf-8") as f:
        for n in range(first, first + count):
            f.write(BATCH.format(n=n))


def _numbers(rows: list[dict]) -> list[int]:
    return [int(r["text"].split("#running-req: ")[1].split(",")[0]) for r in rows]


def _run(log: Path, state: Path) -> list[int]:
    """One collector run's worth of tailing, with the cursor saved and loaded from disk."""
    cursors = load_cursors(state)
    res = tail(str(log), cursors.get(str(log)), NOW, "h")
    assert res.error is None, res.error
    cursors[str(log)] = res.cursor
    save_cursors(state, cursors)
    return _numbers(res.rows)


def test_unchanged_log_gives_nothing_on_every_run(tmp_path) -> None:
    log, state = tmp_path / "s.log", tmp_path / "cursors.json"
    _append(log, 0, 30)
    assert _run(log, state) == list(range(30))
    for _ in range(5):
        assert _run(log, state) == []
    _append(log, 30, 2)
    assert _run(log, state) == [30, 31]
    assert _run(log, state) == []


def test_unchanged_after_each_rotation_gives_nothing(tmp_path) -> None:
    log, state = tmp_path / "s.log", tmp_path / "cursors.json"
    _append(log, 0, 5)
    assert _run(log, state) == list(range(5))
    # rename rotation with lines written to the old file after the last run
    _append(log, 5, 2)
    os.rename(log, tmp_path / "s.log.1")
    _append(log, 7, 3)
    assert _run(log, state) == list(range(5, 10))
    assert _run(log, state) == [] and _run(log, state) == []
    # copytruncate
    _append(log, 10, 2)
    (tmp_path / "s.log.1").rename(tmp_path / "s.log.2")
    (tmp_path / "s.log.1").write_bytes(log.read_bytes())
    with log.open("r+") as f:
        f.truncate(0)
    _append(log, 12, 1)
    assert _run(log, state) == [10, 11, 12]
    assert _run(log, state) == [] and _run(log, state) == []
    # deleted and written anew
    log.unlink()
    _append(log, 13, 2)
    assert _run(log, state) == [13, 14]
    assert _run(log, state) == []


def _leakcollect(tmp_path: Path, log: Path) -> subprocess.CompletedProcess[str]:
    args = ["run", "--once", "--no-gpu", "--bucket", str(tmp_path / "b"), "--log", str(log)]
    args += ["--state-dir", str(tmp_path / "st")]
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _log_rows(bucket: Path) -> list[dict]:
    rows: list[dict] = []
    for f in sorted(bucket.rglob("*.parquet")):
        if "log_lines" in f.parts:
            rows += pq.read_table(f).to_pylist()
    return rows


def test_leakcollect_runs_over_an_unchanged_log_write_no_duplicates(tmp_path) -> None:
    log = tmp_path / "s.log"
    _append(log, 0, 40)
    for _ in range(3):
        r = _leakcollect(tmp_path, log)
        assert r.returncode == exitcodes.OK, r.stderr
    rows = _log_rows(tmp_path / "b")
    keys = [(r["inode"], r["offset"]) for r in rows]
    assert len(keys) == len(set(keys)), "an unchanged log was read again"
    assert sorted(_numbers(rows)) == list(range(40))
    _append(log, 40, 1)
    assert _leakcollect(tmp_path, log).returncode == exitcodes.OK
    assert sorted(_numbers(_log_rows(tmp_path / "b"))) == list(range(41))
