"""Import data people already have into the same trace tables.

- ``nvidia-smi --query-gpu=... --format=csv [-l N]`` output: units in headers and
  values, ``[N/A]`` / ``Not Supported``, any column order, header once or repeated;
  a file that also holds other text (banners, tables, blank lines) keeps its valid
  rows and counts the rest; a ``--query-compute-apps`` section becomes process rows;
- ``<ISO-8601 time> <MiB>`` lines, or a ``date`` + ``nvidia-smi --query-gpu=memory.used``
  loop's output;
- a whole past server log (lines kept by signature, with the line's own time).

nvidia-smi and the servers print local time: ``tz`` names the zone (default UTC).
A file with nothing readable raises :class:`ImportError_` naming the file and line.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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
    # --query-compute-apps
    "pid": "pid",
    "process_name": "process_name",
    "used_gpu_memory": "used_gpu_memory_bytes",
    "used_memory": "used_gpu_memory_bytes",
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
        self.msg = msg


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
                return dt.datetime.strptime(v, fmt)  # local time: the caller applies tz
            except ValueError:
                pass
        try:
            return dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise ImportError_(path, line, f"unreadable timestamp {v!r}") from None
    if field in ("gpu_uuid", "gpu_name", "process_name"):
        return v
    m = re.match(r"^([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%]*)$", v)
    if not m:
        raise ImportError_(path, line, f"unreadable {field} value {v!r}")
    num, vunit = float(m.group(1)), (m.group(2) or unit or "").lower()
    if field in ("gpu_index", "pid"):
        return int(num)
    if field.endswith("_bytes"):
        return int(num * _UNITS.get(vunit, MIB))  # nvidia-smi reports MiB when nounits
    return num


@dataclass
class Imported:
    """What an importer kept, and what it skipped (``file:line: why``, first few)."""

    rows: list[dict[str, Any]] = field(default_factory=list)  # gpu_samples (or log_lines)
    processes: list[dict[str, Any]] = field(default_factory=list)  # gpu_processes
    skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)
    note: str = ""  # how rows were placed in time, where the file did not say
    written: int = 0  # rows already handed on (and gone from ``rows``) while reading
    steps_back: int = 0  # a GPU's sample stamped before its previous one (a clock step)
    first_step_back: str = ""  # where, and by how much
    repeated: int = 0  # a GPU's sample stamped as its previous one

    def stamped(self, path: str | os.PathLike[str], line: int, ts: Any, prev: Any) -> None:
        """Note a GPU sample at ``ts`` whose previous one was at ``prev``."""
        if not isinstance(ts, dt.datetime) or not isinstance(prev, dt.datetime):
            return
        if ts == prev:
            self.repeated += 1
        elif ts < prev - dt.timedelta(seconds=1):
            self.steps_back += 1
            if not self.first_step_back:
                back = (prev - ts).total_seconds()
                by = f"{back / 60:,.0f} min" if back >= 120 else f"{back:,.0f} s"
                self.first_step_back = f"{path}:{line}, by {by}"

    def skip(self, path: str | os.PathLike[str], line: int, why: str) -> None:
        self.skipped += 1
        if len(self.skipped_examples) < 5:
            self.skipped_examples.append(f"{path}:{line}: {why}")

    def summary(self) -> str:
        """One line for stderr: counts, then the first lines skipped and why."""
        text = f"kept {self.written + len(self.rows)} rows"
        text += f" ({self.note})" if self.note else ""
        if self.processes:
            text += f" and {len(self.processes)} process rows"
        if self.steps_back:
            text += (
                f"; the time went back ({self.steps_back} rows, first at "
                f"{self.first_step_back}): a clock step? Samples are read at the times "
                "they state, so a rate across it is off"
            )
        if self.repeated:
            text += f"; {self.repeated} samples repeat the one before (read once)"
        if self.skipped:
            text += f"; skipped {self.skipped} lines (" + "; ".join(self.skipped_examples)
            text += ", ..." if self.skipped > len(self.skipped_examples) else ""
            text += ")"
        return text


_FIXED = re.compile(r"(?:UTC|GMT)?([+-])(\d\d?)(?::?(\d\d))?", re.I)


def fixed_offset(tz: str) -> str | None:
    """A fixed offset (``+02:00``, ``-0530``, ``UTC+2``) as ``+HH:MM``; None for a name."""
    m = _FIXED.fullmatch(tz.strip())
    if not m or int(m.group(2)) > 23 or int(m.group(3) or 0) > 59:
        return None
    return f"{m.group(1)}{int(m.group(2)):02d}:{m.group(3) or '00'}"


def zone(tz: str | dt.tzinfo | None) -> dt.tzinfo:
    """The zone naive times are read in (nvidia-smi and servers print local time): an
    IANA name, or a fixed offset such as ``+02:00``."""
    if tz is None or isinstance(tz, dt.tzinfo):
        return tz or dt.UTC
    if (off := fixed_offset(tz)) is not None:
        sign = -1 if off[0] == "-" else 1
        delta = dt.timedelta(hours=int(off[1:3]), minutes=int(off[4:6]))
        return dt.UTC if not delta else dt.timezone(sign * delta)
    try:
        return dt.UTC if tz.upper() in ("UTC", "Z") else ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {tz!r} (use a name such as Europe/Berlin, or an offset such as +02:00)"
        ) from None


def open_text(path: str | os.PathLike[str]) -> io.TextIOWrapper:
    """A file for reading as text: UTF-16 where it opens with that byte-order mark
    (PowerShell's ``>`` writes one), else UTF-8 (its mark dropped); bad bytes replaced.
    Opened once and the mark peeked at, so a pipe (``/dev/stdin``) loses nothing."""
    raw = open(path, "rb")  # noqa: SIM115 - handed to the wrapper, closed with it
    utf16 = raw.peek(2)[:2] in (b"\xff\xfe", b"\xfe\xff")
    return io.TextIOWrapper(raw, encoding="utf-16" if utf16 else "utf-8-sig", errors="replace")


class LocalTimes:
    """A file's naive local times, read in order. In the hour a DST fall-back repeats, a
    zone name on the line (CEST, CET) says which pass it is; else a time more than
    :data:`JITTER` before the latest one so far starts the second pass, which lasts
    while the times stay in that hour."""

    JITTER = dt.timedelta(minutes=2)

    def __init__(self, zone: dt.tzinfo) -> None:
        self.zone, self.latest = zone, dt.datetime.min.replace(tzinfo=dt.UTC)
        self.second = False

    def utc(self, naive: dt.datetime, name: str | None = None) -> dt.datetime:
        first, again = (naive.replace(tzinfo=self.zone, fold=f) for f in (0, 1))
        t, t_again = first.astimezone(dt.UTC), again.astimezone(dt.UTC)
        if t == t_again:  # not in a repeated hour
            self.second = False
        elif name is not None and name in (first.tzname(), again.tzname()):
            self.second = name == again.tzname()
        else:
            self.second = self.second or self.latest - t > self.JITTER
        if self.second:
            t = t_again
        self.latest = max(self.latest, t)
        return t


def _is_header(parts: list[str], cols: list[tuple[str | None, str | None]]) -> bool:
    return any(c[0] for c in cols) and not any(re.match(r"^[-+]?\d", p) for p in parts)


def read_nvidia_smi_csv(
    path: str | os.PathLike[str],
    host: str,
    *,
    start: dt.datetime | None = None,
    interval: float = 1.0,
    columns: str | None = None,
    tz: str | dt.tzinfo | None = None,
    strict: bool = False,
    flush: Callable[[list[dict[str, Any]], int], None] | None = None,
    chunk: int = 100_000,
) -> Imported:
    """GPU rows (``--query-gpu``) and process rows (``--query-compute-apps``) of a file
    that may also hold banners, tables and blank lines: those are skipped and counted
    (``strict`` raises at the first instead). Naive timestamps are read in ``tz``.
    ``flush``: takes the GPU rows ``chunk`` at a time while the file is read (with how
    many went before them), so memory
    holds a chunk, not the file (not where rows are placed back from the mtime: their
    times are known only at the end)."""
    zone_ = zone(tz)
    out = Imported()
    header: list[tuple[str | None, str | None]] | None = None
    if columns:
        header = [_column(c) for c in columns.split(",")]
    # rows without a time of their own are placed every ``interval`` s: from ``start``, else
    # ending at the file's last write (the time of its last line), not starting there
    t0 = start or dt.datetime.fromtimestamp(os.path.getmtime(path), dt.UTC)
    placed: list[dict[str, Any]] = []
    uuids: dict[str, int] = {}  # GPU index by UUID, for the process rows
    local = LocalTimes(zone_)
    sample, position = -1, 0
    seen_in_sample: set[int] = set()
    previous: dict[int, Any] = {}  # each GPU's last stated time
    first_error: ImportError_ | None = None
    last_ts: dt.datetime | None = None
    pending: list[dict[str, Any]] = []
    with open_text(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip().lstrip("\ufeff")
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(",")]
            cols = [_column(p) for p in parts]
            if _is_header(parts, cols):
                header = cols  # a (repeated) header line, GPU or compute-apps
                continue
            try:
                if header is None:
                    raise ImportError_(
                        path, n, "data before any header line (give --columns for noheader output)"
                    )
                if len(parts) != len(header):
                    raise ImportError_(path, n, f"{len(parts)} fields, header has {len(header)}")
                rec: dict[str, Any] = {"host": host}
                for (fld, unit), value in zip(header, parts, strict=True):
                    if fld:
                        rec[fld] = _value(fld, value, unit, str(path), n)
            except ImportError_ as e:
                if strict:
                    raise
                first_error = first_error or e
                out.skip(path, n, e.msg)
                continue
            if isinstance(rec.get("ts"), dt.datetime) and rec["ts"].tzinfo is None:
                rec["ts"] = local.utc(rec["ts"])
            if "pid" in rec:  # a --query-compute-apps row: at the GPU sample before it
                if (
                    rec.get("ts") is None
                    and start is None
                    and placed
                    and placed[-1]["ts"] is last_ts
                ):
                    placed.append(rec)  # moves with it
                rec["ts"] = rec.get("ts") or last_ts
                out.processes.append(rec)
                if rec["ts"] is None:
                    pending.append(rec)
                continue
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
                if start is None:
                    placed.append(rec)
            else:
                out.stamped(path, n, rec["ts"], previous.get(idx))
                previous[idx] = rec["ts"]
            last_ts = rec["ts"]
            if (
                rec.get("memory_free_bytes") is None
                and rec.get("memory_total_bytes") is not None
                and rec.get("memory_used_bytes") is not None
            ):
                rec["memory_free_bytes"] = rec["memory_total_bytes"] - rec["memory_used_bytes"]
            rec.pop("pid", None)
            if rec.get("gpu_uuid"):
                uuids[rec["gpu_uuid"]] = idx
            out.rows.append(rec)
            moved = bool(placed) and placed[-1] is rec
            for p in pending:  # process rows printed before any GPU sample
                p["ts"] = last_ts
                if moved:
                    placed.append(p)
            pending.clear()
            if flush is not None and not placed and len(out.rows) >= chunk:
                flush(out.rows, out.written)
                out.written += len(out.rows)
                out.rows = []
    if not out.rows and not out.processes and not out.written:
        raise first_error or ImportError_(path, 1, "no data rows")
    if placed and start is None:
        back = dt.timedelta(seconds=interval * sample)
        t0 -= back
        for rec in placed:
            rec["ts"] -= back
        out.note = (
            f"no timestamp column: {sample + 1} samples placed every {interval:g} s, the last at "
            f"the file's modification time {placed[-1]['ts']:%Y-%m-%dT%H:%M:%SZ} "
            "(give --start to place them)"
        )
    _place_processes(out, t0, uuids)
    return out


def _place_processes(out: Imported, t0: dt.datetime, by_uuid: dict[str, int]) -> None:
    """Process rows get their GPU's index (by UUID) and a time (their own, else the
    nearest GPU sample's, else the file's start)."""
    for p in out.processes:
        p["gpu_index"] = by_uuid.get(p.get("gpu_uuid") or "")
        p["ts"] = p.get("ts") or t0
        p.pop("process_name", None)


def nvidia_smi_csv(
    path: str | os.PathLike[str],
    host: str,
    *,
    start: dt.datetime | None = None,
    interval: float = 1.0,
    columns: str | None = None,
    tz: str | dt.tzinfo | None = None,
) -> list[dict[str, Any]]:
    """The GPU rows of :func:`read_nvidia_smi_csv`."""
    return read_nvidia_smi_csv(
        path, host, start=start, interval=interval, columns=columns, tz=tz
    ).rows
