"""Generate a simulated fleet into a bucket, through the collector's writer.

The memory model lives in ``model`` (polars); this module turns it into the
collector's tables, with log lines and /metrics text that go through the
collector's real log-signature matcher and /metrics parser.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collector import __version__ as collector_version
from collector import logsig, metrics
from collector.procinfo import parse_cmdline
from collector.schema import TABLES
from collector.writer import BucketWriter
from simulator import decide, model, shapes, textgen
from simulator.model import STEP_S
from simulator.scenarios import Scenario, resolve

MIB = 1024 * 1024
SCRAPE_S = 30
PROCESS_EVERY_S = 300
DEFAULT_START = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)


@dataclass
class HostPlan:
    host: str
    scenario: Scenario
    seed: int
    pid0: int


def _pids(plan: HostPlan, segment: int) -> list[int]:
    return [plan.pid0 + 17 * segment + g for g in range(plan.scenario.gpus)]


class _Host:
    """Collects one host's rows, through the collector's own matchers, and the
    server log's whole text (for the shapes that write it out as a file)."""

    def __init__(self, plan: HostPlan) -> None:
        self.plan = plan
        self.tables: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
        self.offset = 0
        self.log_file = f"/var/log/{plan.scenario.engine}/server.log"
        self.text: list[str] = []

    def log(self, when: dt.datetime, line: str) -> None:
        self.text.append(line)
        sig = logsig.match(line)
        if sig is not None:
            self.tables["log_lines"].append(
                {
                    "ts": when,
                    "file": self.log_file,
                    "inode": 1000 + self.plan.seed,
                    "offset": self.offset,
                    "text": line,
                    "signature": sig,
                }
            )
        self.offset += len(line.encode()) + 1

    def scrape(self, when: dt.datetime, text: str) -> None:
        for smp in metrics.parse(text).samples:
            self.tables["metric_samples"].append(
                {
                    "ts": when,
                    "source": "http://127.0.0.1:30000/metrics",
                    "name": smp.name,
                    "labels": smp.labels,
                    "value": smp.value,
                }
            )

    def write(self, out: str | Path, start: dt.datetime) -> dict[str, int]:
        writer = BucketWriter(out, self.plan.host)
        counts = {}
        for name, rows in self.tables.items():
            counts[name] = len(rows)
            # one file per table per simulated hour, as hourly batches of cron runs
            by_hour: dict[int, list[dict[str, Any]]] = {}
            for r in rows:
                by_hour.setdefault(int((r["ts"] - start).total_seconds() // 3600), []).append(r)
            for hour in sorted(by_hour):
                writer.write(name, by_hour[hour])
        return counts


def generate_host(
    plan: HostPlan,
    hours: float,
    start: dt.datetime,
    out: str | Path,
    *,
    shape: str = "native",
    files_dir: str | Path | None = None,
    tz: str = "UTC",
) -> dict[str, int]:
    """One host's trace into the bucket: the collector's tables (``native``), or the
    files another tool would have left (see :mod:`simulator.shapes`), imported."""
    h = _trace(plan, hours, start, shapes.zone(tz))
    if shape == "native":
        return h.write(out, start)
    folder = Path(files_dir or Path(str(out) + "-files")) / plan.host
    files = shapes.write_files(shape, folder, h.tables["gpu_samples"], h.text, tz)
    return shapes.import_files(
        shape, files, out, plan.host, start.year, tz, plan.scenario.total_mib
    )


def _trace(plan: HostPlan, hours: float, start: dt.datetime, zone: dt.tzinfo) -> _Host:
    s = plan.scenario
    hf = model.host_frame(s, hours, plan.seed)
    frames = [model.gpu_frame(s, hf, g, plan.seed * 100 + g) for g in range(s.gpus)]
    h = _Host(plan)
    ts = [start + dt.timedelta(seconds=int(t)) for t in hf["t"]]
    for g, f in enumerate(frames):
        for when, used, util in zip(ts, f["used_mib"], f["util"], strict=True):
            u = int(used * MIB)
            h.tables["gpu_samples"].append(
                {
                    "ts": when,
                    "gpu_index": g,
                    "gpu_uuid": f"GPU-{plan.seed:08x}-{g:04x}-sim",
                    "gpu_name": s.gpu_name,
                    "memory_total_bytes": s.total_mib * MIB,
                    "memory_used_bytes": u,
                    "memory_free_bytes": s.total_mib * MIB - u,
                    "utilization_gpu_pct": float(util),
                }
            )
    cmd = textgen.cmdline(s)
    info = parse_cmdline(cmd)
    cols = {
        c: hf[c].to_list()
        for c in ("segment", "busy", "requests", "running", "kv", "leaked_kv", "seg_req")
    }
    used_cols = [f["used_mib"].to_list() for f in frames]
    ctx_cols = [f["ctx_mib"].to_list() for f in frames]
    latency = frames[0]["latency_s"].to_list()
    alloc_cols = [f["allocated_mib"].to_list() for f in frames]
    reserved_cols = [f["reserved_mib"].to_list() for f in frames]
    requests_total = latency_sum = 0.0
    prev_seg = -1
    seg_start = ts[0]
    for i, when in enumerate(ts):
        lt = when.astimezone(zone)  # servers print local time
        seg, busy, running, kv = (
            cols["segment"][i],
            cols["busy"][i],
            cols["running"][i],
            cols["kv"][i],
        )
        pids = _pids(plan, seg)
        if seg != prev_seg:
            if prev_seg >= 0:
                old = _pids(plan, prev_seg)[0]
                if s.restart_every_s:
                    h.log(when, textgen.restart_line(s, lt, old))
                else:
                    h.log(when, textgen.oom_line(s, lt, old, 0, s.total_mib - 40))
                requests_total = latency_sum = 0.0
            seg_start = when
            for line in textgen.startup_lines(s, lt, pids[0]):
                h.log(when, line)
            prev_seg = seg
        requests_total += cols["requests"][i]
        latency_sum += cols["requests"][i] * latency[i]
        sec = i * STEP_S
        if busy:
            tput = 40.0 * running if cols["requests"][i] else 0.0
            h.log(when, textgen.batch_line(s, lt, pids[0], running, 0, kv, tput))
        if s.leak_check_log and i and cols["busy"][i - 1] and not busy and cols["leaked_kv"][i] > 0:
            h.log(
                when + dt.timedelta(seconds=5),
                textgen.leak_check_line(s, lt, cols["leaked_kv"][i]),
            )
        rss = 3.2e9 + cols["seg_req"][i] * s.rss_leak_mib_per_req * MIB
        if sec % SCRAPE_S == 0:
            h.scrape(
                when, textgen.metrics_text(s, running, 0, kv, requests_total, rss, latency_sum)
            )
            for g, pid in enumerate(pids):
                used = int((used_cols[g][i] - ctx_cols[g][i]) * MIB)
                h.tables["gpu_processes"].append(
                    {
                        "ts": when,
                        "gpu_index": g,
                        "pid": pid,
                        "used_gpu_memory_bytes": max(used - 400 * MIB, 0),
                        "vm_rss_bytes": int(rss),
                        "vm_size_bytes": int(48e9),
                        "process_start": seg_start,
                    }
                )
            if s.ctx_leak_every_s and sec >= s.ctx_leak_every_s and sec % s.ctx_leak_every_s < 60:
                age = sec % s.ctx_leak_every_s  # a pool worker, alive for its first minute
                h.tables["gpu_processes"].append(
                    {
                        "ts": when,
                        "gpu_index": 0,
                        "pid": plan.pid0 + 5000 + sec // s.ctx_leak_every_s,
                        "used_gpu_memory_bytes": int(s.ctx_mib * MIB),
                        "vm_rss_bytes": int(1.1e9),
                        "process_start": when - dt.timedelta(seconds=age),
                    }
                )
        if s.probe and sec % SCRAPE_S == 0:
            for g, pid in enumerate(pids):
                h.tables["allocator_samples"].append(
                    {
                        "ts": when,
                        "pid": pid,
                        "device": 0,  # each TP rank sees its own GPU as device 0
                        "gpu_uuid": f"GPU-{plan.seed:08x}-{g:04x}-sim",
                        "role": "scheduler" if s.engine == "sglang" else "worker",
                        "allocated_bytes": int(alloc_cols[g][i] * MIB),
                        "reserved_bytes": int(reserved_cols[g][i] * MIB),
                        "max_allocated_bytes": int(alloc_cols[g][i] * MIB),
                        "alloc_retries": 0,
                        "ooms": 0,
                    }
                )
        if s.probe_url and sec % 60 == 0:
            h.tables["http_probes"].append(
                {
                    "ts": when,
                    "url": "http://127.0.0.1:8000/v1/chat/completions",
                    "status": 200,
                    "latency_s": round(0.04 * latency[i] / s.latency_s, 5),
                }
            )
        if sec % PROCESS_EVERY_S == 0 or when == seg_start:
            workers = sec // s.ctx_leak_every_s if s.ctx_leak_every_s else 0
            for rank, pid in enumerate(pids):
                h.tables["processes"].append(
                    {
                        "ts": when,
                        "pid": pid,
                        "process_start": seg_start,
                        "cmdline": cmd,
                        "engine": info.engine,
                        "engine_version": s.engine_version if s.version_visible else None,
                        "torch_version": "2.7.1",
                        "model": info.model,
                        "mem_fraction_static": info.mem_fraction_static,
                        "gpu_memory_utilization": info.gpu_memory_utilization,
                        "disable_fast_image_processor": info.disable_fast_image_processor,
                        "tp_size": info.tp_size,
                        "tp_rank": rank,
                        "flags_json": info.flags_json(),
                    }
                )
                dev = 40 + (6 * workers if rank == 0 else 0)
                h.tables["proc_maps"].append(
                    {
                        "ts": when,
                        "pid": pid,
                        "nvidia_device_count": dev,
                        "nvidia_device_bytes": dev * 2 * MIB,
                        "nvidia_uvm_count": 2,
                        "nvidia_uvm_bytes": 4 * MIB,
                        "libcuda_count": 5,
                        "libcuda_bytes": 90 * MIB,
                        "other_count": 900,
                        "other_bytes": int(2.5e9),
                    }
                )
        if sec % 3600 == 0:
            for src in ("nvml", "procfs", "logs", "metrics"):
                h.tables["collector_runs"].append(
                    {
                        "ts": when,
                        "run_id": f"sim-{plan.host}-{i}",
                        "collector_version": collector_version,
                        "source": src,
                        "status": "ok",
                        "rows": 0,
                        "duration_s": 0.05,
                        "finished": when,
                    }
                )
    return h


def plan_fleet(scenario: str, hosts: int, seed: int) -> list[HostPlan]:
    scenarios = resolve(scenario)
    n = max(hosts, len(scenarios))
    plans = []
    for k in range(n):
        s = scenarios[k % len(scenarios)]
        idx = k // len(scenarios)
        plans.append(HostPlan(f"{s.name}-{idx:02d}", s, seed * 1000 + k, 4000 + 100 * k))
    return plans


def labels(plans: list[HostPlan], seed: int, hours: float, shape: str = "native") -> dict[str, Any]:
    """What the analyzer must find per host in ``shape``: categories the shape cannot
    decide move from ``expect`` to ``undecidable`` (with the reason), and so does a
    scenario the shape cannot tell apart at all (``undecidable_scenario``)."""
    hosts = {}
    for p in plans:
        s = p.scenario
        whole, cats = decide.undecidable(s, shape)
        allow = set(s.allow) | set(cats)
        if decide.version_unknown_suspect(s, shape):
            allow.add("known_bug.fast_image_processor")
        expect = {
            f"gpu:{g}": sorted(set(s.expect_gpus.get(g, s.expect_gpu)) - set(cats))
            for g in range(s.gpus)
        }
        expect["host"] = sorted(set(s.expect_host) - set(cats))
        hosts[p.host] = {
            "scenario": s.name,
            "expect": expect,
            "allow": sorted(allow),
            "undecidable": cats,
            "undecidable_scenario": whole,
        }
    return {"seed": seed, "hours": hours, "shape": shape, "hosts": hosts}


def simulate(
    scenario: str,
    out: str | Path,
    *,
    hosts: int = 4,
    hours: float = 6.0,
    seed: int = 7,
    start: dt.datetime = DEFAULT_START,
    labels_path: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    shape: str = "native",
    files_dir: str | Path | None = None,
    tz: str = "UTC",
) -> list[HostPlan]:
    """Simulate a fleet into ``out``. ``shape`` other than ``native`` writes each
    host's files (nvidia-smi CSV, memory loop, server log; under ``files_dir``,
    default ``<out>-files``) in the tools' formats, with local times in ``tz``,
    and imports them through the collector's importers."""
    if shape not in shapes.SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose one of {', '.join(shapes.SHAPES)}")
    if not str(out).startswith("s3://"):
        Path(out).mkdir(parents=True, exist_ok=True)
    plans = plan_fleet(scenario, hosts, seed)
    for k, p in enumerate(plans, 1):
        counts = generate_host(
            p, max(hours, p.scenario.min_hours), start, out, shape=shape, files_dir=files_dir, tz=tz
        )
        if progress:
            progress(
                f"[{k}/{len(plans)}] {p.host}: {counts['gpu_samples']} GPU samples, {counts['log_lines']} log lines"
            )
    if labels_path is not None:
        lp = Path(labels_path)
        lp.parent.mkdir(parents=True, exist_ok=True)
        tmp = lp.with_name(lp.name + ".tmp")
        doc = labels(plans, seed, hours, shape)
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        tmp.replace(lp)
    return plans
