"""A simulated fleet inside a real Prometheus, for the import test and benchmark.

``openmetrics`` turns a natively written bucket (``gpu_samples``, ``metric_samples``,
``gpu_processes`` for the process lifetimes) into the OpenMetrics text Prometheus
would have scraped: dcgm-exporter series (``DCGM_FI_DEV_*`` in MiB with ``gpu``,
``UUID``, ``modelName``, ``Hostname``, and for Kubernetes hosts the ``namespace``/
``pod``/``container`` of the workload, a new pod per process lifetime) and the
engine's series with ``job``/``instance`` (Kubernetes: the pod's IP and pod labels,
no host). ``backfill`` loads it with ``promtool tsdb create-blocks-from openmetrics``;
``PromServer`` runs ``prometheus`` over that TSDB on a free 127.0.0.1 port.
"""

from __future__ import annotations

import bisect
import math
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow.dataset as ds

MIB = 1024 * 1024
PROM = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

# `leakcollect import prometheus` in a child that reports its own peak RSS on exit
IMPORT_CHILD = (
    "import resource, runpy, sys\n"
    "sys.argv = ['leakcollect import prometheus', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('collector.promcli', run_name='__main__')\n"
    "finally:\n"
    "    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "    print(f'PEAK_RSS_KB {rss}', file=sys.stderr)\n"
)


def have_prometheus() -> bool:
    return Path(PROM).exists() and Path(PROMTOOL).exists()


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_esc(str(v))}"' for k, v in d.items()) + "}"


def _read(bucket: Path, table: str, columns: list[str]) -> list[dict[str, Any]]:
    folder = bucket / table
    if not folder.exists():
        return []
    t = ds.dataset(folder, format="parquet", partitioning=None).to_table(columns=columns)
    return t.to_pylist()


def pod_name(host: str, pid: int) -> str:
    return f"{host}-{pid:x}"


def openmetrics(
    bucket: Path,
    out: IO[str],
    k8s_hosts: set[str],
    replicas: dict[str, tuple[float, float]] | None = None,
) -> int:
    """Write the bucket's device and engine series; returns the number of samples.

    ``replicas`` (an HA pair: replica label value -> a window (from, to) in epoch
    seconds that replica missed) writes every series once per replica, with a
    ``replica`` label, as two Prometheus servers scraping the same targets would."""
    reps: list[tuple[dict[str, str], tuple[float, float]]] = [({}, (0.0, 0.0))]
    if replicas:
        reps = [({"replica": k}, gap) for k, gap in replicas.items()]
    starts: dict[str, list[tuple[float, int]]] = {}
    for r in _read(bucket, "gpu_processes", ["host", "pid", "process_start"]):
        if r["process_start"] is not None:
            starts.setdefault(r["host"], []).append((r["process_start"].timestamp(), r["pid"]))
    lives = {h: sorted(set(v)) for h, v in starts.items()}

    def pod_at(host: str, t: float) -> str | None:
        life = lives.get(host)
        if host not in k8s_hosts or not life:
            return None
        i = bisect.bisect_right([s for s, _ in life], t) - 1
        return pod_name(host, life[max(i, 0)][1])

    n = 0
    gpu = _read(
        bucket,
        "gpu_samples",
        ["ts", "host", "gpu_index", "gpu_uuid", "gpu_name", "memory_used_bytes"]
        + ["memory_free_bytes", "utilization_gpu_pct"],
    )
    gpu.sort(key=lambda r: (r["host"], r["gpu_index"], r["ts"]))
    for metric, col, scale in (
        ("DCGM_FI_DEV_FB_USED", "memory_used_bytes", MIB),
        ("DCGM_FI_DEV_FB_FREE", "memory_free_bytes", MIB),
        ("DCGM_FI_DEV_GPU_UTIL", "utilization_gpu_pct", 1),
    ):
        out.write(f"# TYPE {metric} gauge\n")
        for (rep, gap), r in ((x, r) for x in reps for r in gpu):
            v = r[col]
            t = r["ts"].timestamp()
            if v is None or gap[0] <= t < gap[1]:
                continue
            lab = {
                "gpu": str(r["gpu_index"]),
                "UUID": r["gpu_uuid"] or "",
                "modelName": r["gpu_name"] or "",
                "Hostname": r["host"],
                "job": "dcgm-exporter",
                "instance": f"{r['host']}:9400",
            }
            pod = pod_at(r["host"], t)
            if pod:
                lab |= {"namespace": "llm", "pod": pod, "container": "server"}
            lab |= rep
            val = v / scale if scale != 1 else v
            out.write(f"{metric}{_labels(lab)} {val!r} {t:.3f}\n")
            n += 1
    ms = _read(bucket, "metric_samples", ["ts", "host", "name", "labels", "value"])
    ms.sort(key=lambda r: (r["name"], r["host"], sorted(r["labels"] or []), r["ts"]))
    fam = None
    ip = {h: f"10.1.0.{k + 2}" for k, h in enumerate(sorted({r["host"] for r in ms}))}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for r in ms:  # sorted: each name's rows stay in order
        by_name.setdefault(r["name"], []).append(r)
    rows = ((x, r) for name in by_name for x in reps for r in by_name[name])
    for (rep, gap), r in rows:
        t = r["ts"].timestamp()
        if r["value"] is None or math.isnan(r["value"]) or gap[0] <= t < gap[1]:
            continue
        if r["name"] != fam:
            fam = r["name"]
            out.write(f"# TYPE {fam} gauge\n" if not fam.endswith("_total") else "")
        lab = dict(r["labels"] or [])
        pod = pod_at(r["host"], t)
        if pod:
            lab |= {"job": "llm-server", "instance": f"{ip[r['host']]}:8000"}
            lab |= {"namespace": "llm", "pod": pod, "container": "server"}
        else:
            lab |= {"job": "llm-server", "instance": f"{r['host']}:8000"}
        lab |= rep
        out.write(f"{r['name']}{_labels(lab)} {r['value']!r} {t:.3f}\n")
        n += 1
    # other jobs' process series, which must stay out of the bucket
    if gpu:
        out.write("# TYPE process_resident_memory_bytes gauge\n")
        t0 = gpu[0]["ts"].timestamp()
        for k in range(60):
            lab = {"job": "prometheus", "instance": "localhost:9090"}
            out.write(f"process_resident_memory_bytes{_labels(lab)} {2e8 + k} {t0 + 60 * k:.3f}\n")
    out.write("# EOF\n")
    return n


