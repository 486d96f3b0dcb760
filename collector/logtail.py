"""Tail server logs from a saved cursor, keeping the lines that match a signature.

The cursor keeps, per log path, the inode, the offset after the last complete
line, and a fingerprint (a hash of the file's first bytes, up to 4 KiB). It is
saved only after the run's files are written (temp file + ``os.replace``), so
a crash loses at most the run in flight and never skips lines.

Nothing written to a log is lost to a rotation:

* rotation by rename (``name`` -> ``name.1``, ``name-20260101``): the old file
  is found by its inode among the rotated names and finished from the cursor,
  then any newer rotated generation, then the new file from 0. The old file is
  kept in the cursor (``prev``) for one rotation, for lines a server writes to
  it before it reopens its log;
* ``copytruncate`` (same inode, file shorter or its first bytes changed): the
  pre-truncate tail is read from the rotated copy whose first bytes match the
  fingerprint, then the truncated file from 0;
* deleted and recreated on the same inode: the fingerprint differs, so the new
  file is read from 0.

Compressed rotations (``.gz``, ``.xz``, ...) are not text: they are skipped,
and when the old file can only be one of them the run says that lines may be
missing. Every row carries ``line_id``, a hash of the file's first line, the
offset and the line itself: with ``host``, ``file``, ``inode`` and ``offset``
it is the key readers de-duplicate on, so a line read twice (a run killed
between writing its files and saving its cursor) counts once, and a new line
at a reused inode and offset is never mistaken for an old one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from collector import logsig

MAX_LINE = logsig.MAX_LINE_BYTES
CHUNK = 1 << 20
FP_BYTES = 4096
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".Z", ".zip", ".br")
COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd", b"\x04\x22\x4d\x18")
ROTATION_SEPARATORS = (".", "-", "_")

Cursor = dict[str, Any]


@dataclass
class TailResult:
    path: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    lines: int = 0
    unmatched: int = 0
    cursor: Cursor | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)  # lines that may be missing, and why
    stopped: bool = False  # the byte budget or the deadline ran out; the rest waits


def load_cursors(state: Path) -> dict[str, Cursor]:
    try:
        data = json.loads(state.read_text())
        return {k: v for k, v in data.items() if isinstance(v, dict)}
    except (OSError, ValueError):
        return {}


def save_cursors(state: Path, cursors: dict[str, Cursor]) -> None:
    state.parent.mkdir(parents=True, exist_ok=True)
    tmp = state.with_name(f".{state.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cursors, sort_keys=True))
    os.replace(tmp, state)


def _head(f: IO[bytes], n: int) -> bytes:
    return os.pread(f.fileno(), n, 0)


def _stamp(f: IO[bytes], size: int, offset: int) -> Cursor:
    n = min(size, FP_BYTES)
    fp = hashlib.sha1(_head(f, n), usedforsecurity=False).hexdigest()[:16]
    return {"inode": os.fstat(f.fileno()).st_ino, "offset": offset, "fp": fp, "fp_len": n}


def _matches(f: IO[bytes], size: int, cur: Cursor) -> bool:
    """Does this file start with the bytes the cursor was taken on?"""
    n = int(cur.get("fp_len", 0))
    if "fp" not in cur:
        return True  # a cursor from before fingerprints: trust the inode
    if size < n:
        return False
    fp = hashlib.sha1(_head(f, n), usedforsecurity=False).hexdigest()[:16]
    return bool(fp == cur["fp"])


def _file_id(f: IO[bytes]) -> tuple[bytes, bool]:
    """A hash of the file's first line (at most 4 KiB), and whether that line is complete."""
    head = _head(f, FP_BYTES)
    nl = head.find(b"\n")
    first = head if nl < 0 else head[: nl + 1]
    return hashlib.sha1(first, usedforsecurity=False).digest(), nl >= 0 or len(head) == FP_BYTES


def _compressed(p: Path) -> bool:
    if p.name.endswith(COMPRESSED_SUFFIXES):
        return True
    try:
        with p.open("rb") as f:
            return f.read(4).startswith(COMPRESSED_MAGIC)
    except OSError:
        return False


