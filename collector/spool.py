"""Move the allocator probe's spool files into the bucket.

The probe (``collector/probe_hook/leakprobe.py``) appends JSON lines to
``alloc-*.jsonl.part`` and renames each file to ``.jsonl`` when it closes it.
A collector run reads the closed files (and ``.part`` files nobody has written
for ``stale_s``: their process died), turns them into ``allocator_samples``
rows, and deletes them only after the bucket write succeeded; the table's key
makes a repeat after a crash harmless. Memory snapshots are copied into the
bucket as files and listed in ``allocator_snapshots``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.atomic import write_atomic
from collector.probe_hook.leakprobe import DONE, ENV_SPOOL, PART
from collector.procfs import ProcFS

INT_FIELDS = {
    "allocated": "allocated_bytes",
    "reserved": "reserved_bytes",
    "max_allocated": "max_allocated_bytes",
    "alloc_retries": "alloc_retries",
    "ooms": "ooms",
    "inactive_split": "inactive_split_bytes",
    "gc_collections": "gc_collections",
    "dropped": "dropped",
}
MAX_ERRORS = 5
MAX_BYTES = 256 << 20  # read per run; one probe file is a few MiB at most


@dataclass
class Drained:
    rows: list[dict[str, Any]] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # spool files to delete once written
    snapshots: list[Path] = field(default_factory=list)
    snapshot_pids: dict[str, int] = field(default_factory=dict)  # name -> the host's PID
    errors: list[str] = field(default_factory=list)
    bad_lines: int = 0


def _record(rec: Any, host: str) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise ValueError("not a JSON object")
    row: dict[str, Any] = {
        "ts": dt.datetime.fromtimestamp(float(rec["ts"]), dt.UTC),
        "host": host,
        "pid": int(rec["pid"]),
        "process_start": None
        if rec.get("started") is None
        else dt.datetime.fromtimestamp(float(rec["started"]), dt.UTC),
        "device": int(rec["device"]),
        "gpu_uuid": None if rec.get("gpu_uuid") is None else str(rec["gpu_uuid"]),
        "role": None if rec.get("role") is None else str(rec["role"])[:64],
        "pid_ns": None if rec.get("pidns") is None else int(rec["pidns"]),
    }
    for src, dst in INT_FIELDS.items():
        v = rec.get(src)
        row[dst] = None if v is None else int(v)
    return row


PIDMAP_MAX = 4096  # container processes remembered (their last rows come after they end)


def _pid_key(r: dict[str, Any]) -> str:
    """A container process: its namespace, its PID there, its start (a namespace's inode
    can be handed out again once the namespace is gone)."""
    start = r.get("process_start")
    return _pid_prefix(r) + ("" if start is None else str(round(start.timestamp(), 2)))


def _pid_prefix(r: dict[str, Any]) -> str:
    """The part of :func:`_pid_key` every start of that namespace and PID shares."""
    return f"{r['pid_ns']}/{r['pid']}/"


def host_pids(
    rows: list[dict[str, Any]],
    proc_root: str | os.PathLike[str],
    known: dict[str, int] | None = None,
) -> None:
    """Give rows written in another PID namespace (a container) the host's PID, as NVML
    and the process table have it. ``known`` (kept by the caller between runs) remembers
    each process found: its last file is drained after it ended, when /proc no longer
    has it. ``pid_ns`` stays set on a row only where neither tells (its /proc/PID/ns not
    readable by this user, say)."""
    known = {} if known is None else known
    _host_pids(rows, proc_root, known)  # /proc first: what lives now is what it says
    for r in rows:
        if r["pid_ns"] is not None and (hp := known.get(_pid_key(r))) is not None:
            r["pid"], r["pid_ns"] = hp, None
    while len(known) > PIDMAP_MAX:
        known.pop(next(iter(known)))


def _host_pids(
    rows: list[dict[str, Any]], proc_root: str | os.PathLike[str], known: dict[str, int]
) -> None:
    proc = ProcFS(Path(proc_root))
    try:
        own: int | None = proc.pid_namespace("self")
    except OSError:
        own = None
    for r in rows:
        if r["pid_ns"] == own:
            r["pid_ns"] = None
    wanted = {r["pid_ns"] for r in rows if r["pid_ns"] is not None}
    if not wanted:
        return
    found: dict[tuple[int, int], tuple[int, dt.datetime | None]] = {}  # -> (host PID, start)
    for pid in proc.pids():
        try:
            ns = proc.pid_namespace(pid)
            if ns not in wanted:
                continue
            nspid, start = proc.nspid(pid), proc.start_time(pid)
        except OSError:  # gone, or another user's (needs root)
            continue
        if nspid:
            found[(ns, nspid[-1])] = (pid, start)
    for r in rows:
        if r["pid_ns"] is None or (got := found.get((r["pid_ns"], r["pid"]))) is None:
            continue
        hp, start = got
        mine = r.get("process_start")
        if mine is not None and start is not None and abs((mine - start).total_seconds()) > 2:
            continue  # the PID is another process's now: its own was remembered, or not
        if mine is not None:  # without its start a key could be another process's later
            key = _pid_key(r)
            known.pop(key, None)  # (kept newest last: the oldest are dropped first)
            known[key] = hp
        r["pid"], r["pid_ns"] = hp, None


PIDMAP = "container-pids.json"  # in the state folder: what host_pids found, across runs


def load_pids(path: Path) -> dict[str, int]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}  # none yet, or unreadable: found again while the processes run


def save_pids(path: Path, pids: dict[str, int]) -> list[str]:
    """Errors (none when saved): the map is knowledge, not data; a failure is said."""
    try:
        write_atomic(path, json.dumps(pids))
        return []
    except OSError as e:
        return [f"{path}: container PIDs not saved: {e}"]


def snapshot_ns(name: str) -> int | None:
    """The PID namespace in a snapshot's name (``....ns<inode>.pickle``; None: not there,
    as in a probe's before it named it)."""
    m = re.search(r"\.ns(\d+)\.pickle$", name)
    return int(m.group(1)) if m else None


