"""Benchmark `leakreport logs parse` on a large log made from the real corpus lines.

Usage: logparse_bench.py OUT.json [SIZE_MB]. The log mixes every corpus log line
(SGLang, vLLM, PyTorch OOM) with request-log noise, as a busy server writes.
mb_per_s is wall-clock; mb_per_cpu_s (CPU seconds of all threads) and the load
average say what the number means on a machine shared with other work.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CORPUS = REPO / "tests" / "corpus"
LOG_FILES = (
    "sglang_logs.txt",
    "sglang_more.txt",
    "vllm_logs.txt",
    "vllm_more.txt",
    "torch_oom.txt",
    "torch_more.txt",
)


def make_log(path: Path, size_mb: int) -> int:
    lines = []
    for name in LOG_FILES:
        src = CORPUS / name
        lines += [ln for ln in src.read_text().splitlines() if ln and not ln.startswith("#")]
    noise = '[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    block = ("\n".join(lines + [noise] * (3 * len(lines))) + "\n").encode()
    target = size_mb << 20
    with open(path, "wb") as f:
        written = 0
        while written < target:
            f.write(block)
            written += len(block)
    return written


def main(out: str, size_mb: int = 1024) -> None:
    from analyzer import logparse

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.log"
        size = make_log(log, size_mb)
        c0 = time.process_time()  # all threads: honest on a shared, loaded machine
        t0 = time.perf_counter()
        lines = logparse.read_lines(log)
        t1 = time.perf_counter()
        frame = logparse.parse_frame(lines)
        t2 = time.perf_counter()
        cpu = time.process_time() - c0
    res = {
        "bytes": size,
        "lines": lines.len(),
        "events": frame.height,
        "read_s": round(t1 - t0, 3),
        "parse_s": round(t2 - t1, 3),
        "total_s": round(t2 - t0, 3),
        "mb_per_s": round(size / 2**20 / (t2 - t0), 1),
        "cpu_s": round(cpu, 3),
        "mb_per_cpu_s": round(size / 2**20 / cpu, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main(
        sys.argv[1] if len(sys.argv) > 1 else "bench/logparse.json",
        int(sys.argv[2]) if len(sys.argv) > 2 else 1024,
    )
