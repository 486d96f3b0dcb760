"""Import data people already have into the same trace tables.

- ``nvidia-smi --query-gpu=... --format=csv [-l N]`` output: units in headers and
  values, ``[N/A]`` / ``Not Supported``, any column order, header once or repeated;
- ``<ISO-8601 time> <MiB>`` lines written by a cron loop around nvidia-smi;
- a whole past server log (lines kept by signature, with the line's own time).

Bad input raises :class:`ImportError_` naming the file and line.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

from collector import logsig

MIB = 1 << 20
_NULLS = {
    "[n/a]",
    "n/a",
    "not supported",
    "[not supported]",
    "",
    "[unknown error]",
    "unknown error",
}
_FIELDS = {
    "timestamp": "ts",
    "index": "gpu_index",
    "uuid": "gpu_uuid",
    "gpu_uuid": "gpu_uuid",
    "name": "gpu_name",
    "gpu_name": "gpu_name",
    "memory.total": "memory_total_bytes",
    "memory.used": "memory_used_bytes",
    "memory.free": "memory_free_bytes",
    "memory.reserved": "memory_reserved_bytes",
    "utilization.gpu": "utilization_gpu_pct",
    "utilization.memory": "utilization_memory_pct",
}
_UNITS = {
    "b": 1,
    "kib": 1 << 10,
    "mib": MIB,
    "gib": 1 << 30,
    "kb": 1 << 10,
    "mb": MIB,
    "gb": 1 << 30,
}


class ImportError_(ValueError):  # noqa: N801 - the builtin name is taken
    def __init__(self, path: str | os.PathLike[str], line: int, msg: str) -> None:
        super().__init__(f"{path}:{line}: {msg}")


def _column(header: str) -> tuple[str | None, str | None]:
    m = re.match(r"\s*([\w.]+)\s*(?:\[([^\]]*)\])?\s*$", header)
    if not m:
        return None, None
    return _FIELDS.get(m.group(1).lower()), (m.group(2) or "").strip().lower() or None


def _value(field: str, raw: str, unit: str | None, path: str, line: int) -> Any:
    v = raw.strip()
    if v.lower() in _NULLS:
        return None
    if field == "ts":
        for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
            try:
                return dt.datetime.strptime(v, fmt).replace(tzinfo=dt.UTC)
            except ValueError:
                pass
        try:
            t = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
            return t if t.tzinfo else t.replace(tzinfo=dt.UTC)
        except ValueError:
            raise ImportError_(path, line, f"unreadable timestamp {v!r}") from None
    if field in ("gpu_uuid", "gpu_name"):
        return v
    m = re.match(r"^([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%]*)$", v)
    if not m:
        raise ImportError_(path, line, f"unreadable {field} value {v!r}")
    num, vunit = float(m.group(1)), (m.group(2) or unit or "").lower()
    if field == "gpu_index":
        return int(num)
    if field.endswith("_bytes"):
        return int(num * _UNITS.get(vunit, MIB))  # nvidia-smi reports MiB when nounits
    return num


def nvidia_smi_csv(
    path: str | os.PathLike[str],
    host: str,
    *,
    start: dt.datetime | None = None,
    interval: float = 1.0,
    columns: str | None = None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    header: list[tuple[str | None, str | None]] | None = None
    if columns:
        header = [_column(c) for c in columns.split(",")]
    t0 = start or dt.datetime.fromtimestamp(os.path.getmtime(path), dt.UTC)
    sample = -1
    seen_in_sample: set[int] = set()
    position = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(",")]
            cols = [_column(p) for p in parts]
            if any(c[0] for c in cols) and not any(re.match(r"^[-+]?\d", p) for p in parts):
                header = cols  # a (repeated) header line
                continue
            if header is None:
                raise ImportError_(
                    path, n, "data before any header line (give --columns for noheader output)"
                )
            if len(parts) != len(header):
                raise ImportError_(path, n, f"{len(parts)} fields, header has {len(header)}")
            rec: dict[str, Any] = {"host": host}
            for (fld, unit), raw in zip(header, parts, strict=True):
                if fld:
                    rec[fld] = _value(fld, raw, unit, str(path), n)
            # a new sample starts when a GPU index comes round again (-l N repeats rows)
            idx = rec.get("gpu_index")
            if sample < 0 or (idx if idx is not None else position) in seen_in_sample:
                sample, seen_in_sample, position = sample + 1, set(), 0
            if idx is None:
                idx = position
            seen_in_sample.add(idx)
            position += 1
            rec["gpu_index"] = idx
            if rec.get("ts") is None:
                rec["ts"] = t0 + dt.timedelta(seconds=interval * sample)
            if (
                rec.get("memory_free_bytes") is None
                and rec.get("memory_total_bytes") is not None
                and rec.get("memory_used_bytes") is not None
            ):
                rec["memory_free_bytes"] = rec["memory_total_bytes"] - rec["memory_used_bytes"]
            rows.append(rec)
    if not rows:
        raise ImportError_(path, 1, "no data rows")
    return rows


def gpu_memory_log(
    path: str | os.PathLike[str], host: str, *, gpu: int = 0, total_mib: float | None = None
) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(
                r"^(\S+(?:[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?)[\s,]+(\d+(?:\.\d+)?)\s*(?:MiB)?$",
                line,
            )
            if not m:
                raise ImportError_(path, n, f"expected '<ISO-8601 time> <MiB>', got {line[:80]!r}")
            try:
                ts = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
            except ValueError:
                raise ImportError_(path, n, f"unreadable time {m.group(1)!r}") from None
            ts = ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC)
            used = int(float(m.group(2)) * MIB)
            total = int(total_mib * MIB) if total_mib else None
            rows.append(
                {
                    "ts": ts.astimezone(dt.UTC),
                    "host": host,
                    "gpu_index": gpu,
                    "memory_used_bytes": used,
                    "memory_total_bytes": total,
                    "memory_free_bytes": total - used if total else None,
                }
            )
    if not rows:
        raise ImportError_(path, 1, "no samples")
    return rows


_TS_FULL = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})")
_TS_MD = re.compile(r"\b(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d{2})-(\d{2}) (\d{2}:\d{2}:\d{2})")


def _line_time(text: str, year: int) -> dt.datetime | None:
    m = _TS_FULL.search(text[:120])
    if m:
        return dt.datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}+00:00")
    m = _TS_MD.search(text[:160])
    if m:
        try:
            return dt.datetime.fromisoformat(f"{year}-{m.group(1)}-{m.group(2)}T{m.group(3)}+00:00")
        except ValueError:
            return None
    return None


def server_log(
    path: str | os.PathLike[str], host: str, *, year: int | None = None
) -> list[dict[str, Any]]:
    p = Path(path)
    mtime = dt.datetime.fromtimestamp(p.stat().st_mtime, dt.UTC)
    year = year or mtime.year
    inode = p.stat().st_ino
    rows, offset, last = [], 0, None
    with open(p, "rb") as f:
        for raw in f:
            text = raw[: logsig.MAX_LINE_BYTES].decode("utf-8", errors="replace").rstrip("\r\n")
            when = _line_time(text, year) or last
            last = when or last
            sig = logsig.match(text)
            if sig is not None:
                rows.append(
                    {
                        "ts": when or mtime,
                        "host": host,
                        "file": str(p),
                        "inode": inode,
                        "offset": offset,
                        "text": text,
                        "signature": sig,
                        "truncated": len(raw) > logsig.MAX_LINE_BYTES,
                    }
                )
            offset += len(raw)
    return rows
