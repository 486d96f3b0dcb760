"""Benchmark `leakreport logs parse` on a large log made from the real corpus lines.

Usage: logparse_bench.py OUT.json [SIZE_MB ...] (default 1024). The log mixes every
corpus log line (SGLang, vLLM, PyTorch OOM) with request-log noise, as a busy server
writes. For each size, three measurements on the same file, each in a process of its
own (so one's memory does not count for another's): ``wc -l`` and polars' plain CSV
reader of the whole file (the floor: reading the lines and nothing else), then the
parser (``analyzer.logparse.parse_file``, as `logs parse` runs it). mb_per_s is
wall-clock; mb_per_cpu_s (CPU seconds of all threads), the load average and the
ratio to the floor, measured side by side, say what the number means on a machine
shared with other work. The top-level keys are those of the largest size.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def _one(what: str, log: str) -> dict[str, Any]:
    """One measurement, in this (child) process: wall and CPU seconds, peak memory."""
    import polars as pl

    from analyzer import logparse, logread

    c0, t0 = time.process_time(), time.perf_counter()  # CPU: all threads
    res: dict[str, Any] = {}
    if what == "parse":
        frame, lines = logparse.parse_file(log, text=False)  # as `logs parse` does
        res |= {"lines": lines, "events": frame.height}
    else:  # the floor: polars reads every line, as the parser's reader does, and stops
        df = pl.read_csv(log, **logread.LINES_CSV)
        res["lines"] = df.height
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return res | {"s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_mb": round(rss)}


def _child(what: str, log: Path) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, __file__, "--one", what, str(log)],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def measure(size_mb: int, tmp: Path) -> dict[str, Any]:
    log = tmp / f"big{size_mb}.log"
    size = make_log(log, size_mb)
    mb = size / 2**20
    t0 = time.perf_counter()
    subprocess.run(["wc", "-l", str(log)], check=True, capture_output=True)
    wc_s = time.perf_counter() - t0
    floor = _child("read_csv", log)
    p = _child("parse", log)
    log.unlink()
    if p["lines"] != floor["lines"]:
        raise SystemExit(f"the parser counted {p['lines']} lines, polars' reader {floor['lines']}")
    return {
        "bytes": size,
        "lines": p["lines"],
        "events": p["events"],
        "total_s": p["s"],
        "mb_per_s": round(mb / p["s"], 1),
        "cpu_s": p["cpu_s"],
        "mb_per_cpu_s": round(mb / p["cpu_s"], 1),
        "peak_rss_mb": p["peak_rss_mb"],
        "floor_read_csv": {
            "s": floor["s"],
            "mb_per_s": round(mb / floor["s"], 1),
            "cpu_s": floor["cpu_s"],
            "peak_rss_mb": floor["peak_rss_mb"],
        },
        "wc_l_s": round(wc_s, 3),
        "ratio_to_read_csv": round(p["s"] / floor["s"], 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main(out: str, sizes: list[int]) -> None:
    from analyzer import logparse, logread

    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size_mb in sizes:
            runs[str(size_mb)] = r = measure(size_mb, Path(tmp))
            print(
                f"{size_mb} MB: {r['mb_per_s']} MB/s ({r['total_s']} s, {r['mb_per_cpu_s']} MB "
                f"per CPU-s, peak RSS {r['peak_rss_mb']} MB); polars read_csv alone "
                f"{r['floor_read_csv']['mb_per_s']} MB/s, ratio {r['ratio_to_read_csv']}; "
                f"load {r['load_avg_1m']}",
                flush=True,
            )
    res = dict(runs[str(max(sizes))])
    res |= {
        "sizes": runs,
        "chunk_mb": logread.CHUNK_BYTES >> 20,
        "workers": logparse.WORKERS,
        "cpus": os.cpu_count(),
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(_one(sys.argv[2], sys.argv[3])))
        sys.exit(0)
    main(
        sys.argv[1] if len(sys.argv) > 1 else "bench/logparse.json",
        [int(a) for a in sys.argv[2:]] or [1024],
    )
