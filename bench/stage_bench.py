"""Staging S3 objects for an analysis: in turn against several at a time, side by side.

Each request of the source file system answers after a fixed latency (S3's round trip;
moto, a local S3 server, answers one request at a time and would hide it). The same
objects are staged both ways and compared byte for byte. Usage:

    stage_bench.py OUT.json [OBJECTS] [LATENCY_MS]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fsspec.implementations.local import LocalFileSystem
from pyarrow.fs import FSSpecHandler, PyFileSystem, SubTreeFileSystem

from analyzer import staging


def _slow(latency_s: float) -> Any:
    class Slow(LocalFileSystem):  # type: ignore[misc]
        def _open(self, *a: Any, **k: Any) -> Any:
            time.sleep(latency_s)
            return super()._open(*a, **k)

        def info(self, *a: Any, **k: Any) -> Any:
            time.sleep(latency_s)
            return super().info(*a, **k)

    return Slow()


def main(out: Path, objects: int, latency_ms: float) -> dict[str, Any]:
    src = Path(tempfile.mkdtemp(prefix="stage-bench-"))
    keys = []
    for i in range(objects):
        p = src / f"gpu_samples/date=2026-12-01/host=h{i % 20}/f{i}.parquet"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(50_000))
        keys.append(str(p.relative_to(src)))
    fs = SubTreeFileSystem(str(src), PyFileSystem(FSSpecHandler(_slow(latency_ms / 1000))))
    res: dict[str, Any] = {"objects": objects, "latency_ms": latency_ms, "object_kb": 50}
    default = staging.STAGE_THREADS
    try:
        for name, threads in (("in_turn", 1), ("threads", default)):
            staging.STAGE_THREADS = threads
            best, same = float("inf"), True
            for _ in range(2):
                d = Path(tempfile.mkdtemp(prefix="stage-bench-out-"))
                t0 = time.perf_counter()
                got = staging.stage(fs, keys, d)
                best = min(best, time.perf_counter() - t0)
                same &= all(
                    Path(g).read_bytes() == (src / k).read_bytes()
                    for g, k in zip(got, keys, strict=True)
                )
                shutil.rmtree(d)
            res[name] = {"threads": threads, "seconds": round(best, 3), "same_bytes": same}
    finally:
        staging.STAGE_THREADS = default
        shutil.rmtree(src)
    res["in_turn_over_threads"] = round(res["in_turn"]["seconds"] / res["threads"]["seconds"], 1)
    out.write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    a = sys.argv[1:]
    print(
        json.dumps(
            main(Path(a[0]), int(a[1]) if len(a) > 1 else 200, float(a[2]) if len(a) > 2 else 20),
            indent=2,
        )
    )
