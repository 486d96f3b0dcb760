"""A server log and its rotated generations, opened as one consistent set.

The folder is listed, every name that is the log or a rotation of it (``name.1``,
``name-20260101``, ``name_old``, ...) is opened, the live file's first bytes and
size are read, and the folder is listed again; when a rotation renamed anything
meanwhile, everything is closed and tried again (at most ``TRIES`` times, then the
last set is used and a note says so). Compressed rotations, by name or by their
first bytes, are named but not opened for reading.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

FP_BYTES = 4096  # the live file's first bytes kept with the set (its fingerprint)
TRIES = 5
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".Z", ".zip", ".br")
COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd", b"\x04\x22\x4d\x18")
MAGIC_BYTES = max(len(m) for m in COMPRESSED_MAGIC)
ROTATION_SEPARATORS = (".", "-", "_")


def data_at(fd: int, pos: int) -> int:
    """Where data starts at or after ``pos``: past a hole (``SEEK_DATA``), else ``pos``
    (no hole there, only a hole after it, or no ``SEEK_DATA`` here). The descriptor's
    offset is left as it was: a buffered reader on it keeps its own idea of it."""
    at = os.lseek(fd, 0, os.SEEK_CUR)
    try:
        return max(os.lseek(fd, pos, os.SEEK_DATA), pos)
    except (OSError, AttributeError):
        return pos
    finally:
        os.lseek(fd, at, os.SEEK_SET)


def head(f: IO[bytes], n: int) -> bytes:
    """The first ``n`` bytes of an open file after any leading NULs, wherever its
    position is. A log written without O_APPEND starts with a hole of zeros after a
    copytruncate (``collector.logtail``), and its copy with the zeros themselves: the
    fingerprint is of the data after them, so the next copytruncate, which leaves
    another hole, is still told from the file it was."""
    fd = f.fileno()
    first = os.pread(fd, n, 0)
    if not first.startswith(b"\0"):
        return first
    start = data_at(fd, 0)
    while True:  # the zeros of the first data block, or of a copy (no holes)
        block = os.pread(fd, 1 << 16, start)
        data = block.lstrip(b"\0")
        if data or not block:
            return os.pread(fd, n, start + len(block) - len(data)) if data else b""
        start += len(block)


@dataclass
class Gen:
    """One generation of a log, opened: what is read is this file whatever is renamed since."""

    name: str
    f: IO[bytes]
    st: os.stat_result


@dataclass
class Snap:
    current: Gen | None
    error: str | None  # why there is no current file
    rotated: list[Gen]  # plain text, oldest first
    packed: list[str]  # compressed rotations: named, not read
    note: str | None  # the set may not be consistent, and why
    head: bytes  # the live file's first bytes, consistent with the listing
    size: int  # and its size then


def _age_key(name: str, base: str) -> tuple[int, int, str]:
    """Oldest first: ``name.3`` before ``name.1``; ``name-20260101`` before ``name-20260102``."""
    suffix = name[len(base) + 1 :]
    return (0, -int(suffix), "") if suffix.isdigit() else (1, 0, suffix)


def _listing(p: Path) -> dict[str, int]:
    """Name -> inode of the log and its rotated names (empty if the folder cannot be listed)."""
    base, out = p.name, {}
    try:
        entries = list(os.scandir(p.parent))
    except OSError:
        return {}
    for e in entries:
        n = e.name
        if n == base or (
            n.startswith(base) and n[len(base) : len(base) + 1] in ROTATION_SEPARATORS
        ):
            with contextlib.suppress(OSError):  # gone since the folder was read
                if e.is_file():  # the file's inode, as fstat of the opened file gives it
                    out[n] = e.stat().st_ino
    return out


def _open_all(p: Path, path: str, names: dict[str, int]) -> tuple[dict[str, Gen], str]:
    """Open the listed names; and what to say if the live one is not among them."""
    gens: dict[str, Gen] = {}
    error = f"{path}: No such file or directory"
    if p.name not in names and p.exists():  # a FIFO, socket or folder is never tailed
        error = f"{path}: not a regular file (only regular files are tailed)"
    for name in sorted(names):
        try:
            f = open(p.parent / name, "rb")  # noqa: SIM115 - closed by the caller
        except OSError as e:
            if name == p.name:
                error = f"{path}: {e.strerror or e}"
            continue
        gens[name] = Gen(name, f, os.fstat(f.fileno()))
    return gens, error


def _compressed(g: Gen) -> bool:
    return g.name.endswith(COMPRESSED_SUFFIXES) or os.pread(
        g.f.fileno(), MAGIC_BYTES, 0
    ).startswith(COMPRESSED_MAGIC)


def snapshot(path: str, stack: contextlib.ExitStack) -> Snap:
    """Open the log at ``path`` and its rotated generations as one set; the files are
    closed when ``stack`` closes. A symlinked log (Kubernetes' /var/log/containers) is
    read where it points: that is where its rotated generations are."""
    p = Path(os.path.realpath(path))
    for attempt in range(TRIES):
        before = _listing(p)
        gens, error = _open_all(p, path, before)
        cur = gens.get(p.name)
        # the live file's first bytes and size, between the two listings: a copytruncate
        # seen truncated here made its copy before, so the copy is in the set
        first = head(cur.f, FP_BYTES) if cur else b""
        size = os.fstat(cur.f.fileno()).st_size if cur else 0
        after = _listing(p)
        stable = before == after and all(g.st.st_ino == before[n] for n, g in gens.items())
        if stable or attempt == TRIES - 1:
            break
        for g in gens.values():
            g.f.close()
    for g in gens.values():
        stack.callback(g.f.close)
    current = gens.pop(p.name, None)
    text = sorted(
        (g for g in gens.values() if not _compressed(g)), key=lambda g: _age_key(g.name, p.name)
    )
    packed = sorted(set(gens) - {g.name for g in text})
    note = None if stable else f"{path}: rotated again while it was being read ({TRIES} tries)"
    return Snap(current, None if current else error, text, packed, note, first, size)
