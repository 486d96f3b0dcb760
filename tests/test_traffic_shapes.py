"""Leaks under the traffic real servers see, from nvidia-smi CSV logs as `nvidia-smi -l 10`
writes them, through the real importer and the CLI.

Day and night traffic crowds idle windows into the night, minutes apart, while a leak
that grows per request moves by day: a step between two night windows is under the
noise however fast the leak runs. A server that always has a request running shows no
idle window at all. Each shape has its truth, and a twin that must stay silent.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

START = dt.datetime(2026, 3, 2, 0, 0, 0)
HEADER = (
    "timestamp, index, name, uuid, memory.total [MiB], memory.used [MiB], "
    "memory.free [MiB], utilization.gpu [%]"
)
TOTAL = 81559
MEAN_RUN_S = 6.0  # a request's time on the GPU


def _rate(t_h: float, peak: float, diurnal: bool) -> float:
    """Requests per second at hour ``t_h``: 15 % of the peak at night, the peak at noon."""
    if not diurnal:
        return peak
    return peak * (0.15 + 0.85 * max(0.0, math.sin(2 * math.pi * ((t_h % 24) - 6) / 24)))


def write_smi(
    path: Path,
    hours: float,
    *,
    leak_mib_h: float = 0.0,
    peak: float = 0.3,
    diurnal: bool = True,
    cache_step_mib: float = 0.0,
    seed: int = 7,
) -> float:
    """An nvidia-smi CSV of one 80 GB GPU every 10 s; memory grows ``leak_mib_h`` on
    average, per request served (so by day). Returns the leak's true average MiB/h."""
    rnd = random.Random(seed)
    steps = int(hours * 360)
    mean_req_s = sum(_rate(k / 360, peak, diurnal) for k in range(steps)) / steps
    per_req = leak_mib_h / 3600 / mean_req_s if mean_req_s else 0.0
    base, served, most, leaked = 0.88 * TOTAL, 0.0, 0, 0.0
    lines = [HEADER]
    for k in range(steps):
        lam = _rate(k / 360, peak, diurnal)
        arrived = _poisson(rnd, lam * 10)
        served += arrived
        leaked += arrived * per_req
        running = _poisson(rnd, lam * MEAN_RUN_S)
        most = max(most, running)
        cache = min(cache_step_mib * most, 2048.0)
        used = round(base + cache + leaked + rnd.uniform(-2, 2))
        util = 0 if running == 0 else rnd.randint(40, 95)
        ts = START + dt.timedelta(seconds=10 * k, milliseconds=rnd.randint(0, 900))
        lines.append(
            f"{ts:%Y/%m/%d %H:%M:%S}.{ts.microsecond // 1000:03d}, 0, NVIDIA H100 80GB HBM3, "
            f"GPU-5e1b3c2a-0000-4c1e-9d7a-000000000000, {TOTAL} MiB, {used} MiB, "
            f"{TOTAL - used} MiB, {util} %"
        )
    path.write_text("\n".join(lines) + "\n")
    return leaked / hours


def _poisson(rnd: random.Random, mean: float) -> int:
    """Knuth's method: the means here are small."""
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rnd.random()
        if p <= limit:
            return k
        k += 1


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300
    )


def _analyze(tmp_path: Path, name: str, **shape: object) -> tuple[int, dict, str, float]:
    """Import the shape's CSV (as host ``name``) and analyse it: exit code, findings
    document, stderr, and the true leak rate."""
    csv, bucket = tmp_path / f"{name}.csv", tmp_path / name
    truth = write_smi(csv, **shape)  # type: ignore[arg-type]
    imp = _run(
        "collector.cli", "import", "nvidia-smi-csv", str(csv), "--host", name,
        "--bucket", str(bucket), "--tz", "UTC",
    )  # fmt: skip
    assert imp.returncode == 0, imp.stderr
    r = _run("leakreport", "analyze", str(bucket), "--format", "json", "-q")
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout), r.stderr, truth


def _rates(doc: dict, rule: str) -> list[float]:
    return [f["evidence"]["rate_mib_per_h"] for f in doc["findings"] if f["rule_id"] == rule]


@pytest.mark.parametrize("leak", [20.0, 50.0])
def test_a_per_request_leak_under_day_and_night_traffic_is_found_at_its_rate(
    tmp_path: Path, leak: float
) -> None:
    rc, doc, err, truth = _analyze(tmp_path, f"diurnal-{leak:.0f}", hours=72, leak_mib_h=leak)
    (rate,) = _rates(doc, "GM001")
    assert abs(rate - truth) <= 0.2 * truth, (rate, truth)
    assert rc == 1, err


def test_cache_that_grows_with_peak_load_under_the_same_traffic_is_no_leak(
    tmp_path: Path,
) -> None:
    rc, doc, err, _ = _analyze(tmp_path, "diurnal-cache", hours=72, cache_step_mib=150.0)
    assert not [f for f in doc["findings"] if f["category"] == "leak.gpu"], doc["findings"]
    assert rc == 0, err


def test_a_server_never_idle_is_named_not_called_clean(tmp_path: Path) -> None:
    rc, doc, err, _ = _analyze(
        tmp_path, "never-idle", hours=12, leak_mib_h=100.0, peak=1.5, diurnal=False
    )
    assert rc == 3, err
    (line,) = [x for x in doc["run"]["incomplete"] if x.startswith("host never-idle:")]
    assert "had 0 idle windows" in line and "GM001" in line and "under 10 % of 12.0 h" in line
    (cov,) = [c for c in doc["coverage"] if c["host"] == "never-idle"]
    assert "GM001" not in cov["checked"] and not cov["complete"]
    assert "GM001" in {m["rule_id"] for m in cov["not_checked"]}


def test_the_same_leak_with_quiet_hours_is_judged_and_named_nowhere(tmp_path: Path) -> None:
    rc, doc, err, truth = _analyze(tmp_path, "quiet", hours=12, leak_mib_h=100.0, diurnal=False)
    assert not [x for x in doc["run"]["incomplete"] if "idle window" in x], doc["run"]
    (rate,) = _rates(doc, "GM001")
    assert abs(rate - truth) <= 0.2 * truth and rc == 1, (rate, truth, err)


def test_a_gpu_idle_throughout_is_clean_not_never_idle(tmp_path: Path) -> None:
    """A spare GPU at 0 % for 12 h is one long idle window: nothing moved, nothing to name."""
    rc, doc, err, _ = _analyze(tmp_path, "spare", hours=12, peak=0.0, diurnal=False)
    assert not doc["run"]["incomplete"] and not doc["findings"], (doc["run"], doc["findings"])
    assert rc == 0, err
