"""Each trace file checked against the schema from its footer alone (:func:`check_file`):
its ``leakreport.schema_version``, its table, and every column's type, with what its
statistics tell (time range, host, whether a row names a pod). A file that does not match
is named with the reason, so a reader can skip it and say so. Many files at once:
:func:`check_all`; which of them a reader uses: :func:`live`.

Imports pyarrow only: the collector uses it, and the analyzer may import it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from collector import layout
from collector.layout import (
    FLEET_DIR,
    REPLACES_KEY,
    SCHEMA_KEY,
    TABLE_KEY,
    Entry,
    encode_host,
    partition,
)
from collector.schema import SCHEMA_VERSION, TABLES, Table

T = TypeVar("T")


@dataclass
class FileCheck:
    """What the footer of one file says; ``problem`` is None when it can be read."""

    entry: Entry
    problem: str | None = None
    rows: int = 0
    ts_min: dt.datetime | None = None
    ts_max: dt.datetime | None = None
    replaces: list[str] = field(default_factory=list)
    host: str | None = None  # every row's host, where the statistics show one value, no NULL
    # the Parquet schema's hash (column names, order, types): files with the same one can be
    # read as one table without reconciling their schemas
    schema_hash: str | None = None
    # some row may name a Kubernetes pod (a ``pod`` column whose statistics do not show
    # every row NULL): the files an analysis reads pods from
    pods: bool = False
    # how many GPUs the rows may be of (gpu_index's range, from the statistics; None:
    # unknown or no such column): with rows and times, the sampling interval (bucket.py)
    gpus: int | None = None


def _same_type(got: pa.DataType, want: pa.DataType) -> bool:
    if got == want:
        return True
    if pa.types.is_timestamp(got) and pa.types.is_timestamp(want):
        return got.tz in ("UTC", "+00:00", "Etc/UTC")  # a unit change is harmless
    return False


# bump whenever check_file's verdict on the same bytes can change: stored checks
# (analyzer.tierindex) made by another version are then not used
CHECK_VERSION = 4  # 3: a file's rows must be of its folder's day; 4: gpus


def check_fingerprint() -> str:
    """What a stored :func:`check_file` result depends on besides the file's bytes."""
    spec = "\n".join(
        f"{n}|{t.schema}|{sorted(t.optional)}|{t.time_column}" for n, t in sorted(TABLES.items())
    )
    return hashlib.sha256(f"{CHECK_VERSION}/{SCHEMA_VERSION}\n{spec}".encode()).hexdigest()[:32]


