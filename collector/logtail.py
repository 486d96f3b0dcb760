"""Tail server logs from a saved cursor, keeping the lines that match a signature.

The cursor (:mod:`collector.logcursor`) keeps, per log path, the inode, the offset
after the last complete line, and a fingerprint (a hash of the file's first bytes, up
to 4 KiB). It is
saved only after the run's files are written (``collector.atomic``), so
a crash loses at most the run in flight and never skips lines.

Nothing written to a log is lost to a rotation:

* rotation by rename (``name`` -> ``name.1``, ``name-20260101``): the old file
  is found by its inode among the rotated names and finished from the cursor,
  then any newer rotated generation, then the new file from 0. The rotated
  files read are kept in the cursor (``watch``) and read again from where they
  ended on the next runs: a server writes to its renamed log until it reopens
  it, and a copy may have been read while copytruncate was still writing it;
* ``copytruncate`` (same inode, file shorter or its first bytes changed): the
  pre-truncate tail is read from the rotated copy whose first bytes match the
  fingerprint, then the truncated file from 0; a line the copy tore (its start
  ends the copy, its rest starts the log) keeps its start, marked truncated;
* deleted and recreated on the same inode: the fingerprint differs, so the new
  file is read from 0.

The log and its rotated names are opened as one set (``collector.logrotation``:
listed, opened, listed again; retried when a rotation renamed something
meanwhile), so what is read is the set of files that existed together. Compressed rotations (``.gz``,
``.xz``, ...) are not text: they are skipped, and when the old file can only
be one of them the run says that lines may be missing. A cursor taken on an
empty file has nothing to fingerprint: rotated files written since it are
read as copies of it.

Every row carries ``line_id``, a hash of the file's first line, the offset
and the line itself; ``inode`` is that of the file where the line's
generation (its first line) was first seen, kept in ``labels`` across runs,
so a copy gives the same rows as its original. With ``host``, ``file`` and
``offset`` they are the key readers de-duplicate on: a line read twice (a run
killed between writing its files and saving its cursor) counts once, and a
new line at a reused inode and offset is never mistaken for an old one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import time
from dataclasses import dataclass, field
from typing import IO, Any

from collector import logbackdate, logsig
from collector import logcursor as lc
from collector.logcursor import Cursor
from collector.logrotation import FP_BYTES, Gen, Snap, data_at, snapshot
from collector.logrotation import head as _head

MAX_LINE = logsig.MAX_LINE_BYTES
CHUNK = 256 << 10  # a deadline is checked between chunks: each is a few ms of parsing
WATCHED = 16  # rotated files read again each run for late lines (see _finish_watched)


@dataclass
class TailResult:
    path: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    lines: int = 0
    unmatched: int = 0
    cursor: Cursor | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)  # lines missing or not read yet, and why
    stopped: bool = False  # the byte budget or the deadline ran out; the rest waits


class _Reader:
    sig: logsig.Matcher  # per file (see read)

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
        self.backlog: logbackdate.Backlog | None = None  # of the file being read, if any
        self.budget, self.deadline, self.labels = budget, deadline, labels

    def out_of_time(self) -> bool:
        return self.budget <= 0 or time.monotonic() >= self.deadline

    def read(self, f: IO[bytes], start: int, final: bool = False) -> tuple[int, bool]:
        """Complete lines from ``start``; (offset after the last one, reached the end).
        ``final``: the file never grows again (a copytruncate copy, its original already
        truncated), so a last line without its newline, torn by the copy, is kept too,
        marked truncated (its rest starts the live file).

        Rows carry the inode of the file where their generation (its first line)
        was first seen: a copy or a renamed file gives the same rows as the original.
        """
        fid, whole = lc.file_id(f)
        inode = os.fstat(f.fileno()).st_ino
        if whole:
            inode = self.labels.setdefault(fid.hex()[:16], inode)
        self.sig = logsig.Matcher()  # per file: keeps the lines that continue a kept one
        f.seek(start)
        pos = start
        buf = b""
        while True:
            if not buf:  # a hole (see _data_from) is never read
                pos = _data_from(f, pos)
            if self.out_of_time():
                if f.tell() >= os.fstat(f.fileno()).st_size:  # read to the end: not a stop
                    return pos, True
                self.res.stopped = True
                return pos, False
            chunk = f.read(min(CHUNK, self.budget))
            if not chunk:
                if final and buf:
                    self._keep(buf, pos, inode, fid, cut=True)
                    pos += len(buf)
                return pos, True
            self.budget -= len(chunk)
            buf += chunk
            if buf.startswith(b"\0"):  # zeros before a line (see _data_from) are no line
                kept = buf.lstrip(b"\0")
                pos, buf = pos + len(buf) - len(kept), kept
            *complete, buf = buf.split(b"\n")
            for raw in complete:
                self._keep(raw, pos, inode, fid)
                pos += len(raw) + 1
            if len(buf) > MAX_LINE * 4:  # a runaway line with no newline: cut it, move on
                self._keep(buf, pos, inode, fid)
                pos += len(buf)
                buf = b""

    def _keep(self, raw: bytes, pos: int, inode: int, fid: bytes, cut: bool = False) -> None:
        res = self.res
        res.lines += 1
        raw = raw.lstrip(b"\0")  # the end of a hole (see _data_from) before the line
        truncated = cut or len(raw) > MAX_LINE
        text = logsig.plain(raw[:MAX_LINE].decode(errors="replace").rstrip("\r"))  # (UTF-8)
        sig = self.sig.match(text)
        if sig is None:
            res.unmatched += 1
            return
        bl = self.backlog
        res.rows.append(
            {
                "ts": bl.ts(text) if bl is not None and pos < bl.end else self.now,
                "host": self.host,
                "file": res.path,
                "inode": inode,
                "offset": pos,
                "line_id": lc.sha1(fid, pos.to_bytes(8, "little"), raw).hex()[:24],
                "text": text,
                "signature": sig,
                "truncated": truncated,
            }
        )


def _data_from(f: IO[bytes], pos: int) -> int:
    """Where data starts at or after ``pos``, seeking ``f`` there. A server writing its log
    without O_APPEND (``server > log``) goes on at its old offset after a copytruncate,
    leaving a hole of zeros as long as the log was: it is skipped, not read (a file
    system without holes reads them as NULs, which lines shed)."""
    peek = getattr(f, "peek", None)
    if peek is None or peek(1)[:1] != b"\0":
        return pos
    data = data_at(f.fileno(), pos)
    if data > pos:
        f.seek(data)
    return data


def _find(cands: list[Gen], cur: Cursor, by_inode: bool) -> int | None:
    """The newest rotated file that is the cursor's file (same inode) or a copy of it."""
    if not by_inode and ("fp" not in cur or not cur.get("fp_len")):
        return None  # nothing to recognise a copy by
    for i in range(len(cands) - 1, -1, -1):
        g = cands[i]
        if by_inode and g.st.st_ino != cur.get("inode"):
            continue
        if g.st.st_size >= lc.offset(cur) and lc.matches(g.f, g.st.st_size, cur):
            return i
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
    first = cursor is None  # never read before: what it holds was written before now
    end = deadline if deadline is not None else math.inf
    rd = _Reader(res, now, host, max_bytes, end, labels if labels is not None else {})
    target = os.path.realpath(path) if os.path.islink(path) else None
    if cursor and cursor.get("target") and cursor["target"] != target:
        at = _finish_moved(rd, path, cursor)  # the link now points elsewhere
        if at is not None:
            res.cursor = at
            _behind(rd, path, "the file it pointed to before and the new one")
            return res
        cursor = None  # the new file is read from its start
    res = _tail(rd, path, cursor, first)
    if target and res.cursor is not None:
        res.cursor["target"] = target
    return res


