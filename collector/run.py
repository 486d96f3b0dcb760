"""One collector run: sample for a while, then write one file per table.

Each source (nvml, procfs, logs, metrics) fails on its own and says why in a
``collector_runs`` row. Files are written first, the log cursor after, so a
run killed at any point loses at most itself and never skips a log line.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from collector import __version__, exitcodes, httpprobe, logtail, scrape, spool
from collector.nvml import Nvml, NvmlUnavailable
from collector.procfs import ProcFS
from collector.writer import BucketWriter

SOURCES = ("nvml", "procfs", "logs", "metrics", "allocator", "http_probe")


@dataclass
class Config:
    bucket: str
    host: str
    state_dir: Path
    interval: float = 10.0
    duration: float = 0.0  # 0 = one sample (--once)
    logs: list[str] = field(default_factory=list)
    metrics_urls: list[str] = field(default_factory=list)
    proc_root: Path = Path("/proc")
    no_gpu: bool = False
    metrics_timeout: float = 2.0
    probe_spool: str | None = None  # the allocator probe's spool folder
    probe_urls: list[str] = field(default_factory=list)
    probe_timeout: float = 10.0
    probe_model: str | None = None


class LockHeld(Exception):
    pass


def acquire_lock(state_dir: Path) -> IO[str]:
    state_dir.mkdir(parents=True, exist_ok=True)
    f = open(state_dir / "leakcollect.lock", "a+")  # noqa: SIM115 - held for the run
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip()
        f.close()
        raise LockHeld(
            f"another leakcollect run holds {state_dir / 'leakcollect.lock'} ({holder or 'unknown pid'})"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}\n")
    f.flush()
    return f


@dataclass
class _Status:
    rows: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    skipped: bool = False


def collect(cfg: Config, nvml_lib: Any = None, say: Callable[[str], None] | None = None) -> int:
    """Run once; returns an exit code from :mod:`collector.exitcodes`."""
    say = say or (lambda m: print(m, file=sys.stderr))
    started = dt.datetime.now(dt.UTC)
    run_id = uuid.uuid4().hex[:16]
    tables: dict[str, list[dict[str, Any]]] = {
        t: []
        for t in (
            "gpu_samples",
            "gpu_processes",
            "proc_maps",
            "processes",
            "metric_samples",
            "log_lines",
            "http_probes",
        )
    }
    status = {s: _Status() for s in SOURCES}
    stop = {"now": False}

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        stop["now"] = True

    old = signal.signal(signal.SIGTERM, on_term)
    nvml = None if cfg.no_gpu else Nvml(nvml_lib)
    if nvml is None:
        status["nvml"].skipped = True
    else:
        try:
            nvml.open()
        except NvmlUnavailable as e:
            status["nvml"].errors.append(str(e))
            say(f"leakcollect: {e}; collecting the other sources")
            nvml = None
    procfs = ProcFS(cfg.proc_root)
    deadline = time.monotonic() + cfg.duration
    described: set[int] = set()
    try:
        while True:
            t0 = time.monotonic()
            now = dt.datetime.now(dt.UTC)
            gpu_pids: set[int] = set()
            if nvml is not None:
                s0 = time.perf_counter()
                smp = nvml.sample(now, cfg.host)
                tables["gpu_samples"] += smp.gpus
                status["nvml"].rows += len(smp.gpus) + len(smp.processes)
                status["nvml"].errors += [e for e in smp.errors if e not in status["nvml"].errors][
                    :20
                ]
                status["nvml"].seconds += time.perf_counter() - s0
                gpu_pids = {p["pid"] for p in smp.processes}
                procs = smp.processes
            else:
                procs = []
            s0 = time.perf_counter()
            servers = set(procfs.servers())
            host_side: dict[int, dict[str, Any]] = {}
            for pid in sorted(gpu_pids | servers):
                d = procfs.describe(pid, now, cfg.host)
                if d is None:
                    continue  # vanished, or not visible from here: normal
                tables["proc_maps"].append(d["maps"])
                if pid not in described:
                    tables["processes"].append(d["process"])
                    described.add(pid)
                host_side[pid] = {**d["status"], "process_start": d["start"]}
            for p in procs:  # NVML's view, with the host-side figures where readable
                tables["gpu_processes"].append({**p, **host_side.get(p["pid"], {})})
            status["procfs"].rows = len(tables["proc_maps"]) + len(tables["processes"])
            status["procfs"].seconds += time.perf_counter() - s0
            if not cfg.metrics_urls:
                status["metrics"].skipped = True
            for url in cfg.metrics_urls:
                s0 = time.perf_counter()
                r = scrape.scrape(url, now, cfg.host, cfg.metrics_timeout)
                tables["metric_samples"] += r.rows
                status["metrics"].rows += len(r.rows)
                if r.error and r.error not in status["metrics"].errors:
                    status["metrics"].errors.append(r.error)
                status["metrics"].seconds += time.perf_counter() - s0
            if not cfg.probe_urls:
                status["http_probe"].skipped = True
            elif not tables["http_probes"]:  # one request per run
                for url in cfg.probe_urls:
                    s0 = time.perf_counter()
                    row = httpprobe.probe(
                        url, now, cfg.host, cfg.probe_timeout, model=cfg.probe_model
                    )
                    tables["http_probes"].append(row)
                    status["http_probe"].rows += 1
                    if row["status"] is None:
                        status["http_probe"].errors.append(f"{url}: {row.get('error')}")
                    status["http_probe"].seconds += time.perf_counter() - s0
            if stop["now"] or time.monotonic() + cfg.interval > deadline:
                break
            time.sleep(max(0.0, cfg.interval - (time.monotonic() - t0)))
    finally:
        if nvml is not None:
            nvml.close()
    # logs are read once per run, at its end: everything up to now
    cursor_file = cfg.state_dir / "log-cursors.json"
    cursors = logtail.load_cursors(cursor_file)
    new_cursors = dict(cursors)
    if not cfg.logs:
        status["logs"].skipped = True
    now = dt.datetime.now(dt.UTC)
    for path in cfg.logs:
        s0 = time.perf_counter()
        tr = logtail.tail(path, cursors.get(path), now, cfg.host)
        tables["log_lines"] += tr.rows
        status["logs"].rows += len(tr.rows)
        if tr.error:
            status["logs"].errors.append(tr.error)
        if tr.cursor is not None:
            new_cursors[path] = tr.cursor
        status["logs"].seconds += time.perf_counter() - s0
    drained = spool.Drained()
    if cfg.probe_spool is None:
        status["allocator"].skipped = True
    else:
        s0 = time.perf_counter()
        drained = spool.drain(cfg.probe_spool, cfg.host)
        tables["allocator_samples"] = drained.rows
        status["allocator"].rows = len(drained.rows)
        status["allocator"].errors += drained.errors
        status["allocator"].seconds = time.perf_counter() - s0
    writer = BucketWriter(cfg.bucket, cfg.host)
    written = 0
    try:
        for name, rows in tables.items():
            written += len(writer.write(name, rows))
        snaps = []
        for snap in drained.snapshots:
            where = writer.put_file("snapshots", now.date(), snap)
            pid, size = spool.snapshot_pid(snap.name), snap.stat().st_size
            snaps.append(
                {"ts": now, "host": cfg.host, "pid": pid, "path": where, "size_bytes": size}
            )
            written += 1
        written += len(writer.write("allocator_snapshots", snaps))
    except OSError as e:
        say(f"leakcollect: cannot write to {cfg.bucket}: {e}")
        signal.signal(signal.SIGTERM, old)
        return exitcodes.NOTHING
    logtail.save_cursors(cursor_file, new_cursors)
    for f in drained.files + drained.snapshots:  # only now that the bucket has them
        try:
            f.unlink()
        except OSError as e:
            status["allocator"].errors.append(f"{f}: not removed from the spool: {e}")
    finished = dt.datetime.now(dt.UTC)
    runs = []
    for src, st in status.items():
        state = "skipped" if st.skipped else ("failed" if st.errors else "ok")
        runs.append(
            {
                "ts": started,
                "host": cfg.host,
                "run_id": run_id,
                "collector_version": __version__,
                "source": src,
                "status": state,
                "rows": st.rows,
                "error": "; ".join(st.errors)[:4000] or None,
                "duration_s": round(st.seconds, 4),
                "finished": finished,
            }
        )
    writer.write("collector_runs", runs)
    signal.signal(signal.SIGTERM, old)
    failed = [r["source"] for r in runs if r["status"] == "failed"]
    say(
        f"leakcollect: run {run_id}: {written} files, "
        + ", ".join(f"{r['source']} {r['status']} ({r['rows']} rows)" for r in runs)
    )
    return exitcodes.PARTIAL if failed else exitcodes.OK
