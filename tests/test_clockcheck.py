"""A server log whose times lie hours from the GPU samples' (an import given no --tz, the
nvidia-smi log's given one) is named, with the shift; one on the same clock is not."""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from collector.writer import BucketWriter

T0 = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
BATCH = (
    "[{t:%Y-%m-%d %H:%M:%S}] Decode batch, #running-req: 8, #token: 900, token usage: 0.10, "
    "gen throughput (token/s): 100.00, #queue-req: 0"
)


def _bucket(root: Path, shift: dt.timedelta) -> Path:
    """Six hours of one GPU, busy in random minutes (85 %, else 1 %), and a server log with
    batch lines in the busy minutes, stamped ``shift`` off."""
    rng = random.Random(5)
    busy = {m for m in range(360) if rng.random() < 0.3}
    gpu, lines = [], []
    for k in range(360 * 6):  # every 10 s
        t = T0 + dt.timedelta(seconds=10 * k)
        on = k // 6 in busy
        gpu.append({"ts": t, "host": "h", "gpu_index": 0, "memory_used_bytes": 40 << 30,
                    "memory_total_bytes": 80 << 30, "utilization_gpu_pct": 85.0 if on else 1.0})  # fmt: skip
        if on and k % 6 == 0:
            when = t + shift
            text = BATCH.format(t=when)
            lines.append({"ts": when, "host": "h", "file": "/srv.log", "inode": 1,
                          "offset": len(lines) * 200, "text": text, "signature": "batch_stats"})  # fmt: skip
    w = BucketWriter(root, "h")
    w.write("gpu_samples", gpu)
    w.write("log_lines", lines)
    return root


def _incomplete(bucket: Path) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "analyze", str(bucket), "--format", "json",
         "--fail-on", "never", "-q"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode in (0, 3), r.stderr
    return json.loads(r.stdout)["run"]["incomplete"]


@pytest.mark.parametrize(
    ("shift", "said"),
    [
        (dt.timedelta(hours=-5), "5 h behind"),  # New York read as UTC
        (dt.timedelta(hours=5, minutes=30), "5 h 30 min ahead of"),  # Kolkata the other way
    ],
)
def test_a_log_hours_off_its_gpu_samples_is_named(tmp_path, shift, said) -> None:
    (line,) = [r for r in _incomplete(_bucket(tmp_path, shift)) if "server log" in r]
    assert line.startswith(f"host h: its server log's times look {said} its GPU samples'"), line
    assert "with the --tz its samples were imported with" in line


def test_a_log_on_the_samples_clock_is_not_named(tmp_path) -> None:
    assert not [r for r in _incomplete(_bucket(tmp_path, dt.timedelta())) if "server log" in r]