def check_file(entry: Entry, fs: Any = None, spec: Table | None = None) -> FileCheck:
    """Read one file's footer and check it against the schema (``spec``, by default
    the declared table of the same name). Never raises for a bad file."""
    res = FileCheck(entry)
    spec = spec or TABLES.get(entry.table)
    if entry.unlisted:
        res.problem = entry.why or layout.UNLISTABLE
        return res
    if fs is None:
        try:
            mode: int | None = os.stat(entry.path).st_mode
        except OSError:
            mode = None  # gone, or a dangling link: the footer read below says why
        if mode is not None and not stat.S_ISREG(mode):  # a FIFO would block the read
            res.problem = "not a regular file (a FIFO, socket or device is never read)"
            return res
    try:
        if fs is not None:
            with fs.open_input_file(entry.path) as f:
                md = pq.read_metadata(f)
        else:
            md = pq.read_metadata(entry.path)
        schema = md.schema.to_arrow_schema()
    except Exception as e:  # truncated, empty or not Parquet: pyarrow raises several kinds
        res.problem = f"unreadable Parquet ({str(e).splitlines()[0][:160]})"
        return res
    kv = md.metadata or {}
    version = kv.get(SCHEMA_KEY, b"").decode(errors="replace")
    if not version:
        res.problem = "not a leakreport trace file (no leakreport.schema_version in its metadata)"
        return res
    if version != str(SCHEMA_VERSION):
        res.problem = f"schema_version {version}; this version reads {SCHEMA_VERSION}"
        return res
    written_as = kv.get(TABLE_KEY, b"").decode(errors="replace")
    if written_as and written_as != entry.table:
        res.problem = f"a {written_as!r} file in the {entry.table!r} folder"
        return res
    if spec is None:
        res.problem = f"unknown table {entry.table!r}"
        return res
    for want in spec.schema:
        idx = schema.get_field_index(want.name)
        if idx < 0 and want.name in spec.optional:
            continue  # written before the column existed
        if idx < 0:
            res.problem = f"column {want.name!r} is missing"
            return res
        got = schema.field(idx).type
        if not _same_type(got, want.type):
            res.problem = f"column {want.name!r} is {got}, the schema says {want.type}"
            return res
    res.rows = md.num_rows
    res.ts_min, res.ts_max = _time_range(md, schema.get_field_index(spec.time_column))
    res.host = _one_value(md, schema.get_field_index("host"))
    if res.host is not None and entry.host_dir not in (FLEET_DIR, encode_host(res.host)):
        # --host and the batches go by the folder: rows of another host would slip in
        res.problem = f"its rows are of host {res.host!r}, its folder says {entry.host!r}"
        return res
    days = {t.astimezone(dt.UTC).date() for t in (res.ts_min, res.ts_max) if t is not None}
    if days - {entry.day}:  # writers split rows by UTC day: these were moved by hand
        span = " to ".join(sorted({str(d) for d in days}))
        res.problem = f"its rows are of {span} (UTC), its folder says date={entry.day}"
        if len(days) == 1:  # moved whole: it goes back where its rows belong
            res.problem += (
                f"; move it into {partition(entry.table, days.pop(), '', entry.host_dir)}/"
            )
        return res
    res.pods = _maybe_set(md, schema.get_field_index("pod"))
    res.gpus = _int_range(md, schema.get_field_index("gpu_index"))
    tree = str(md.schema).split("\n", 1)[-1]  # its first line names the Python object
    res.schema_hash = hashlib.sha256(tree.encode()).hexdigest()[:16]
    raw = kv.get(REPLACES_KEY)
    if raw:
        try:
            res.replaces = [str(x) for x in json.loads(raw)]
        except ValueError:
            res.problem = "its list of replaced files is not JSON"
    return res


def _one_value(md: pq.FileMetaData, col: int) -> str | None:
    """The one string every row of a column holds, from the statistics (None: unknown)."""
    seen: set[Any] = set()
    for i in range(md.num_row_groups if col >= 0 else 0):
        st = md.row_group(i).column(col).statistics
        if st is None or not st.has_min_max or st.null_count != 0 or st.min != st.max:
            return None
        seen.add(st.min)
    return seen.pop() if len(seen) == 1 and isinstance(next(iter(seen)), str) else None


def _int_range(md: pq.FileMetaData, col: int) -> int | None:
    """How many integers the column's values span (max - min + 1), from the statistics."""
    lo: int | None = None
    hi: int | None = None
    for i in range(md.num_row_groups if col >= 0 else 0):
        st = md.row_group(i).column(col).statistics
        if st is None or not st.has_min_max or not isinstance(st.min, int):
            return None
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
    return None if lo is None or hi is None else hi - lo + 1


def _maybe_set(md: pq.FileMetaData, col: int) -> bool:
    """False when the statistics show every row of the column NULL (or there is no such
    column); True when some row may hold a value."""
    for i in range(md.num_row_groups if col >= 0 else 0):
        rg = md.row_group(i)
        st = rg.column(col).statistics
        if st is None or not st.has_null_count or st.null_count < rg.num_rows:
            return True
    return False


