"""leakreport's in-process PyTorch allocator probe. Standard library only.

Loaded into every Python process of an inference server by the
``sitecustomize`` next to this file (``leakcollect probe env`` prints the
environment that puts this folder on ``PYTHONPATH``). It costs nothing until
the process has initialised CUDA through torch: torch is never imported here,
only looked up in ``sys.modules``. Then a daemon thread samples, per device,
what the caching allocator holds (allocated), what it has taken from the
driver (reserved), the peak, allocation retries, OOMs and inactive split
bytes, and appends one JSON line per device to a spool folder. Each line
carries the process's start time (``started``, the way the collector reads it
from /proc), so a PID the OS hands out again is a new process to the analyzer.
Files rotate
every minute (or at ``max_file_bytes``) and are renamed from ``.jsonl.part``
to ``.jsonl`` when closed; the collector moves closed files into the bucket.

It never raises into the host process: a spool folder that is missing and
cannot be made, read-only or full disables the probe with one warning; a
spool over its size cap drops records (counted in the next one written).

A trigger file ``snapshot-<pid>.trigger`` in the spool folder makes the probe
record allocation history for a while and dump a PyTorch memory snapshot
(``snapshot-<host>-<pid>-<time>.ns<pidns>.pickle``, the PID as the process's own
namespace has it) next to the spool files.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

ENV_SPOOL = "LEAKREPORT_PROBE_SPOOL"
ENV_INTERVAL = "LEAKREPORT_PROBE_INTERVAL_S"
ENV_MAX_MB = "LEAKREPORT_PROBE_SPOOL_MAX_MB"
STATS_FAILURES = 10  # reads of the allocator stats failing in a row that end the probe
PART = ".jsonl.part"
DONE = ".jsonl"
ROLE_WORDS = (
    ("detokenizer", "detokenizer"),
    ("tokenizer", "tokenizer"),
    ("scheduler", "scheduler"),
    ("enginecore", "engine_core"),
    ("engine_core", "engine_core"),
    ("worker", "worker"),
    ("launch_server", "server"),
    ("api_server", "server"),
    ("vllm serve", "server"),
)

Stats = Callable[[], "list[dict[str, Any]] | None"]


_USED: set[int] = set()  # devices this process has held memory on (reported from then on)


def torch_stats() -> list[dict[str, Any]] | None:
    """Per-device allocator figures, or None while torch/CUDA is not initialised."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return None
    out = []
    for d in range(cuda.device_count()):
        reserved = int(cuda.memory_reserved(d))
        if reserved == 0 and d not in _USED:
            # not (yet) used by this process. Not current_device(): that is per thread,
            # and in this thread it is 0 whatever device the process's rank uses
            continue
        _USED.add(d)
        st = cuda.memory_stats(d)
        try:
            uuid: str | None = "GPU-" + str(cuda.get_device_properties(d).uuid)
        except Exception:  # older torch: no uuid
            uuid = None
        out.append(
            {
                "device": d,
                "gpu_uuid": uuid,
                "allocated": int(cuda.memory_allocated(d)),
                "reserved": reserved,
                "max_allocated": int(cuda.max_memory_allocated(d)),
                "alloc_retries": int(st.get("num_alloc_retries", 0)),
                "ooms": int(st.get("num_ooms", 0)),
                "inactive_split": int(st.get("inactive_split_bytes.all.current", 0)),
            }
        )
    return out


def torch_snapshot_start(max_entries: int) -> None:
    import torch  # only reached when torch is already loaded

    torch.cuda.memory._record_memory_history(max_entries=max_entries)


def torch_snapshot_dump(path: str) -> None:
    import torch

    try:
        torch.cuda.memory._dump_snapshot(path)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


def start_seconds(stat: str, btime: float) -> float:
    """A process's start in Unix seconds from its ``/proc/PID/stat`` text and the boot time:
    field 22 counts clock ticks since boot (the command name before it may hold spaces).
    The collector's process table reads it the same way, so the two match."""
    ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def boot_time(proc: str = "/proc") -> float | None:
    """``btime`` of ``/proc/stat``; None where it cannot be read."""
    try:
        with open(os.path.join(proc, "stat"), encoding="utf-8") as f:
            return next((float(x.split()[1]) for x in f if x.startswith("btime ")), None)
    except (OSError, ValueError, IndexError):
        return None


def process_start() -> float | None:
    """When this process started (:func:`start_seconds`); None where /proc cannot say."""
    try:
        with open("/proc/self/stat", encoding="utf-8") as f:
            stat = f.read()
        btime = boot_time()
        return None if btime is None else start_seconds(stat, btime)
    except (OSError, ValueError, IndexError):
        return None