def _finish_moved(rd: _Reader, path: str, cur: Cursor) -> Cursor | None:
    """A symlinked log whose link moved to another file (a container restarted, a
    logger's "current" link): the rest of the file it pointed to, where that is still
    there. Returns the cursor to resume from when stopped early."""
    old = str(cur["target"])
    try:
        f = open(old, "rb")  # noqa: SIM115 - closed below
    except OSError:
        f = None
    if f is None or os.fstat(f.fileno()).st_ino != cur.get("inode"):
        if f is not None:
            f.close()
        rd.res.notes.append(
            f"{path} now points elsewhere and the file it pointed to ({old}) is gone: "
            f"lines written there after offset {lc.offset(cur)} may be missing"
        )
        return None
    with f:
        pos, done = rd.read(f, lc.offset(cur))
        return None if done else {**lc.stamp(f, pos), "target": old}


def _tail(rd: _Reader, path: str, cursor: Cursor | None, first: bool = False) -> TailResult:
    res = rd.res
    with contextlib.ExitStack() as stack:
        snap = snapshot(path, stack)
        if snap.note:
            res.notes.append(snap.note)
        if snap.current is None:
            res.error = snap.error
            res.cursor = cursor
            return res
        f, st = snap.current.f, snap.current.st
        size = snap.size
        old: list[Cursor] = []
        if cursor:  # "prev": the one watched file of cursors saved before "watch"
            old = list(cursor.get("watch") or ([cursor["prev"]] if cursor.get("prev") else []))
        watch = _finish_watched(rd, snap, old)
        start = 0
        backlog = size if first else 0  # lines written before the collector read the log
        if cursor:
            same_inode = cursor.get("inode") == st.st_ino
            if same_inode and lc.offset(cursor) <= size and lc.matches(snap.head, size, cursor, f):
                start = lc.offset(cursor)
                backlog = int(cursor.get("backlog", 0))
                if not cursor.get("fp_len"):  # taken on an empty file: was it copied since?
                    watch += _copies_since(rd, snap, cursor, {w["inode"] for w in watch})
            else:
                at, read = _finish_old(rd, snap, path, cursor, same_inode)
                if at is not None:  # stopped inside a rotated file: resume there next run
                    res.cursor = at
                    if watch:  # and keep watching the files read before for late lines
                        res.cursor["watch"] = watch[-WATCHED:]
                    _behind(rd, path, "a rotated file and the live one")
                    return res
                watch += read
        kept = len(res.rows)
        rd.backlog = logbackdate.Backlog(f, backlog, rd.now) if backlog > start else None
        try:
            pos, _ = rd.read(f, start)
        finally:
            rd.backlog = None
        if _head(f, len(snap.head)) != snap.head:  # truncated while read: what came is another
            del res.rows[kept:]  # file's; the next run finds the copy of this one
            res.cursor = lc.at(st.st_ino, snap.head[: min(size, FP_BYTES)], start)
            pos = start
        else:
            res.cursor = lc.stamp(f, pos)
        if backlog > pos:  # the rest of the backlog is read by later runs, dated alike
            res.cursor["backlog"] = backlog
        if not res.cursor["fp_len"]:
            res.cursor["t"] = time.time()
        if watch:
            res.cursor["watch"] = watch[-WATCHED:]
        if res.stopped:
            left = os.fstat(f.fileno()).st_size - pos
            _behind(rd, path, f"{max(left, 0):,} bytes of the live file")
    return res


