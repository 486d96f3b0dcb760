"""Read a log file as bounded windows of lines, so a parse never holds the whole file.

A file is cut into chunks of about ``chunk_bytes``, each ending just after a newline.
Each chunk travels in a *window*: the lines before it and after it that a record
could reach (a wrapped record joins up to ``MAX_CONTINUATION`` following lines; an
old leak check reads the line before), so a record is never split at a cut. The
parser keeps only the events on the chunk's own lines, so any chunk size gives the
same events, with the same line numbers, as one pass over the whole file.

Lines are what ``\\n`` separates (a ``\\r`` before it goes, a final line needs no
newline); invalid UTF-8 is replaced; a line containing the unit-separator byte
(0x1f) is cut there (the reader splits on it); a byte-order mark opening the file
is dropped.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from collector.logsig import GZIP_MAGIC

BOM = b"\xef\xbb\xbf"
CHUNK_BYTES = 32 << 20


@dataclass(frozen=True)
class Window:
    """``data``: a chunk of whole lines with ``before`` lines in front of it and ``after``
    lines behind it, led by one newline of its own (the reader's first row, dropped)."""

    data: bytes
    before: int
    after: int

    def chunk(self, lines: pl.Series) -> pl.Series:
        """The chunk's own lines, out of the window's decoded lines."""
        return lines.slice(self.before, lines.len() - self.before - self.after)


# polars' CSV reader as a line splitter: one column, no quoting, bad bytes replaced
LINES_CSV: dict[str, Any] = {
    "has_header": False,
    "separator": "\x1f",
    "quote_char": None,
    "truncate_ragged_lines": True,
    "encoding": "utf8-lossy",
    "infer_schema": False,
}


def decode(data: bytes) -> pl.Series:
    """The lines of a window's ``data`` (its leading newline dropped), read in Rust."""
    df = pl.read_csv(data, **LINES_CSV)
    # the leading newline makes the first row empty, so it fixes one column (a line with
    # 0x1f later is cut, not an error) and no byte-order mark is read off a mid-file line
    return df.to_series(0).slice(1).fill_null("").alias("text")


def _past(f: BinaryIO, at: int, newlines: int, size: int) -> int:
    """The offset just past the ``newlines``-th newline at or after ``at`` (or ``size``)."""
    pos = at
    f.seek(at)
    while newlines and pos < size:
        block = f.read(min(1 << 16, size - pos))
        if not block:
            break
        i = -1
        while newlines and (i := block.find(b"\n", i + 1)) >= 0:
            newlines -= 1
        if not newlines:
            return pos + i + 1
        pos += len(block)
    return min(pos, size)


def _unpacked(f: BinaryIO) -> tuple[BinaryIO, int]:
    """A gzip stream's content in an unnamed temporary file (memory stays bounded)."""
    out = tempfile.TemporaryFile()  # noqa: SIM115 - read by the caller, gone when closed
    try:
        with gzip.GzipFile(fileobj=f) as z:
            shutil.copyfileobj(z, out, 1 << 20)
    except (OSError, EOFError) as e:
        out.close()
        raise OSError(f"not a whole gzip file ({e or 'it ends early'})") from None
    return out, out.tell()


def windows(path: str | Path, chunk_bytes: int = CHUNK_BYTES, after: int = 5) -> Iterator[Window]:
    """The file as windows of about ``chunk_bytes`` each (at least one line per chunk), each
    with the line before its chunk and ``after`` lines behind it. Reads the file as it was
    when opened (lines appended meanwhile wait for the next run); a file cut shorter while
    being read is an OSError. A pipe is read whole first (it cannot be read twice); a
    gzip file is unpacked to a temporary file first."""
    with open(path, "rb") as raw, contextlib.ExitStack() as unpacked:
        f: BinaryIO = raw
        size = os.fstat(raw.fileno()).st_size
        if not stat.S_ISREG(os.fstat(raw.fileno()).st_mode):  # a pipe (/dev/stdin): all of it
            f = io.BytesIO(raw.read())
            size = len(f.getbuffer())
        if f.read(2) == GZIP_MAGIC:  # a rotated log.1.gz: read from a copy unpacked on disk
            f.seek(0)
            f, size = _unpacked(f)
            unpacked.callback(f.close)
        f.seek(0)
        start = len(BOM) if size >= len(BOM) and f.read(len(BOM)) == BOM else 0
        pos = ws = start
        while pos < size:
            end = _past(f, pos + max(chunk_bytes, 1) - 1, 1, size)
            we = _past(f, end, after, size)
            f.seek(ws - 1 if ws > start else ws)
            data = f.read(we - ws + (ws > start))
            if len(data) != we - ws + (ws > start):
                raise OSError(f"{path}: the file got shorter while being read")
            if ws == start:
                data = b"\n" + data  # data[k] is the byte at ws - 1 + k
            tail = data[end - ws + 1 :]
            n_after = tail.count(b"\n") + (1 if we == size and tail[-1:] not in (b"", b"\n") else 0)
            yield Window(data, 1 if ws < pos else 0, n_after)
            # the next window starts at the chunk's last line (the line before the next chunk)
            ws += data.rfind(b"\n", 0, end - ws)
            pos = end


def read_lines(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> pl.Series:
    """Every line of the file (empty lines kept, so line numbers hold)."""
    parts = [w.chunk(decode(w.data)) for w in windows(path, chunk_bytes)]
    return pl.concat(parts) if parts else pl.Series("text", [], dtype=pl.String)