def snapshot_pid(name: str) -> int:
    """``snapshot-<host>-<pid>-<time>[.ns<pidns>].pickle`` -> pid (the host may contain
    dashes): the PID in its own namespace."""
    try:
        return int(name.rsplit("-", 2)[-2])
    except (IndexError, ValueError):
        return 0


def drain(
    spool: str | os.PathLike[str],
    host: str,
    stale_s: float = 300.0,
    deadline: float | None = None,
    max_bytes: int = MAX_BYTES,
    proc_root: str | os.PathLike[str] = "/proc",
    pids: dict[str, int] | None = None,
) -> Drained:
    """Read what the probe has finished writing. Never deletes anything.

    Stops between files at ``deadline`` (``time.monotonic()``) or once
    ``max_bytes`` are read: the files not read stay in the spool for the next run.
    """
    budget = max_bytes
    out = Drained()
    folder = Path(spool)
    try:
        entries = sorted(folder.iterdir())
    except FileNotFoundError:
        # the probe makes its folder when it starts: none has started with this one, or
        # the path is mistyped. Said every run (a log that is not there fails alike)
        out.errors.append(
            f"{folder}: no such folder: no process has run the allocator probe with it "
            f"(check --probe-spool against the servers' {ENV_SPOOL}; create the folder "
            "if no server runs the probe yet)"
        )
        return out
    except OSError as e:
        out.errors.append(f"{folder}: {e}")
        return out
    now = time.time()
    for f in entries:
        name = f.name
        if name.startswith("snapshot-") and name.endswith(".pickle"):
            out.snapshots.append(f)
            continue
        if not name.startswith("alloc-"):
            continue
        if (deadline is not None and time.monotonic() > deadline) or budget <= 0:
            break  # the rest stays in the spool for the next run
        try:
            st = f.stat()
            if name.endswith(PART) and now - st.st_mtime < stale_s:
                continue  # still being written
            if not (name.endswith(DONE) or name.endswith(PART)):
                continue
            if st.st_size > max_bytes:
                out.errors.append(f"{f}: {st.st_size} bytes, over the {max_bytes} byte limit: left")
                continue
            budget -= st.st_size
            text = f.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue  # a .part closed (renamed) since the listing: read as .jsonl next run
        except OSError as e:
            out.errors.append(f"{f}: {e}")
            continue
        lines = text.split("\n")
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.rows.append(_record(json.loads(line), host))
            except (ValueError, KeyError, TypeError, OverflowError) as e:
                if i == len(lines):
                    continue  # a last line cut short when its process died
                out.bad_lines += 1
                if len(out.errors) < MAX_ERRORS:
                    out.errors.append(f"{f}:{i}: bad probe record: {e}")
        out.files.append(f)
    # a snapshot's PID too: its process writes records, so it is mapped with them
    shots: list[dict[str, Any]] = [
        {"pid": snapshot_pid(f.name), "pid_ns": snapshot_ns(f.name), "process_start": None}
        for f in out.snapshots
    ]
    host_pids(out.rows + shots, proc_root, pids)
    for f, r in zip(out.snapshots, shots, strict=True):
        if r["pid_ns"] is not None and pids:  # ended since: the newest of its records'
            prefix = _pid_prefix(r)
            r["pid"] = next(
                (v for k, v in reversed(pids.items()) if k.startswith(prefix)), r["pid"]
            )
        out.snapshot_pids[f.name] = r["pid"]
    return out
