"""Tail server logs from a saved cursor, keeping the lines that match a signature.

The cursor (inode and offset per path) is saved only after the run's files are
written, with a temp file and ``os.replace``: a crash loses at most the run in
flight and never skips lines. Rotation (a new inode) starts the new file at 0;
``copytruncate`` (the file got shorter) starts again at 0; a last line without
its newline waits for the next run; a missing file fails that log only.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector import logsig

MAX_LINE = logsig.MAX_LINE_BYTES
CHUNK = 1 << 20


@dataclass
class TailResult:
    path: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    lines: int = 0
    unmatched: int = 0
    cursor: dict[str, int] | None = None
    error: str | None = None


def load_cursors(state: Path) -> dict[str, dict[str, int]]:
    try:
        data = json.loads(state.read_text())
        return {k: v for k, v in data.items() if isinstance(v, dict)}
    except (OSError, ValueError):
        return {}


def save_cursors(state: Path, cursors: dict[str, dict[str, int]]) -> None:
    state.parent.mkdir(parents=True, exist_ok=True)
    tmp = state.with_name(f".{state.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cursors, sort_keys=True))
    os.replace(tmp, state)


def tail(
    path: str,
    cursor: dict[str, int] | None,
    now: dt.datetime,
    host: str,
    max_bytes: int = 256 << 20,
) -> TailResult:
    res = TailResult(path)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        res.error = f"{path}: {e.strerror or e}"
        res.cursor = cursor
        return res
    with f:
        st = os.fstat(f.fileno())
        offset = 0
        if cursor and cursor.get("inode") == st.st_ino and cursor.get("offset", 0) <= st.st_size:
            offset = int(cursor["offset"])  # same file, not truncated
        f.seek(offset)
        pos = offset
        buf = b""
        budget = max_bytes
        while budget > 0:
            chunk = f.read(min(CHUNK, budget))
            if not chunk:
                break
            budget -= len(chunk)
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for raw in complete:
                _keep(res, raw, pos, st.st_ino, now, host, path)
                pos += len(raw) + 1
            if len(buf) > MAX_LINE * 4:  # a runaway line with no newline: cut it, move on
                _keep(res, buf, pos, st.st_ino, now, host, path)
                pos += len(buf)
                buf = b""
        res.cursor = {"inode": st.st_ino, "offset": pos}
    return res


def _keep(
    res: TailResult, raw: bytes, pos: int, inode: int, now: dt.datetime, host: str, path: str
) -> None:
    res.lines += 1
    truncated = len(raw) > MAX_LINE
    text = raw[:MAX_LINE].decode("utf-8", errors="replace").rstrip("\r")
    sig = logsig.match(text)
    if sig is None:
        res.unmatched += 1
        return
    res.rows.append(
        {
            "ts": now,
            "host": host,
            "file": path,
            "inode": inode,
            "offset": pos,
            "text": text,
            "signature": sig,
            "truncated": truncated,
        }
    )