def _behind(rd: _Reader, path: str, left: str) -> None:
    """Say that the log is behind: its lines are not in the bucket yet (not lost)."""
    why = "the byte cap" if rd.budget <= 0 else "the deadline"
    rd.res.notes.append(
        f"{path}: behind: reading stopped at {why} with {left} still to read; "
        "the next run goes on from there"
    )


def _finish_watched(rd: _Reader, snap: Snap, watched: list[Cursor]) -> list[Cursor]:
    """Rotated files read in earlier runs, read again from where they ended: a server
    may append to its renamed log until it reopens it, and a copy may have been read
    while copytruncate was still writing it. Those no longer there are forgotten."""
    out = []
    for w in watched:
        i = _find(snap.rotated, w, by_inode=True)
        if i is not None:
            g = snap.rotated[i]
            pos, _ = rd.read(g.f, lc.offset(w))
            out.append(lc.stamp(g.f, pos))
    return out


def _finish_old(
    rd: _Reader, snap: Snap, path: str, cur: Cursor, truncated_in_place: bool
) -> tuple[Cursor | None, list[Cursor]]:
    """Finish the cursor's file, then every newer rotated generation.

    Returns (the cursor to resume from when stopped early, the rotated files read,
    to watch); a note in the result says when lines may be missing.
    """
    cands = snap.rotated
    hit = _find(cands, cur, by_inode=True)
    hit = hit if hit is not None else _find(cands, cur, by_inode=False)
    if hit is None:
        what = "truncated or rewritten" if truncated_in_place else "rotated"
        zipped = f" (compressed, not read: {', '.join(snap.packed)})" if snap.packed else ""
        rd.res.notes.append(
            f"{path} was {what} and its old file (inode {cur.get('inode')}) is not among the "
            f"rotated names{zipped}: lines written after offset {lc.offset(cur)} may be missing"
        )
        return None, []  # without the old file, no rotated generation is known to be newer
    read: list[Cursor] = []
    for k, g in enumerate(cands[hit:]):
        # copies of a file truncated since are whole: a torn last line is kept as it is
        final = truncated_in_place and g.st.st_ino != cur.get("inode")
        pos, done = rd.read(g.f, lc.offset(cur) if k == 0 else 0, final=final)
        stamp = lc.stamp(g.f, pos)
        if not done:
            return stamp, []
        read.append(stamp)
    return None, read


def _copies_since(rd: _Reader, snap: Snap, cur: Cursor, watched: set[int]) -> list[Cursor]:
    """The cursor was taken on an empty file, so no fingerprint can tell a copytruncate
    since: read the rotated files written after the cursor that are not watched already
    (copies of this file made since)."""
    t = float(cur.get("t", time.time()))
    read = []
    for g in snap.rotated:
        if g.st.st_ino not in watched and g.st.st_mtime > t and g.st.st_size > 0:
            pos, _ = rd.read(g.f, 0)
            read.append(lc.stamp(g.f, pos))
    return read
