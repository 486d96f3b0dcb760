"""Benchmark the cron collector: one --once run over 8 GPUs (fake NVML) and 3 logs.

Writes JSON (path as the first argument): wall and CPU time of the run, CPU per
sample, peak RSS of the child, import cost of the collector against importing
pyarrow alone (the floor), and the share of one core a one-minute cron run uses.
Not a test: numbers, side by side in one run.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
BATCH = "[2025-11-11 04:28:30] Decode batch, #running-req: 2, #token: 7171, token usage: 0.04, cuda graph: True, gen throughput (token/s): 86.14, #queue-req: 0\n"


class FakeNvml8:
    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 8

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> SimpleNamespace:
        return SimpleNamespace(total=80 << 30, used=70 << 30, free=10 << 30, reserved=1 << 29)

    nvmlMemory_v2 = 2

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=80, memory=30)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=999_000 + h, usedGpuMemory=60 << 30)]


def child(tmp: str, duration: float) -> None:
    """One run: --once (duration 0), or sampling every 0.1 s for ``duration`` seconds."""
    sys.path.insert(0, str(REPO))
    from collector.run import Config, collect

    logs = [f"{tmp}/s{i}.log" for i in range(3)]
    cfg = Config(
        bucket=f"{tmp}/b",
        host="bench",
        state_dir=Path(tmp) / "st",
        interval=0.1,
        duration=duration,
        logs=logs,
    )
    t0, c0 = time.perf_counter(), time.process_time()
    collect(cfg, nvml_lib=FakeNvml8(), say=lambda m: None)
    import pyarrow.parquet as pq

    samples = (
        sum(pq.read_table(f).num_rows for f in Path(tmp, "b", "gpu_samples").rglob("*.parquet"))
        // 8
    )
    out = {
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "samples": samples,
    }
    print(json.dumps(out))


def _py(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    return time.perf_counter() - t0


def main(out_path: str, repeats: int = 5) -> None:
    def one(duration: float) -> dict[str, float]:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(3):
                Path(f"{tmp}/s{i}.log").write_text(BATCH * 2000 + "INFO: GET /health 200\n" * 2000)
            r = subprocess.run(
                [sys.executable, __file__, "--child", tmp, str(duration)],
                capture_output=True,
                text=True,
                check=True,
                cwd=REPO,
            )
            return json.loads(r.stdout)

    runs = [one(0.0) for _ in range(repeats)]
    longer = [one(2.0) for _ in range(repeats)]
    per_sample = statistics.median(
        (b["cpu_s"] - a["cpu_s"]) / max(b["samples"] - a["samples"], 1)
        for a, b in zip(runs, longer, strict=True)
    )
    base = [_py("pass") for _ in range(repeats)]
    coll = [_py("import collector.cli, collector.run") for _ in range(repeats)]
    floor = [_py("import pyarrow, pyarrow.parquet") for _ in range(repeats)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    res = {
        "once_run_8_gpus_3_logs": {k: round(v, 4) for k, v in med.items()},
        "log_lines_per_run": 3 * 4000,
        "cpu_s_per_extra_sample_8_gpus": round(per_sample, 5),
        "import_s": {
            "collector": round(statistics.median(coll) - statistics.median(base), 4),
            "pyarrow_floor": round(statistics.median(floor) - statistics.median(base), 4),
        },
        "cron_minute_core_share_pct": round(100 * med["cpu_s"] / 60, 3),
        "repeats": repeats,
    }
    res["import_s"]["ratio_to_floor"] = round(
        res["import_s"]["collector"] / max(res["import_s"]["pyarrow_floor"], 1e-9), 2
    )
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], float(sys.argv[3]))
    else:
        main(
            sys.argv[1] if len(sys.argv) > 1 else "bench/collector.json",
            int(sys.argv[2]) if len(sys.argv) > 2 else 5,
        )