def backfill(om: Path, tsdb: Path) -> None:
    tsdb.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)],
        check=True,
        capture_output=True,
        timeout=600,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PromServer:
    """``prometheus`` over a TSDB folder on 127.0.0.1; stopped on exit."""

    def __init__(
        self, tsdb: Path, workdir: Path, *, max_samples: int | None = None, compact: bool = True
    ) -> None:
        self.tsdb, self.workdir, self.max_samples = tsdb, workdir, max_samples
        self.compact = compact  # False: backfilled 2 h blocks stay as they are
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PromServer:
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1h\n")  # scrapes nothing
        args = [
            PROM,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={self.tsdb}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        if self.max_samples:
            args.append(f"--query.max-samples={self.max_samples}")
        if not self.compact:
            args += ["--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h"]
        log = open(self.workdir / f"prometheus-{self.port}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited: {(self.workdir / log.name).read_text()[-800:]}"
                )
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError("prometheus did not become ready within 60 s")

    def __exit__(self, *_exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        yield from f


def synthetic(
    out: IO[str],
    gpus: int,
    hours: float,
    step_s: int = 15,
    t0: float = 1795392000.0,
    first: int = 0,
    count: int | None = None,
) -> int:
    """dcgm-exporter series alone for a large fleet (8 GPUs a host; every third GPU leaks
    1 MiB a minute; memory and utilisation vary step to step, so the TSDB compresses
    them as it would real ones), written fast: for memory and throughput at scale, not
    for verdicts. ``first``/``count`` write steps [first, first + count) of the window
    alone (a backfill in pieces); returns the number of samples written."""
    n = int(hours * 3600 // step_s)
    steps = range(first, min(n, first + count) if count is not None else n)
    total = 0
    for metric in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL"):
        out.write(f"# TYPE {metric} gauge\n")
        for g in range(gpus):
            host = f"node-{g // 8:04d}"
            lab = (
                f'{{gpu="{g % 8}",UUID="GPU-{g:08x}",modelName="NVIDIA H100 80GB HBM3",'
                f'Hostname="{host}",namespace="llm",pod="srv-{g // 8:04d}"}}'
            )
            leak = 1.0 / 60 if g % 3 == 0 else 0.0
            lines = []
            for i in steps:
                t = t0 + i * step_s
                used = 60000 + leak * i * step_s + 16 * ((i * 7 + g) % 5)
                if metric.endswith("USED"):
                    v = used
                elif "FREE" in metric:
                    v = 81559 - used
                else:
                    v = (i * 37 + g * 11) % 101
                lines.append(f"{metric}{lab} {v:.0f} {t:.0f}\n")
            out.write("".join(lines))
            total += len(lines)
    out.write("# EOF\n")
    return total
