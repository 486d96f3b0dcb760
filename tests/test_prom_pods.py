"""A Kubernetes pod change on a GPU is a new server lifetime, even where memory runs on.

Device samples as `import prometheus` writes them from dcgm-exporter (namespace/pod
on every row, no process table): eight hours on one GPU, busy ten minutes and idle
five, in pod ``srv-a`` for the first four hours and ``srv-b`` after, the memory
continuous across the change. The leak verdict and its rate must be those of the
lifetime that leaks, and the finding must name that lifetime's pod.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from collector.writer import BucketWriter

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
T0 = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
HOURS = 8


def _write(bucket: Path, pods: tuple[str, str] | None, rate_a: float, rate_b: float) -> None:
    rows = []
    n = HOURS * 3600 // 15
    half = n // 2
    for i in range(n):
        h = i * 15 / 3600
        if i < half:
            base = 40960 + rate_a * h
        else:  # no drop at the change: the new pod starts where the old one ended
            base = 40960 + rate_a * HOURS / 2 + rate_b * (h - HOURS / 2)
        busy = i % 60 < 40
        used = base + (2048 if busy else 0)
        pod = None if pods is None else pods[0] if i < half else pods[1]
        rows.append(
            {
                "ts": T0 + dt.timedelta(seconds=15 * i),
                "host": "k8s-00",
                "gpu_index": 0,
                "gpu_uuid": "GPU-1",
                "gpu_name": "NVIDIA H100 80GB HBM3",
                "memory_total_bytes": 81559 * MIB,
                "memory_used_bytes": int(used * MIB),
                "memory_free_bytes": int((81559 - used) * MIB),
                "utilization_gpu_pct": 85.0 if busy else 0.0,
                "namespace": "llm" if pod else None,
                "pod": pod,
                "container": "server" if pod else None,
            }
        )
    BucketWriter(bucket, "k8s-00").write("gpu_samples", rows)


def _findings(bucket: Path) -> list[dict[str, Any]]:
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "analyze", str(bucket), "--format", "json"]
        + ["--fail-on", "never"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return list(json.loads(r.stdout)["findings"])


def _leaks(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in found if f["category"] == "leak.gpu"]


def test_the_new_pod_leaks(tmp_path: Path) -> None:
    _write(tmp_path / "b", ("srv-a", "srv-b"), rate_a=0.0, rate_b=300.0)
    (leak,) = _leaks(_findings(tmp_path / "b"))
    ev = leak["evidence"]
    assert leak["rule_id"] == "GM001" and ev["lifetime_source"] == "pod change"
    assert abs(ev["rate_mib_per_h"] - 300.0) <= 30  # the new pod's rate alone
    assert leak["start"] >= "2026-11-23T04:00:00Z"  # within the new pod's lifetime
    assert ev["pods"] == ["llm/srv-b"]
    # the control: the same memory with no pod names is one lifetime, flat then
    # rising, which is no steady leak
    _write(tmp_path / "c", None, rate_a=0.0, rate_b=300.0)
    assert not _leaks(_findings(tmp_path / "c"))


def test_the_old_pod_leaked_and_the_new_one_is_flat(tmp_path: Path) -> None:
    _write(tmp_path / "b", ("srv-a", "srv-b"), rate_a=300.0, rate_b=0.0)
    (leak,) = _leaks(_findings(tmp_path / "b"))
    ev = leak["evidence"]
    assert abs(ev["rate_mib_per_h"] - 300.0) <= 30
    assert leak["end"] <= "2026-11-23T04:05:00Z"  # ends with the old pod
    assert ev["pods"] == ["llm/srv-a"]


def test_one_pod_throughout_is_one_lifetime(tmp_path: Path) -> None:
    _write(tmp_path / "b", ("srv-a", "srv-a"), rate_a=300.0, rate_b=300.0)
    (leak,) = _leaks(_findings(tmp_path / "b"))
    assert leak["evidence"]["lifetime_source"] != "pod change"
    assert leak["evidence"]["pods"] == ["llm/srv-a"]
    assert abs(leak["evidence"]["rate_mib_per_h"] - 300.0) <= 30
