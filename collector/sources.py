"""The sources of a collector run behind one small interface, each under a deadline.

A :class:`Source` has ``collect(deadline)`` (``deadline`` on ``time.monotonic()``)
and returns an :class:`Outcome`: rows per table and one-line errors. ``guarded``
runs sources in worker threads and waits for them until their deadline or a
stop request; a source still running then is *abandoned*: its ``cancel()`` is
called (a socket is shut), its thread is left to die with the process, and its
outcome says so. The run's own thread, which samples the GPUs, never blocks on
a source.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector import httpprobe, logcursor, logtail, scrape, spool
from collector.nvml import Nvml, NvmlUnavailable
from collector.procfs import ProcFS

WIND_DOWN, WIND_DOWN_MAX_S = 0.25, 2.0  # the margin a winding-down source is given
SOURCES = ("nvml", "procfs", "logs", "metrics", "allocator", "http_probe")


@dataclass
class Outcome:
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    abandoned: bool = False
    extra: Any = None  # what the run needs besides rows (a log cursor, spool files, pids)

    def add(self, table: str, rows: list[dict[str, Any]]) -> None:
        self.rows.setdefault(table, []).extend(rows)

    @property
    def count(self) -> int:
        return sum(len(r) for r in self.rows.values())


class Source:
    """One thing a run reads. ``kind`` names it in ``collector_runs``; ``label`` in errors."""

    kind = ""
    # collect() checks its deadline between steps and hands back what it has: it is told
    # a deadline earlier than the guard's, so what it read arrives before the guard gives up
    winds_down = False

    def __init__(self, label: str, now: dt.datetime, host: str) -> None:
        self.label, self.now, self.host = label, now, host

    def collect(self, deadline: float) -> Outcome:
        raise NotImplementedError

    def cancel(self) -> None:
        """Unblock a ``collect`` running past its deadline (best effort)."""


def guarded(
    sources: list[Source], deadlines: list[float], stop: threading.Event
) -> list[tuple[Outcome, float]]:
    """Run the sources side by side; (outcome, seconds) each, by its deadline at the latest."""
    boxes: list[dict[str, Any]] = [{} for _ in sources]
    threads = []
    t0 = time.monotonic()
    for src, dl, box in zip(sources, deadlines, boxes, strict=True):

        def work(src: Source = src, dl: float = dl, box: dict[str, Any] = box) -> None:
            s0 = time.monotonic()
            soft = dl - min(WIND_DOWN * (dl - s0), WIND_DOWN_MAX_S) if src.winds_down else dl
            try:
                out = src.collect(soft)
            except Exception as e:  # a source fails alone, whatever it raises
                out = Outcome(errors=[f"{src.label}: {type(e).__name__}: {e}"])
            box["secs"] = time.monotonic() - s0
            box["out"] = out

        t = threading.Thread(target=work, daemon=True, name=f"leakcollect-{src.kind}")
        t.start()
        threads.append(t)
    out = []
    for src, dl, box, t in zip(sources, deadlines, boxes, threads, strict=True):
        while t.is_alive() and not stop.is_set():
            left = dl - time.monotonic()
            if left <= 0:
                break
            t.join(min(left, 0.05))
        if "out" in box:
            out.append((box["out"], box["secs"]))
            continue
        src.cancel()
        why = (
            "the run was stopped (SIGTERM or Ctrl-C)"
            if stop.is_set()
            else "no answer by its deadline"
        )
        waited = time.monotonic() - t0
        err = f"{src.label}: abandoned after {waited:.1f} s: {why}"
        out.append((Outcome(errors=[err], abandoned=True), waited))
    return out


def start(
    sources: list[Source], deadlines: list[float], stop: threading.Event
) -> Callable[[], list[tuple[Outcome, float]]]:
    """Start ``guarded`` in a thread; the returned call waits for its answer."""
    box: dict[str, list[tuple[Outcome, float]]] = {}
    t = threading.Thread(target=lambda: box.setdefault("r", guarded(sources, deadlines, stop)))
    t.daemon = True
    t.start()

    def wait() -> list[tuple[Outcome, float]]:
        t.join()  # guarded returns by the last deadline, or at once on stop
        return box["r"]

    return wait


def take(
    out: Outcome,
    secs: float,
    src: Source,
    tables: dict[str, list[dict[str, Any]]],
    ledger: Ledger,
    stuck: dict[str, Source],
) -> None:
    for t, rows in out.rows.items():
        tables[t] += rows
    ledger.add(src.kind, out, secs)
    if out.abandoned:
        stuck[src.label] = src


class Ledger:
    """Rows, errors and time per source kind: the ``collector_runs`` rows of a run."""

    def __init__(self) -> None:
        self.rows = dict.fromkeys(SOURCES, 0)
        self.errors: dict[str, list[str]] = {s: [] for s in SOURCES}
        self.seconds = dict.fromkeys(SOURCES, 0.0)
        self.ran: set[str] = set()

    def add(self, kind: str, out: Outcome, seconds: float) -> None:
        self.ran.add(kind)
        self.rows[kind] += out.count
        self.seconds[kind] += seconds
        errs = self.errors[kind]
        errs += [e for e in out.errors if e not in errs][: max(0, 20 - len(errs))]

    def fail(self, kind: str, reason: str) -> None:
        self.ran.add(kind)
        if reason not in self.errors[kind]:
            self.errors[kind].append(reason)

    def status(self, kind: str) -> str:
        return "failed" if self.errors[kind] else ("ok" if kind in self.ran else "skipped")


class NvmlSource(Source):
    """Device and per-process memory. ``extra``: NVML's process rows (merged with /proc later)."""

    kind = "nvml"

    def __init__(self, nvml: Nvml, host: str) -> None:
        super().__init__("nvml", dt.datetime.now(dt.UTC), host)
        self.nvml = nvml
        self.opened = False

    def collect(self, deadline: float) -> Outcome:
        out = Outcome(extra=[])
        if not self.opened:
            try:
                self.nvml.open()
            except NvmlUnavailable as e:
                out.errors.append(str(e))
                return out
            self.opened = True
        smp = self.nvml.sample(self.now, self.host)
        out.add("gpu_samples", smp.gpus)
        out.extra = smp.processes
        out.errors += smp.errors[:20]
        return out