def pid_namespace() -> int | None:
    """This process's PID namespace (the inode of /proc/self/ns/pid): in a container the
    PID the probe knows is not the host's, which NVML and the collector give."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def role_hint(argv: list[str] | None = None, comm: str | None = None) -> str:
    """What this process is in the server, from its title and command line."""
    if comm is None:
        try:
            with open("/proc/self/comm", encoding="utf-8", errors="replace") as f:
                comm = f.read().strip()
        except OSError:
            comm = ""
    if argv is None:  # orig_argv keeps ``-m module``, which sys.argv has lost here
        argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    text = (comm + " " + " ".join(argv)).lower()
    for word, role in ROLE_WORDS:
        if word in text:
            return role
    return "other"


class Probe:
    def __init__(
        self,
        spool: str,
        interval_s: float = 5.0,
        stats: Stats = torch_stats,
        snapshot_start: Callable[[int], None] = torch_snapshot_start,
        snapshot_dump: Callable[[str], None] = torch_snapshot_dump,
        max_file_bytes: int = 256 * 1024,
        max_spool_bytes: int = 64 * 1024 * 1024,
        rotate_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.spool = spool
        self.interval_s = interval_s
        self.stats = stats
        self.snapshot_start = snapshot_start
        self.snapshot_dump = snapshot_dump
        self.max_file_bytes = max_file_bytes
        self.max_spool_bytes = max_spool_bytes
        self.rotate_s = rotate_s
        self.clock = clock
        self.warn = warn or (lambda m: sys.stderr.write(m + "\n"))
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started = process_start()
        self.pidns = pid_namespace()
        self.role = ""  # read at the first record: a server names its processes after start
        self.disabled: str | None = None
        self._failing = 0  # stats reads failed in a row
        self.dropped = 0
        self._last_dropped: tuple[float, list[dict[str, Any]]] | None = None  # (at, devices)
        self.written = 0
        self._file: Any = None
        self._path = ""
        self._opened = 0.0
        self._snap: tuple[float, str] | None = None  # (dump at, path)
        self._bad_trigger: tuple[int, int] | None = None  # (inode, mtime ns) warned about
        self._lock = threading.Lock()

    # -- spool files -------------------------------------------------------
    def _disable(self, why: str) -> None:
        if self.disabled is None:
            self.disabled = why
            self.warn(f"leakprobe: disabled in pid {self.pid}: {why}")
        self._close(rename=False)

    def _spool_bytes(self) -> int:
        total = 0
        with os.scandir(self.spool) as it:
            for e in it:
                if e.is_file(follow_symlinks=False):
                    total += e.stat(follow_symlinks=False).st_size
        return total

    def _open(self, now: float) -> bool:
        os.makedirs(self.spool, exist_ok=True)
        if self._spool_bytes() >= self.max_spool_bytes:
            return False
        base = f"alloc-{self.host}-{self.pid}-{int(now * 1000)}"
        self._path = os.path.join(self.spool, base + PART)
        self._file = open(self._path, "a", encoding="utf-8")  # noqa: SIM115 - kept open
        self._opened = now
        return True

    def _close(self, rename: bool = True) -> None:
        f, self._file = self._file, None
        if f is None:
            return
        try:
            f.close()
            if rename:
                os.replace(self._path, self._path[: -len(PART)] + DONE)
        except OSError:
            pass

    def close(self) -> None:
        if os.getpid() != self.pid:
            return  # a forked child: the parent's file is not ours to close
        with self._lock:
            self._close()
            self._keep_dropped()

    def _keep_dropped(self) -> None:
        """At exit, records dropped since the last one written (the spool full) would take
        their count with them: the last dropped sample's first record, carrying the count
        of the others, goes into a file of its own, one line past the cap."""
        if not self.dropped or self._last_dropped is None or self.disabled:
            return
        at, devices = self._last_dropped
        (rec,) = self._records(at, devices[:1], self.dropped - 1)
        path = os.path.join(self.spool, f"alloc-{self.host}-{self.pid}-{int(self.clock() * 1000)}")
        try:
            with open(path + PART, "w", encoding="utf-8") as f:
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            os.replace(path + PART, path + DONE)
            self.dropped, self._last_dropped = 0, None
        except OSError:
            pass  # the spool cannot be written at all: nothing more to do at exit

    def _records(
        self, now: float, devices: list[dict[str, Any]], dropped: int
    ) -> list[dict[str, Any]]:
        """One record per device of a sample taken at ``now``; ``dropped`` (records lost
        before it) on the first."""
        common: dict[str, Any] = {"ts": round(now, 3), "host": self.host, "pid": self.pid}
        if self.started is not None:
            common["started"] = self.started
        if self.pidns is not None:
            common["pidns"] = self.pidns
        self.role = self.role or role_hint()
        common.update(role=self.role, **self._gc())
        records = [{**common, **d} for d in devices]
        if dropped:  # counted once, on the first record
            records[0]["dropped"] = dropped
        return records

    # -- sampling ----------------------------------------------------------
    def _gc(self) -> dict[str, int]:
        st = gc.get_stats()
        return {
            "gc_collections": sum(int(g.get("collections", 0)) for g in st),
        }

    def sample_once(self) -> int:
        """Take one sample; returns the records written. Never raises."""
        if self.disabled:
            return 0
        try:
            devices = self.stats()
            self._failing = 0
        except Exception as e:  # the stats source failing is not the host's problem
            self._failing += 1
            if self._failing >= STATS_FAILURES:
                self._disable(f"reading allocator stats failed {self._failing} times: {e!r}")
            elif self._failing == 1:  # one transient failure must not end the probe
                self.warn(f"leakprobe: reading allocator stats failed in pid {self.pid}: {e!r}")
            return 0
        if not devices:
            return 0
        now = self.clock()
        with self._lock:
            try:
                self._check_snapshot(now)
                if self._file is not None and os.fstat(self._file.fileno()).st_nlink == 0:
                    # paused (SIGSTOP, docker pause) past the collector's stale_s, the
                    # file was drained and removed: what follows goes to a new one
                    self._close(rename=False)
                if self._file is not None and (
                    now - self._opened >= self.rotate_s or self._file.tell() >= self.max_file_bytes
                ):
                    self._close()
                if self._file is None and not self._open(now):
                    self.dropped += len(devices)
                    self._last_dropped = (now, devices)
                    return 0
                records = self._records(now, devices, self.dropped)
                self.dropped, self._last_dropped = 0, None
                lines = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
                self._file.write(lines)
                self._file.flush()
                self.written += len(devices)
                return len(devices)
            except OSError as e:
                self._disable(f"spool folder {self.spool}: {e}")
                return 0

    def _check_snapshot(self, now: float) -> None:
        if self._snap is not None:
            at, path = self._snap
            if now >= at:
                self._snap = None
                try:
                    self.snapshot_dump(path + ".part")
                    os.replace(path + ".part", path)
                except Exception as e:
                    self.warn(f"leakprobe: memory snapshot failed in pid {self.pid}: {e!r}")
            return
        # by PID, or by namespace and PID when asked from outside a container
        for name in (f"snapshot-{self.pid}", f"snapshot-{self.pidns}-{self.pid}"):
            trigger = os.path.join(self.spool, name + ".trigger")
            try:
                st = os.stat(trigger)
                break
            except OSError:
                continue
        else:
            return
        if self._bad_trigger == (st.st_ino, st.st_mtime_ns):
            return  # said already; a new request is a new file
        try:
            with open(trigger, encoding="utf-8") as f:
                req = json.loads(f.read() or "{}")
            os.unlink(trigger)
            seconds = float(req.get("seconds", 30))
            self.snapshot_start(int(req.get("max_entries", 100_000)))
        except Exception as e:
            self._bad_trigger = (st.st_ino, st.st_mtime_ns)
            with contextlib.suppress(OSError):
                os.unlink(trigger)
            self.warn(f"leakprobe: memory snapshot request ignored in pid {self.pid}: {e!r}")
            return
        ns = "" if self.pidns is None else f".ns{self.pidns}"  # the collector maps the PID
        name = f"snapshot-{self.host}-{self.pid}-{int(now)}{ns}.pickle"
        self._snap = (now + seconds, os.path.join(self.spool, name))

    def loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            self.sample_once()
        self.close()


_started: dict[str, Any] = {}
_hooked: list[bool] = []  # the fork hook is registered (a list: no global statement)


def start(spool: str | None = None, interval_s: float | None = None) -> Probe | None:
    """Start the probe thread in this process (once); None when not configured."""
    try:
        spool = spool or os.environ.get(ENV_SPOOL)
        if not spool or "probe" in _started:
            return _started.get("probe")
        interval = interval_s or float(os.environ.get(ENV_INTERVAL) or 5.0)
        cap = int(float(os.environ.get(ENV_MAX_MB) or 64) * 1024 * 1024)
        probe = Probe(spool, interval_s=max(interval, 0.05), max_spool_bytes=cap)
        stop = threading.Event()
        t = threading.Thread(target=probe.loop, args=(stop,), name="leakprobe", daemon=True)
        t.start()
        atexit.register(probe.close)
        _started.update(probe=probe, stop=stop)

        def in_child() -> None:  # a forked child has no thread: start a new one
            _started.clear()
            start(spool, interval)

        if not _hooked:  # once: a child inherits the hook (and this flag), so its own
            # start() must not add another, or each generation doubles the threads
            os.register_at_fork(after_in_child=in_child)
            _hooked.append(True)
        return probe
    except Exception as e:  # never break the host process
        sys.stderr.write(f"leakprobe: not started: {e!r}\n")
        return None
