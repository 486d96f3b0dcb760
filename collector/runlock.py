"""How long one collector run may last, and the state folder's lock that says so.

A run holds ``leakcollect.lock`` in its state folder for its whole life, with the time
it must be over by written in it. A second run finds it held and exits at once; a lock
whose holder is past that time (stuck where no signal reaches it) is taken over, with a
message, so that one stuck run never stops collection for good.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

WRITE_MARGIN_S = 15.0  # writing the files and the cursor, after the sources
LOCK = "leakcollect.lock"


def run_limit(duration: float, sample_s: float = 10.0, end_phase: float = 30.0) -> float:
    """Sampling, the last sample's sources, the logs and spool, then writing."""
    return duration + sample_s + end_phase + WRITE_MARGIN_S


class LockHeld(Exception):
    pass


def _until(holder: str) -> float | None:
    for part in holder.split():
        if part.startswith("until="):
            try:
                return float(part[len("until=") :])
            except ValueError:
                return None
    return None


def acquire_lock(
    state_dir: Path, hold_s: float = run_limit(55.0, 10.0), say: Callable[[str], None] | None = None
) -> IO[str]:
    """Hold the state dir's lock for one run (at most ``hold_s`` seconds, written in the file).

    A lock whose holder is past its own limit is taken over, with a message: that
    run is stuck where no signal reaches it, and must not stop collection for good.
    """
    say = say or (lambda m: print(m, file=sys.stderr))
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / LOCK
    for _ in range(5):
        f = open(path, "a+")  # noqa: SIM115 - held for the run
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip()
            f.close()
            until = _until(holder)
            if until is None or time.time() <= until:
                raise LockHeld(
                    f"another leakcollect run holds {path} ({holder or 'unknown pid'})"
                ) from None
            _break_stale(path, state_dir / f"{LOCK}.takeover", say)
            continue
        try:
            if os.stat(path).st_ino != os.fstat(f.fileno()).st_ino:
                f.close()  # replaced by a takeover between our open and our lock
                continue
        except FileNotFoundError:
            f.close()
            continue
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} until={time.time() + hold_s:.0f}\n")
        f.flush()
        return f
    raise LockHeld(f"{path}: still contended after 5 attempts")


def _break_stale(path: Path, guard: Path, say: Callable[[str], None]) -> None:
    """Remove a lock file whose holder is past its limit; one taker at a time."""
    with open(guard, "a") as g:
        fcntl.flock(g.fileno(), fcntl.LOCK_EX)  # held for a few system calls
        try:
            f = open(path)  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return
        with f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                return  # free now: the holder ended meanwhile
            except BlockingIOError:
                pass
            holder = f.read().strip()
            until = _until(holder)
            if until is None or time.time() <= until:
                return  # another run took it over meanwhile
            say(
                f"leakcollect: taking over {path}: its holder ({holder}) is "
                f"{time.time() - until:.0f} s past its limit and still holds it"
            )
            os.unlink(path)


def restamp(state_dir: Path, hold_s: float) -> None:
    """Write this run's own limit into the lock this process holds (if it holds one)."""
    path = state_dir / LOCK
    try:
        with open(path, "r+") as f:
            if f.read().split()[:2] == ["pid", str(os.getpid())]:
                f.seek(0)
                f.truncate()
                f.write(f"pid {os.getpid()} until={time.time() + hold_s:.0f}\n")
    except (OSError, IndexError):
        pass  # no lock (a library caller): nothing to restamp


OWN_LOG = "leakcollect.log"  # what the cron line appends a run's output to
OWN_LOG_MAX = 4 << 20  # then it becomes leakcollect.log.1 (the one before is dropped)


def rotate_own_log(state: Path, max_bytes: int = OWN_LOG_MAX) -> bool:
    """Move the cron line's log aside once it passes ``max_bytes`` (called under the lock):
    the shell opened it for this run already, so this run still writes to the moved file
    and the next run starts a new one. One old file is kept; nothing grows for good."""
    log = state / OWN_LOG
    try:
        if log.stat().st_size < max_bytes:
            return False
        os.replace(log, state / f"{OWN_LOG}.1")
    except OSError:  # no log (run by hand), or a folder it cannot change: leave it
        return False
    return True
