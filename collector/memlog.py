"""Import a GPU memory log (``leakcollect import gpu-memory-log``): ``<time> <MiB>`` lines,
or what a ``date; nvidia-smi --query-gpu=memory.used --format=csv,noheader`` loop writes.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from typing import Any

from collector.datelines import date_line
from collector.importers import MIB, Imported, ImportError_, LocalTimes, open_text, zone

_MEM_ISO = re.compile(
    r"^(\S+(?:[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?)[\s,]+(\d+(?:\.\d+)?)\s*(?:MiB)?$"
)
_MEM_ONLY = re.compile(r"^(\d+(?:\.\d+)?)(?: ?MiB)?$")


def read_gpu_memory_log(
    path: str | os.PathLike[str],
    host: str,
    *,
    gpu: int = 0,
    total_mib: float | None = None,
    tz: str | dt.tzinfo | None = None,
) -> Imported:
    """``<ISO-8601 time> <MiB>`` lines, or the output of a ``date; nvidia-smi
    --query-gpu=memory.used --format=csv,noheader`` loop: a ``date`` line, then one
    memory line per GPU (GPU ``gpu``, ``gpu``+1, ...); the date line in any common locale
    (:mod:`collector.datelines`), or `date -Is`. Naive times are read in ``tz``;
    other lines (nvidia-smi errors, headers) are skipped and counted."""
    zone_ = zone(tz)
    out = Imported()
    total = int(total_mib * MIB) if total_mib else None
    when: dt.datetime | None = None
    local = LocalTimes(zone_)
    k = 0

    def add(ts: dt.datetime, index: int, mib: float) -> None:
        used = int(mib * MIB)
        out.rows.append(
            {
                "ts": ts.astimezone(dt.UTC),
                "host": host,
                "gpu_index": index,
                "memory_used_bytes": used,
                "memory_total_bytes": total,
                "memory_free_bytes": total - used if total else None,
            }
        )

    with open_text(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            d = date_line(line)
            if d:
                (stated, named), k = d, 0
                when = stated if stated.tzinfo else local.utc(stated, named)
                if named and tz is None:  # "CET" and no --tz: read as UTC, and said
                    out.note = f"date lines name the zone {named}: read as UTC (give --tz)"
                continue
            m = _MEM_ONLY.match(line)
            if m and when is not None:
                add(when, gpu + k, float(m.group(1)))
                k += 1
                continue
            m = _MEM_ISO.match(line)
            if m and not _MEM_ONLY.match(line):
                try:
                    ts = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
                except ValueError:
                    out.skip(path, n, f"unreadable time {m.group(1)!r}")
                    continue
                add(ts if ts.tzinfo else local.utc(ts), gpu, float(m.group(2)))
                continue
            out.skip(path, n, f"expected '<ISO-8601 time> <MiB>' or a date line, got {line[:80]!r}")
    if not out.rows:
        if out.skipped_examples:  # name the first line that could not be read
            # "PATH:LINE: why", where the why may itself hold ": " (it quotes the line)
            line, _, why = out.skipped_examples[0][len(f"{path}:") :].partition(": ")
            raise ImportError_(path, int(line), f"no samples; {why}")
        raise ImportError_(path, 1, "no samples")
    return out


def gpu_memory_log(
    path: str | os.PathLike[str],
    host: str,
    *,
    gpu: int = 0,
    total_mib: float | None = None,
    tz: str | dt.tzinfo | None = None,
) -> list[dict[str, Any]]:
    """The rows of :func:`read_gpu_memory_log`."""
    return read_gpu_memory_log(path, host, gpu=gpu, total_mib=total_mib, tz=tz).rows
