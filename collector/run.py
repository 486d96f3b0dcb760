"""One collector run: sample for a while, then write one file per table.

Every source (NVML, procfs, each /metrics URL, the latency probe, each log,
the probe spool) is a :class:`collector.sources.Source` run under a deadline:
the per-sample ones end before the next sample is due, so a stuck endpoint
never delays the GPU samples; a source past its deadline is abandoned and its
``collector_runs`` row says why. Files are written first, the log cursor
after, so a run killed at any point loses at most itself and never skips a
log line. SIGTERM ends a run within 2 s (what was sampled is written; the logs
wait for the next run at their cursor). A run never outlives
:func:`collector.runlock.run_limit`: past it the process exits, and a lock older
than that is taken over by the next run, which says so.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from collector import __version__, exitcodes, logcursor, scrape, spool
from collector.nvml import Nvml
from collector.procfs import ProcFS
from collector.runlock import restamp, run_limit
from collector.sources import (
    SOURCES,
    Ledger,
    LogSource,
    MetricsSource,
    NvmlSource,
    ProbeSource,
    ProcfsSource,
    Source,
    SpoolSource,
    guarded,
    start,
    take,
)
from collector.writer import BucketWriter

TABLES = (
    "gpu_samples",
    "gpu_processes",
    "proc_maps",
    "processes",
    "metric_samples",
    "log_lines",
    "http_probes",
    "allocator_samples",
)
# the source a table's rows come from: a table the bucket refuses fails that source
TABLE_SOURCE = {
    "gpu_samples": "nvml",
    "gpu_processes": "nvml",
    "proc_maps": "procfs",
    "processes": "procfs",
    "metric_samples": "metrics",
    "log_lines": "logs",
    "http_probes": "http_probe",
    "allocator_samples": "allocator",
}
TERM_GRACE_S = 1.5  # after SIGTERM, the process is gone by then whatever it is doing
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
CURSORS = "log-cursors.json"
LABELS = "log-generations.json"  # first-line hash -> inode label, per log
LABELS_KEPT = 512


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
    nvml_timeout: float = 5.0
    procfs_timeout: float = 5.0
    log_timeout: float = 20.0  # all logs together; an unread rest waits at the cursor
    spool_timeout: float = 10.0
    metrics_max_bytes: int = scrape.MAX_BYTES
    log_max_bytes: int = 256 << 20

    @property
    def limit_s(self) -> float:
        """The longest this run may take, whatever its sources do."""
        # the last (or only) sample: GPUs then /proc, the HTTP sources meanwhile
        sample = max(
            self.interval,
            self.nvml_timeout + self.procfs_timeout,
            self.metrics_timeout,
            self.probe_timeout,
        )
        return run_limit(self.duration, sample, self.log_timeout + self.spool_timeout)


@dataclass
class RunResult:
    code: int
    run_id: str
    files: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (source, one-line reason)


def collect(cfg: Config, nvml_lib: Any = None, say: Callable[[str], None] | None = None) -> int:
    """Run once; returns an exit code from :mod:`collector.exitcodes`."""
    return collect_run(cfg, nvml_lib, say).code


def collect_run(
    cfg: Config, nvml_lib: Any = None, say: Callable[[str], None] | None = None
) -> RunResult:
    """Run once; every failed source is in ``failures`` and said in one line."""
    say = say or (lambda m: print(m, file=sys.stderr))
    started = dt.datetime.now(dt.UTC)
    result = RunResult(exitcodes.OK, uuid.uuid4().hex[:16])
    stop = threading.Event()
    in_main = threading.current_thread() is threading.main_thread()

    def bail(why: str) -> None:
        say(f"leakcollect: run {result.run_id}: {why}; exiting without writing the rest")
        os._exit(exitcodes.NOTHING)

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        if not stop.is_set():
            stop.set()
            t = threading.Timer(TERM_GRACE_S, bail, ("grace period after the stop signal over",))
            t.daemon = True
            t.start()

    # Ctrl-C as SIGTERM: what was sampled is written, the rest is said
    old = {sig: signal.signal(sig, on_term) for sig in STOP_SIGNALS} if in_main else {}
    restamp(cfg.state_dir, cfg.limit_s + 5)  # a lock past this is stale: see acquire_lock
    watchdog = threading.Timer(cfg.limit_s, bail, (f"still running after {cfg.limit_s:.0f} s",))
    watchdog.daemon = True
    watchdog.start()
    try:
        got = _sample_and_read(cfg, nvml_lib, stop, say)
        _write(cfg, got, started, result, say)
    finally:
        watchdog.cancel()
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return result


@dataclass
class _Gathered:
    tables: dict[str, list[dict[str, Any]]]
    cursors: dict[str, logcursor.Cursor]  # to save once the files are written
    labels: dict[str, dict[str, int]]  # to save before they are (logtail.tail)
    drained: spool.Drained  # spool files to delete once the files are written
    ledger: Ledger


def _sample_and_read(
    cfg: Config, nvml_lib: Any, stop: threading.Event, say: Callable[[str], None]
) -> _Gathered:
    ledger = Ledger()
    tables: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    nvml_src = None if cfg.no_gpu else NvmlSource(Nvml(nvml_lib), cfg.host)
    procfs = ProcFS(cfg.proc_root)
    described: set[int] = set()
    stuck: dict[str, Source] = {}  # abandoned sources: not asked again this run
    run_end = time.monotonic() + cfg.duration
    probed = False
    while not stop.is_set():
        t0 = time.monotonic()
        now = dt.datetime.now(dt.UTC)
        tick_end = t0 + cfg.interval if cfg.duration else float("inf")
        side: list[Source] = [
            MetricsSource(u, now, cfg.host, cfg.metrics_max_bytes) for u in cfg.metrics_urls
        ]
        if not probed:  # one latency probe per run
            side += [ProbeSource(u, now, cfg.host, cfg.probe_model) for u in cfg.probe_urls]
            probed = True
        side = [s for s in side if s.label not in stuck]
        timeouts = {"metrics": cfg.metrics_timeout, "http_probe": cfg.probe_timeout}
        side_deadlines = [min(t0 + timeouts[s.kind], tick_end) for s in side]
        # the side sources run in threads while the GPUs are sampled here
        pending = start(side, side_deadlines, stop)
        gpu_pids: set[int] = set()
        procs: list[dict[str, Any]] = []
        if nvml_src is not None and "nvml" not in stuck:
            nvml_src.now = now
            ((out, secs),) = guarded([nvml_src], [min(t0 + cfg.nvml_timeout, tick_end)], stop)
            take(out, secs, nvml_src, tables, ledger, stuck)
            procs = out.extra or []
            ledger.rows["nvml"] += len(procs)
            gpu_pids = {p["pid"] for p in procs}
            if not nvml_src.opened and not out.abandoned:
                say(f"leakcollect: {'; '.join(out.errors)}; collecting the other sources")
                nvml_src = None
        host_side: dict[int, dict[str, Any]] = {}
        if "procfs" not in stuck:
            psrc = ProcfsSource(procfs, now, cfg.host, gpu_pids, described)
            ((out, secs),) = guarded([psrc], [min(t0 + cfg.procfs_timeout, tick_end)], stop)
            take(out, secs, psrc, tables, ledger, stuck)
            host_side = out.extra or {}
        # NVML's view, with the host-side figures where readable
        tables["gpu_processes"] += [{**p, **host_side.get(p["pid"], {})} for p in procs]
        for src, (out, secs) in zip(side, pending(), strict=True):
            take(out, secs, src, tables, ledger, stuck)
        # the next sample is due at t0 + interval: take it only if the run is not over by then
        if stop.is_set() or cfg.duration == 0 or t0 + cfg.interval >= run_end:
            break
        stop.wait(max(0.0, t0 + cfg.interval - time.monotonic()))
    # logs and the spool once per run, at its end: everything up to now
    cursors = logcursor.load_cursors(cfg.state_dir / CURSORS)
    labels: dict[str, dict[str, int]] = logcursor.load_cursors(cfg.state_dir / LABELS)
    now = dt.datetime.now(dt.UTC)
    end: list[Source] = [
        LogSource(p, _saved(cursors, p), _saved(labels, p) or {}, now, cfg.host, cfg.log_max_bytes)
        for p in cfg.logs
    ]
    if cfg.probe_spool is not None:
        end.append(
            SpoolSource(
                cfg.probe_spool, now, cfg.host, str(cfg.proc_root), cfg.state_dir / spool.PIDMAP
            )
        )
    drained = spool.Drained()
    if stop.is_set():
        for s in end:  # nothing is lost: the next run starts at the same cursor
            ledger.fail(s.kind, f"{s.label}: not read: the run was stopped (SIGTERM or Ctrl-C)")
        end = []
    t_end = time.monotonic()
    deadlines = [t_end + (cfg.log_timeout if s.kind == "logs" else cfg.spool_timeout) for s in end]
    for src, (out, secs) in zip(end, guarded(end, deadlines, stop), strict=True):
        take(out, secs, src, tables, ledger, stuck)
        if isinstance(src, LogSource) and out.extra is not None and out.extra[0] is not None:
            cursors[src.label] = out.extra[0]
            kept = list(out.extra[1].items())[-LABELS_KEPT:]  # generations are few per day
            labels[src.label] = dict(kept)
        if isinstance(src, SpoolSource) and out.extra is not None:
            drained = out.extra
    if nvml_src is not None and nvml_src.opened and "nvml" not in stuck:
        nvml_src.nvml.close()
    return _Gathered(tables, cursors, labels, drained, ledger)


def _saved(state: dict[str, Any], path: str) -> Any:
    """What was saved for the log at ``path``; also under a relative spelling of it, as
    versions that kept --log as typed saved it (else the first run after an upgrade
    reads the whole log again, under a new name, counting every line twice)."""
    if path in state:
        return state[path]
    return next(
        (v for k, v in state.items() if not os.path.isabs(k) and os.path.abspath(k) == path),
        None,
    )


def _unwritable(cfg: Config, result: RunResult, say: Callable[[str], None], e: OSError) -> None:
    """Nothing (more) written: the bucket refused a write."""
    say(f"leakcollect: cannot write to {cfg.bucket}: {e}")
    result.code = exitcodes.NOTHING
    result.failures = [("bucket", f"cannot write to {cfg.bucket}: {e}")]


def _write(
    cfg: Config,
    got: _Gathered,
    started: dt.datetime,
    result: RunResult,
    say: Callable[[str], None],
) -> None:
    ledger, drained = got.ledger, got.drained
    now = dt.datetime.now(dt.UTC)
    try:
        if cfg.logs:  # before the rows: a repeat after a crash must label them the same
            logcursor.save_cursors(cfg.state_dir / LABELS, got.labels)
    except OSError as e:
        ledger.fail("logs", f"cannot save {LABELS} in {cfg.state_dir}: {e.strerror or e}")
    writer = BucketWriter(cfg.bucket, cfg.host)
    refused: list[str] = []  # tables the bucket refused; the others are still written
    for name, rows in got.tables.items():
        try:
            result.files += len(writer.write(name, rows))
        except OSError as e:
            refused.append(name)
            ledger.fail(TABLE_SOURCE[name], f"{name} not written to {cfg.bucket}: {e}")
    try:
        snaps = []
        for snap in drained.snapshots:
            where = writer.put_file("snapshots", now.date(), snap)
            st = snap.stat()
            snaps.append(
                {  # when the probe wrote it, not when this run found it (up to a run later)
                    "ts": dt.datetime.fromtimestamp(st.st_mtime, dt.UTC),
                    "host": cfg.host,
                    "pid": drained.snapshot_pids[snap.name],  # the host's, where known
                    "path": where,
                    "size_bytes": st.st_size,
                }
            )
            result.files += 1
        result.files += len(writer.write("allocator_snapshots", snaps))
    except OSError as e:
        refused.append("allocator_snapshots")
        ledger.fail("allocator", f"snapshots not written to {cfg.bucket}: {e}")
    try:
        if cfg.logs and "log_lines" not in refused:  # else the next run reads them again
            logcursor.save_cursors(cfg.state_dir / CURSORS, got.cursors)
    except OSError as e:  # the lines are in the bucket: the next run reads them again, deduped
        ledger.fail("logs", f"cannot save the log cursor in {cfg.state_dir}: {e.strerror or e}")
    # what the bucket refused stays in the spool for the next run; what it took goes
    if "allocator_samples" in refused:
        drained.files = []
    if "allocator_snapshots" in refused:
        drained.snapshots = []
    for f in drained.files + drained.snapshots:  # only now that the bucket has them
        try:
            f.unlink()
        except OSError as e:
            ledger.fail("allocator", f"{f}: not removed from the spool: {e}")
    finished = dt.datetime.now(dt.UTC)
    runs = [
        {
            "ts": started,
            "host": cfg.host,
            "run_id": result.run_id,
            "collector_version": __version__,
            "source": src,
            "status": ledger.status(src),
            "rows": ledger.rows[src],
            "error": "; ".join(ledger.errors[src])[:4000] or None,
            "duration_s": round(ledger.seconds[src], 4),
            "finished": finished,
        }
        for src in SOURCES
    ]
    try:
        result.files += len(writer.write("collector_runs", runs))
    except OSError as e:  # a run with no data rows meets an unusable bucket here first
        _unwritable(cfg, result, say, e)
        if result.files:  # the data is in: only the run's record is not
            result.code = exitcodes.PARTIAL
        return
    result.failures = [(k, "; ".join(ledger.errors[k])) for k in SOURCES if ledger.errors[k]]
    say(
        f"leakcollect: run {result.run_id}: {result.files} files, "
        + ", ".join(f"{r['source']} {r['status']} ({r['rows']} rows)" for r in runs)
    )
    for kind, reason in result.failures:
        say(f"leakcollect: {kind} failed: {reason[:300]}")
    result.code = exitcodes.PARTIAL if result.failures else exitcodes.OK