class ProcfsSource(Source):
    """``/proc`` of the GPU processes and the inference servers. ``extra``: host-side figures per pid."""

    kind = "procfs"
    winds_down = True

    def __init__(
        self, procfs: ProcFS, now: dt.datetime, host: str, gpu_pids: set[int], described: set[int]
    ) -> None:
        super().__init__("procfs", now, host)
        self.procfs, self.gpu_pids, self.described = procfs, gpu_pids, described

    def collect(self, deadline: float) -> Outcome:
        out = Outcome(extra={})
        out.rows = {"proc_maps": [], "processes": []}
        try:
            servers = self.procfs.servers()
        except OSError as e:
            out.errors.append(f"procfs: cannot list {self.procfs.root}: {e.strerror or e}")
            return out
        for pid in sorted(self.gpu_pids | set(servers)):
            if time.monotonic() > deadline:
                out.errors.append(f"procfs: stopped at the deadline before pid {pid}")
                break
            d = self.procfs.describe(pid, self.now, self.host)
            if d is None:
                continue  # vanished, or not visible from here: normal
            if d["maps"] is not None:
                out.rows["proc_maps"].append(d["maps"])
            elif pid in servers:  # the server watched; another user's GPU job is not ours
                out.errors.append(f"procfs: {d['maps_error']}")
            if pid not in self.described:
                out.rows["processes"].append(d["process"])
                self.described.add(pid)
            out.extra[pid] = {**d["status"], "process_start": d["start"]}
        return out


class MetricsSource(Source):
    kind = "metrics"

    def __init__(self, url: str, now: dt.datetime, host: str, max_bytes: int) -> None:
        super().__init__(url, now, host)
        self.max_bytes = max_bytes
        self.fetch = scrape.Fetch()

    def collect(self, deadline: float) -> Outcome:
        left = max(0.0, deadline - time.monotonic())
        r = scrape.scrape(
            self.label, self.now, self.host, left, max_bytes=self.max_bytes, fetch=self.fetch
        )
        return Outcome(rows={"metric_samples": r.rows}, errors=[r.error] if r.error else [])

    def cancel(self) -> None:
        self.fetch.cancel()


class ProbeSource(Source):
    kind = "http_probe"

    def __init__(self, url: str, now: dt.datetime, host: str, model: str | None) -> None:
        super().__init__(url, now, host)
        self.model = model
        self.fetch = scrape.Fetch()

    def collect(self, deadline: float) -> Outcome:
        left = max(0.0, deadline - time.monotonic())
        row = httpprobe.probe(
            self.label, self.now, self.host, left, model=self.model, fetch=self.fetch
        )
        errors = [f"{self.label}: {row.get('error')}"] if row["status"] is None else []
        return Outcome(rows={"http_probes": [row]}, errors=errors)

    def cancel(self) -> None:
        self.fetch.cancel()


class LogSource(Source):
    """New lines of one log. ``extra``: (the cursor to save once the run's files are
    written, the generation labels to save before they are; see ``logtail.tail``)."""

    kind = "logs"
    winds_down = True

    def __init__(
        self,
        path: str,
        cursor: logcursor.Cursor | None,
        labels: dict[str, int],
        now: dt.datetime,
        host: str,
        max_bytes: int,
    ) -> None:
        super().__init__(path, now, host)
        self.cursor, self.max_bytes = cursor, max_bytes
        self.labels = dict(labels)  # a copy: an abandoned read cannot change the run's

    def collect(self, deadline: float) -> Outcome:
        tr = logtail.tail(
            self.label, self.cursor, self.now, self.host, self.max_bytes, deadline, self.labels
        )
        out = Outcome(rows={"log_lines": tr.rows}, extra=(tr.cursor, self.labels))
        # a read stopped by the byte cap or the deadline says the log is behind (a note):
        # nothing is lost, the rest waits at the cursor
        out.errors += ([tr.error] if tr.error else []) + tr.notes
        return out


class SpoolSource(Source):
    """The allocator probe's spool. ``extra``: the :class:`spool.Drained` (files to delete later)."""

    kind = "allocator"
    winds_down = True

    def __init__(
        self,
        folder: str,
        now: dt.datetime,
        host: str,
        proc_root: str = "/proc",
        state: Path | None = None,
    ) -> None:
        super().__init__(folder, now, host)
        self.proc_root, self.state = proc_root, state

    def collect(self, deadline: float) -> Outcome:
        pids = spool.load_pids(self.state) if self.state else {}
        before = dict(pids)
        drained = spool.drain(
            self.label, self.host, deadline=deadline, proc_root=self.proc_root, pids=pids
        )
        if self.state and pids != before:
            drained.errors += spool.save_pids(self.state, pids)
        return Outcome(
            rows={"allocator_samples": drained.rows}, errors=drained.errors, extra=drained
        )
