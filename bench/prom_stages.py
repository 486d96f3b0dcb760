"""Where `import prometheus` spends its time, stage by stage, side by side in one run.

Usage: prom_stages.py OUT.json [--gpus N] [--hours H] [--workdir DIR]

Over one real Prometheus (the TSDB of prom_week.py, backfilled if missing) it times:
the server's answer alone for each query form (``last_over_time``, with the HA
``max without``, a plain selector), decoding one answer with ``json`` and with the
Arrow CSV path, building the chunk's rows, writing them; then whole imports at
several ``--concurrency`` and ``--points`` settings, each in this process (samples
per second; peak RSS is prom_week.py's job, in a child of its own).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import prom_week  # noqa: E402
import promfleet  # noqa: E402


def _post(url: str, form: dict[str, Any]) -> tuple[float, bytes]:
    req = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST")
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:  # noqa: S310 - 127.0.0.1
        raw = r.read()
    return time.perf_counter() - t, raw


def _best(f: Any, reps: int = 3) -> float:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return min(out)


def stages(url: str, gpus: int, hours: float, work: Path) -> dict[str, Any]:
    from collector.promapi import PromClient
    from collector.promdecode import fast_matrix, slow_matrix
    from collector.promgrid import GpuGrid
    from collector.promimport import Options, run_import
    from collector.promplan import GpuId, load_mapping
    from collector.writer import BucketWriter

    res: dict[str, Any] = {}
    hosts = sorted({f"node-{g // 8:04d}" for g in range(min(gpus, 80))})  # one batch's worth
    sel = f'DCGM_FI_DEV_FB_USED{{Hostname=~"{"|".join(hosts)}"}}'
    steps = min(int(hours * 3600 // prom_week.STEP), 400_000 // (3 * len(hosts) * 8))
    t0, step = prom_week.T0, prom_week.STEP
    form = {"start": t0, "end": t0 + (steps - 1) * step, "step": step}
    queries = {
        "last_over_time": f"last_over_time({sel}[60s])",
        "max_without_replica": f"max without (replica) (last_over_time({sel}[60s]))",
        "plain_selector": sel,
    }
    raw = b""
    server: dict[str, Any] = {}
    for name, q in queries.items():
        secs = [_post(url + "/api/v1/query_range", {**form, "query": q}) for _ in range(3)]
        server[name] = round(min(s for s, _ in secs), 3)
        raw = raw or secs[0][1]
    m = fast_matrix(raw)
    res["one_answer"] = {"series": len(m), "points": m.points, "bytes": len(raw)}
    res["server_s"] = server
    res["decode_s"] = {
        "json": round(_best(lambda: slow_matrix(json.loads(raw)["data"])), 3),
        "arrow_csv": round(_best(lambda: fast_matrix(raw)), 3),
    }

    def grid() -> Any:
        g = GpuGrid(t0, steps, step)
        p = g.part(m)
        for lab in m.labels:
            gid = GpuId(int(lab["gpu"]), lab["UUID"], lab["modelName"], "llm", lab["pod"], None)
            g.keep(p, lab["Hostname"], gid, "memory_used_bytes", 1048576.0, t0)
        return g.tables()

    res["build_rows_s"] = round(_best(grid), 3)
    tables = grid()
    out = work / "stage-write"

    def write() -> None:
        shutil.rmtree(out, ignore_errors=True)
        for h, t in tables.items():
            BucketWriter(out, h).write("gpu_samples", t)

    res["write_s"] = round(_best(write), 3)
    runs = []
    for conc, points in ((1, 400_000), (2, 400_000), (4, 400_000), (4, 100_000), (4, 1_600_000)):
        bucket = work / "stage-import"
        shutil.rmtree(bucket, ignore_errors=True)
        c = PromClient(url, timeout=600)
        end = t0 + (int(hours * 3600 // step) - 1) * step
        o = Options(start=t0, end=end, step=float(step), concurrency=conc, points=points)
        t = time.perf_counter()
        st = run_import(c, load_mapping(), o, str(bucket), say=lambda _m: None)
        wall = time.perf_counter() - t
        runs.append(
            {
                "concurrency": conc,
                "points": points,
                "samples": st.samples,
                "seconds": round(wall, 2),
                "samples_per_s": round(st.samples / wall),
                "requests": c.requests,
            }
        )
        print(runs[-1], flush=True)
    res["imports"] = runs
    return res


def main(argv: list[str]) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--workdir", type=Path)
    a = ap.parse_args(argv)
    res: dict[str, Any] = {"gpus": a.gpus, "hours": a.hours}
    if not promfleet.have_prometheus():
        res["skipped"] = "prometheus/promtool not installed (Debian package `prometheus`)"
    else:
        with tempfile.TemporaryDirectory(prefix="prom-stages-") as tmp:
            work = a.workdir or Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            res["backfill"] = prom_week.backfill(work, a.gpus, a.hours)
            with promfleet.PromServer(work / "tsdb", work, compact=False) as server:
                res |= stages(server.url, a.gpus, a.hours, work)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