def _age_key(name: str, base: str) -> tuple[int, int, str]:
    """Oldest first: ``name.3`` before ``name.1``; ``name-20260101`` before ``name-20260102``."""
    suffix = name[len(base) + 1 :]
    for ext in COMPRESSED_SUFFIXES:
        suffix = suffix.removesuffix(ext)
    return (0, -int(suffix), "") if suffix.isdigit() else (1, 0, suffix)


def rotated(path: str) -> tuple[list[Path], list[Path]]:
    """The rotated generations of ``path`` in its folder, oldest first: (text, compressed)."""
    p = Path(path)
    base = p.name
    try:
        names = [
            e.name
            for e in os.scandir(p.parent)
            if e.name != base
            and e.name.startswith(base)
            and e.name[len(base) : len(base) + 1] in ROTATION_SEPARATORS
            and e.is_file()
        ]
    except OSError:
        return [], []
    names.sort(key=lambda n: _age_key(n, base))
    text: list[Path] = []
    packed: list[Path] = []
    for n in names:
        (packed if _compressed(p.parent / n) else text).append(p.parent / n)
    return text, packed


class _Reader:
    def __init__(
        self,
        res: TailResult,
        now: dt.datetime,
        host: str,
        budget: int,
        deadline: float,
        labels: dict[str, int],
    ):
        self.res, self.now, self.host = res, now, host
        self.budget, self.deadline, self.labels = budget, deadline, labels
        self.sig = logsig.Matcher()

    def out_of_time(self) -> bool:
        return self.budget <= 0 or time.monotonic() >= self.deadline

    def read(self, f: IO[bytes], start: int) -> tuple[int, bool]:
        """Complete lines from ``start``; (offset after the last one, reached the end).

        Rows carry the inode of the file where their generation (its first line)
        was first seen: a copy or a renamed file gives the same rows as the original.
        """
        fid, whole = _file_id(f)
        inode = os.fstat(f.fileno()).st_ino
        if whole:
            inode = self.labels.setdefault(fid.hex()[:16], inode)
        self.sig = logsig.Matcher()  # per file: keeps the lines that continue a kept one
        f.seek(start)
        pos = start
        buf = b""
        while True:
            if self.out_of_time():
                self.res.stopped = True
                return pos, False
            chunk = f.read(min(CHUNK, self.budget))
            if not chunk:
                return pos, True
            self.budget -= len(chunk)
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for raw in complete:
                self._keep(raw, pos, inode, fid)
                pos += len(raw) + 1
            if len(buf) > MAX_LINE * 4:  # a runaway line with no newline: cut it, move on
                self._keep(buf, pos, inode, fid)
                pos += len(buf)
                buf = b""

    def _keep(self, raw: bytes, pos: int, inode: int, fid: bytes) -> None:
        res = self.res
        res.lines += 1
        truncated = len(raw) > MAX_LINE
        text = raw[:MAX_LINE].decode("utf-8", errors="replace").rstrip("\r")
        sig = self.sig.match(text)
        if sig is None:
            res.unmatched += 1
            return
        h = hashlib.sha1(fid, usedforsecurity=False)
        h.update(pos.to_bytes(8, "little"))
        h.update(raw)
        res.rows.append(
            {
                "ts": self.now,
                "host": self.host,
                "file": res.path,
                "inode": inode,
                "offset": pos,
                "line_id": h.hexdigest()[:24],
                "text": text,
                "signature": sig,
                "truncated": truncated,
            }
        )


def _find(cands: list[Path], cur: Cursor, by_inode: bool) -> tuple[int, Path] | None:
    """The newest rotated file that is the cursor's file (same inode) or a copy of it."""
    for i in range(len(cands) - 1, -1, -1):
        try:
            st = cands[i].stat()
            if by_inode and st.st_ino != cur.get("inode"):
                continue
            if not by_inode and ("fp" not in cur or not cur.get("fp_len")):
                return None  # nothing to recognise a copy by
            if st.st_size < int(cur.get("offset", 0)):
                continue
            with cands[i].open("rb") as f:
                if _matches(f, st.st_size, cur):
                    return i, cands[i]
        except OSError:
            continue
    return None


