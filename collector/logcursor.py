"""A log cursor: where the collector stopped reading a log, and how it knows the file again.

A cursor is a small dict saved as JSON in the collector's state folder: the inode, the
offset after the last complete line, and a fingerprint (a hash of the file's first bytes,
up to 4 KiB, leading NULs passed over). :mod:`collector.logtail` moves cursors along.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import IO, Any

from collector import logrotation
from collector.atomic import write_atomic
from collector.logrotation import FP_BYTES

FP_VERSION = 2  # 2: a cursor's fingerprint is of the bytes after leading NULs (logrotation.head)

Cursor = dict[str, Any]


def load_cursors(state: Path) -> dict[str, Cursor]:
    try:
        data = json.loads(state.read_text())
        return {k: v for k, v in data.items() if isinstance(v, dict)}
    except (OSError, ValueError):
        return {}


def save_cursors(state: Path, cursors: dict[str, Cursor]) -> None:
    write_atomic(state, json.dumps(cursors, sort_keys=True))


def sha1(*parts: bytes) -> bytes:
    h = hashlib.sha1(usedforsecurity=False)  # pragma: no mutate (a FIPS flag, same digest)
    for part in parts:
        h.update(part)
    return h.digest()


def at(inode: int, first: bytes, offset: int) -> Cursor:
    """A cursor at ``offset`` of the file whose first bytes (up to 4 KiB) are ``first``."""
    fp = sha1(first).hex()[:16]
    return {"inode": inode, "offset": offset, "fp": fp, "fp_len": len(first), "fp_v": FP_VERSION}


def stamp(f: IO[bytes], offset: int) -> Cursor:
    """A cursor at ``offset`` of this file as it is now."""
    st = os.fstat(f.fileno())
    return at(st.st_ino, logrotation.head(f, min(st.st_size, FP_BYTES)), offset)


def offset(cur: Cursor) -> int:
    return int(cur.get("offset", 0))


def matches(f: IO[bytes] | bytes, size: int, cur: Cursor, raw: IO[bytes] | None = None) -> bool:
    """Does this file (or these first bytes of it, ``raw`` being the file) start as the
    cursor's file did?"""
    if "fp" not in cur:
        return True  # a cursor from before fingerprints: trust the inode
    n = int(cur.get("fp_len", 0))
    if size < n:  # (a file grown since it was listed is not the cursor's)
        return False
    first = f[:n] if isinstance(f, bytes) else logrotation.head(f, n)
    if len(first) == n and sha1(first).hex()[:16] == cur["fp"]:
        return True
    raw = raw if raw is not None or isinstance(f, bytes) else f
    if cur.get("fp_v") is None and raw is not None:
        # taken before fingerprints passed over leading NULs: it hashed them
        return bool(sha1(os.pread(raw.fileno(), n, 0)).hex()[:16] == cur["fp"])
    return False


def file_id(f: IO[bytes]) -> tuple[bytes, bool]:
    """A hash of the file's first line (at most 4 KiB), and whether that line is complete."""
    start = logrotation.head(f, FP_BYTES)
    nl = start.find(b"\n")
    first = start if nl < 0 else start[: nl + 1]
    return sha1(first), nl >= 0 or len(start) == FP_BYTES