def _time_range(md: pq.FileMetaData, col: int) -> tuple[dt.datetime | None, dt.datetime | None]:
    """The time column's range from the row-group statistics (no data is read)."""
    lo: dt.datetime | None = None
    hi: dt.datetime | None = None
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(col).statistics
        if st is None or not st.has_min_max:
            return None, None
        a, b = st.min, st.max
        if not isinstance(a, dt.datetime) or not isinstance(b, dt.datetime):
            return None, None
        a = a if a.tzinfo else a.replace(tzinfo=dt.UTC)
        b = b if b.tzinfo else b.replace(tzinfo=dt.UTC)
        lo = a if lo is None or a < lo else lo
        hi = b if hi is None or b > hi else hi
    return lo, hi


# local footers are read one after another while each takes less than this: reading one
# from the page cache is mostly parsing, which holds the GIL, and threads on few cores
# only contend for it (4,375 files on 2 cores: 0.9 s in turn against 1.7 s on 8 threads)
SLOW_FOOTER_S = 0.001
PROBE_FILES = 32  # footers read in turn before the time per footer is judged


def check_all(entries: list[Entry], fs: Any = None, threads: int = 8) -> list[FileCheck]:
    """:func:`check_file` for many files, in their order (:func:`each_footer`)."""
    return each_footer(lambda e: check_file(e, fs), entries, fs, threads)


def each_footer(
    read: Callable[[Entry], T], entries: list[Entry], fs: Any = None, threads: int = 8
) -> list[T]:
    """``read`` (a footer) of many files, in their order. An object store's are read in
    parallel; a folder's in turn, unless the first :data:`PROBE_FILES` show each read
    waiting on I/O (a network mount): then the rest in parallel."""
    head: list[T] = []
    if fs is None:
        t0 = time.perf_counter()
        for e in entries:
            head.append(read(e))
            if len(head) == PROBE_FILES:
                if (time.perf_counter() - t0) / PROBE_FILES <= SLOW_FOOTER_S:
                    head += [read(x) for x in entries[PROBE_FILES:]]
                break
    rest = entries[len(head) :]
    if len(rest) < 16:
        return head + [read(e) for e in rest]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads) as ex:
        return head + list(ex.map(read, rest))


def one_schema(checks: list[FileCheck]) -> bool:
    """Every file has the same Parquet schema (so a reader need not reconcile them)."""
    hashes = {c.schema_hash for c in checks}
    return len(hashes) == 1 and None not in hashes


def live(checks: list[FileCheck]) -> tuple[list[FileCheck], list[FileCheck]]:
    """(readable files not replaced by a compacted one, files that cannot be read)."""
    gone = replaced_names(checks)
    good = [c for c in checks if c.problem is None and (c.entry.folder, c.entry.name) not in gone]
    bad = [
        c for c in checks if c.problem is not None and (c.entry.folder, c.entry.name) not in gone
    ]
    return good, bad


def replaced_names(checks: list[FileCheck]) -> set[tuple[str, str]]:
    """(folder, name) of every file a readable compacted file stands for, and of every
    compacted file whose rows another one holds too (:func:`superseded`)."""
    gone = {(c.entry.folder, n) for c in checks if c.problem is None for n in c.replaces}
    return gone | superseded(checks)


def superseded(checks: list[FileCheck]) -> set[tuple[str, str]]:
    """Compacted files of a folder that another compacted file there makes redundant: it
    replaces the same files (the greater name goes) or more. Two compacts of one folder
    at once (S3 has no lock) each write one, from the same originals: read both, and
    every row would count twice."""
    merged: dict[str, list[FileCheck]] = {}
    for c in checks:
        if c.problem is None and c.replaces:
            merged.setdefault(c.entry.folder, []).append(c)
    out: set[tuple[str, str]] = set()
    for group in merged.values():
        for x in group:
            xs = set(x.replaces)
            for y in group:
                ys = set(y.replaces)
                if y is not x and (xs < ys or (xs == ys and y.entry.name < x.entry.name)):
                    out.add((x.entry.folder, x.entry.name))
                    break
    return out