def tail(
    path: str,
    cursor: Cursor | None,
    now: dt.datetime,
    host: str,
    max_bytes: int = 256 << 20,
    deadline: float | None = None,
    labels: dict[str, int] | None = None,
) -> TailResult:
    """New complete lines of ``path`` since ``cursor`` (rotated generations first).

    ``labels`` (first-line hash -> inode, updated here) makes the ``inode`` of
    the rows a property of the lines: save it *before* the rows are written, so
    that a run repeated after a crash labels its rows as the first one did.
    """
    res = TailResult(path)
    end = deadline if deadline is not None else float("inf")
    rd = _Reader(res, now, host, max_bytes, end, labels if labels is not None else {})
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        res.error = f"{path}: {e.strerror or e}"
        res.cursor = cursor
        return res
    with f:
        st = os.fstat(f.fileno())
        prev = _finish_prev(rd, path, cursor.get("prev") if cursor else None)
        start = 0
        if cursor:
            same_inode = cursor.get("inode") == st.st_ino
            if (
                same_inode
                and int(cursor.get("offset", 0)) <= st.st_size
                and _matches(f, st.st_size, cursor)
            ):
                start = int(cursor.get("offset", 0))
                if not cursor.get("fp_len"):  # taken on an empty file: was it copied since?
                    _copies_since(rd, path, cursor, st.st_ino)
            else:
                at, prev = _finish_old(rd, path, cursor, same_inode)
                if at is not None:  # stopped inside a rotated file: resume there next run
                    res.cursor = at
                    return res
        pos, _ = rd.read(f, start)
        res.cursor = _stamp(f, os.fstat(f.fileno()).st_size, pos)
        if not res.cursor["fp_len"]:
            res.cursor["t"] = time.time()
        if prev is not None:
            res.cursor["prev"] = prev
    return res


def _finish_prev(rd: _Reader, path: str, prev: Cursor | None) -> Cursor | None:
    """Lines a server wrote to the file rotated away last time, before reopening its log."""
    if not prev:
        return None
    cands, _ = rotated(path)
    hit = _find(cands, prev, by_inode=True)
    if hit is None:
        return None  # gone (deleted or compressed) after it was read to its end
    with hit[1].open("rb") as f:
        pos, _ = rd.read(f, int(prev["offset"]))
        return _stamp(f, os.fstat(f.fileno()).st_size, pos)


def _finish_old(
    rd: _Reader, path: str, cur: Cursor, truncated_in_place: bool
) -> tuple[Cursor | None, Cursor | None]:
    """Finish the cursor's file, then every newer rotated generation.

    Returns (the cursor to resume from when stopped early, the renamed file to
    keep watching); a note in the result says when lines may be missing.
    """
    res = rd.res
    cands, packed = rotated(path)
    hit = _find(cands, cur, by_inode=True) or _find(cands, cur, by_inode=False)
    if hit is None:
        what = "truncated or rewritten" if truncated_in_place else "rotated"
        zipped = f" (compressed, not read: {', '.join(p.name for p in packed)})" if packed else ""
        res.notes.append(
            f"{path} was {what} and its old file (inode {cur.get('inode')}) is not among the "
            f"rotated names{zipped}: lines written after offset {cur.get('offset', 0)} may be missing"
        )
        return None, None  # without the old file, no rotated generation is known to be newer
    todo = [(hit[1], int(cur.get("offset", 0)))] + [(q, 0) for q in cands[hit[0] + 1 :]]
    watch: Cursor | None = None
    for p, start in todo:
        try:
            f = p.open("rb")
        except OSError as e:
            res.notes.append(f"{p}: {e.strerror or e}: lines in it may be missing")
            continue
        with f:
            st = os.fstat(f.fileno())
            pos, done = rd.read(f, start)
            stamp = _stamp(f, st.st_size, pos)
            if not done:
                return stamp, None
            if not truncated_in_place:
                watch = stamp  # the newest renamed file: the server may still append to it
    return None, watch


def _copies_since(rd: _Reader, path: str, cur: Cursor, inode: int) -> None:
    """The cursor was taken on an empty file, so no fingerprint can tell a copytruncate
    since: read the rotated files written after the cursor that are not the renamed
    file still watched (``prev``) - copies of this file made since."""
    t = float(cur.get("t", time.time()))
    skip = {inode, int((cur.get("prev") or {}).get("inode", -1))}
    cands, _ = rotated(path)
    for p in cands:
        try:
            f = p.open("rb")
        except OSError:
            continue
        with f:
            st = os.fstat(f.fileno())
            if st.st_ino in skip or st.st_mtime <= t or st.st_size == 0:
                continue
            rd.read(f, 0)
