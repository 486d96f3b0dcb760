"""The bucket's layout, in one place: ``<bucket>/<table>/date=YYYY-MM-DD/host=<host>/<file>``.

Everything that writes, lists, compacts or reads a bucket goes through here:

- host names become one path component, reversibly (:func:`encode_host`): bytes
  outside ``A-Za-z0-9._-`` are percent-encoded (as Hive does for partition values),
  a leading dot too, so distinct names stay distinct and none can climb out of
  its folder; the empty name is ``%`` alone;
- file names (:func:`file_name`), temporary names (``.tmp-``) and compaction
  marks (a compacted file names the files it replaces in its Parquet metadata);
- listing a table's files in a local folder or an S3 bucket, pruned by date and
  host before any file is opened (:func:`list_entries`);
- checking each file against the schema (:func:`check_file`): its
  ``leakreport.schema_version``, its table, and every column's type. A file that
  does not match is named with the reason, so a reader can skip it and say so.

Imports pyarrow only: the collector uses it, and the analyzer may import it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from collector.schema import SCHEMA_VERSION, TABLES, Table

TMP_PREFIX = ".tmp-"
COMPACT_MARK = "-compact-"
REPLACES_KEY = b"leakreport.replaces"
SCHEMA_KEY = b"leakreport.schema_version"
TABLE_KEY = b"leakreport.table"
MAX_COMPONENT = 200  # bytes of an encoded host name; longer ones end in ~<hash>
# the host folder of a file that holds rows of every host (the rollup tier's week files):
# no host name encodes to it, as ``@`` is always percent-encoded
FLEET_DIR = "@all"

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_PCT = re.compile(r"%[0-9A-F]{2}")


def encode_host(name: str) -> str:
    """A host name as one safe path component; :func:`decode_host` gives it back.

    >>> encode_host("gpu-node/1"), encode_host(".."), encode_host("")
    ('gpu-node%2F1', '%2E.', '%')
    """
    if name == "":
        return "%"
    raw = name.encode("utf-8", "surrogatepass")
    out = "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)
    if out.startswith("."):
        out = "%2E" + out[1:]
    if len(out) > MAX_COMPONENT:  # distinct still, but no longer reversible from the path
        cut = out[: MAX_COMPONENT - 17]
        cut = cut[: cut.rfind("%")] if "%" in cut[-2:] else cut
        out = f"{cut}~{hashlib.sha256(raw).hexdigest()[:16]}"
    return out


def decode_host(component: str) -> str:
    """The host name a path component stands for (a folder written before host names
    were encoded, such as ``gpu_01``, reads as itself)."""
    if component == "%":
        return ""
    if "~" in component or "%" not in component:
        return component
    if _PCT.sub("", component).count("%"):
        return component  # not ours: keep it as it is
    raw = bytearray()
    i = 0
    while i < len(component):
        if component[i] == "%":
            raw.append(int(component[i + 1 : i + 3], 16))
            i += 3
        else:
            raw += component[i].encode()
            i += 1
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return component


def partition(table: str, day: dt.date, host: str, host_dir: str | None = None) -> str:
    """``table/date=YYYY-MM-DD/host=<encoded host>`` (``host`` is the real name;
    ``host_dir`` an existing folder's encoded name, kept as it is)."""
    return f"{table}/date={day.isoformat()}/host={host_dir or encode_host(host)}"


def file_name(table: str, start: dt.datetime, mark: str = "-") -> str:
    """``<table><mark><first timestamp>-<random>.parquet``: sorts by time, never collides."""
    return f"{table}{mark}{start:%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:12]}.parquet"


def _value(part: str, key: str) -> str | None:
    return part[len(key) + 1 :] if part.startswith(key + "=") else None


@dataclass(frozen=True)
class Entry:
    """One data file of the bucket: a local path, or an S3 key (no ``s3://``)."""

    path: str
    table: str
    day: dt.date
    host_dir: str  # the encoded folder name after ``host=``
    # (size, mtime in ns) where the listing gave them for free (S3); not part of equality
    stamp: tuple[int, int] | None = field(default=None, compare=False, repr=False)

    @property
    def host(self) -> str:
        return decode_host(self.host_dir)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def folder(self) -> str:
        return self.path.rsplit("/", 1)[0]

    @property
    def compacted(self) -> bool:
        return COMPACT_MARK in self.name


def parse(relpath: str) -> tuple[str, dt.date, str, str] | None:
    """``table/date=D/host=H/file`` (any prefix before it) -> (table, date, host folder, file)."""
    parts = relpath.strip("/").split("/")
    if len(parts) < 4:
        return None
    table, dv, hv, name = parts[-4], _value(parts[-3], "date"), _value(parts[-2], "host"), parts[-1]
    if dv is None or hv is None or not name.endswith(".parquet") or name.startswith(TMP_PREFIX):
        return None
    try:
        day = dt.date.fromisoformat(dv)
    except ValueError:
        return None
    return table, day, hv, name


DateOk = Callable[[dt.date], bool]
HostOk = Callable[[str], bool]


def _all(_x: Any) -> bool:
    return True


def host_folders(names: Iterable[str]) -> set[str]:
    """What the folders of these real host names decode to, the name a :data:`HostOk` is
    given: the name itself, but for one too long for a folder (cut, ending in ``~<hash>``)."""
    return {decode_host(encode_host(n)) for n in names}


def stamp_of(e: Entry, fs: Any = None) -> tuple[int, int]:
    """A listed file's (size, modification time in ns): the listing's where it gave them,
    else asked of the file system (OSError: gone since the listing)."""
    if e.stamp is not None:
        return e.stamp
    if fs is None:
        st = os.stat(e.path)
        return st.st_size, st.st_mtime_ns
    info = fs.get_file_info(e.path)
    return int(info.size or 0), int(info.mtime_ns or 0)


def list_entries(
    root: str,
    table: str,
    fs: Any = None,
    date_ok: DateOk = _all,
    host_ok: HostOk = _all,
) -> list[Entry]:
    """A table's files (temporary ones left out), pruned by date and by the real host
    name before anything is opened. ``root`` is a folder, or ``bucket/prefix`` on
    the pyarrow filesystem ``fs`` (S3: one recursive listing)."""
    out: list[Entry] = []
    if fs is not None:
        from pyarrow.fs import FileSelector, FileType

        base = f"{root}/{table}".strip("/")
        for info in fs.get_file_info(FileSelector(base, recursive=True, allow_not_found=True)):
            p = parse(info.path) if info.type == FileType.File else None
            if p and p[0] == table and date_ok(p[1]) and host_ok(decode_host(p[2])):
                mtime = info.mtime_ns
                stamp = (info.size, mtime) if info.size is not None and mtime else None
                out.append(Entry(info.path, table, p[1], p[2], stamp))
        return sorted(out, key=lambda e: e.path)
    for day, hv, hdir in _host_dirs(root, table, date_ok, host_ok):
        for f in _listdir(hdir):
            if _is_trace(f):
                out.append(Entry(os.path.join(hdir, f), table, day, hv))
    return out


def _is_trace(name: str) -> bool:
    return name.endswith(".parquet") and not name.startswith(TMP_PREFIX)


def _host_dirs(
    root: str, table: str, date_ok: DateOk, host_ok: HostOk, skip: Container[str] = ()
) -> Iterator[tuple[dt.date, str, str]]:
    """(day, host folder value, folder path) of a local table's host folders in scope;
    hosts in ``skip`` (real names) are passed over."""
    tdir = os.path.join(root, table)
    for date_name in _listdir(tdir):
        dv = _value(date_name, "date")
        try:
            day = dt.date.fromisoformat(dv or "")
        except ValueError:
            continue
        if not date_ok(day):
            continue
        ddir = os.path.join(tdir, date_name)
        for host_name in _listdir(ddir):
            hv = _value(host_name, "host")
            if hv is None:
                continue
            host = decode_host(hv)
            if host in skip or not host_ok(host):
                continue
            yield day, hv, os.path.join(ddir, host_name)


def _listdir(d: str) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(d) if e.is_dir() or e.name.endswith(".parquet"))
    except (FileNotFoundError, NotADirectoryError):
        return []


def hosts_in(
    root: str, tables: Iterable[str], fs: Any = None, date_ok: DateOk = _all, host_ok: HostOk = _all
) -> list[str]:
    """Real host names that have a file in any of ``tables`` (files are not opened).
    Locally a host's folders are not listed once one of them showed a file."""
    if fs is not None:
        return sorted({e.host for t in tables for e in list_entries(root, t, fs, date_ok, host_ok)})
    names: set[str] = set()
    for t in tables:
        for _day, hv, hdir in _host_dirs(root, t, date_ok, host_ok, skip=names):
            if any(_is_trace(f) for f in _listdir(hdir)):
                names.add(decode_host(hv))
    return sorted(names)


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


def _same_type(got: pa.DataType, want: pa.DataType) -> bool:
    if got == want:
        return True
    if pa.types.is_timestamp(got) and pa.types.is_timestamp(want):
        return got.tz in ("UTC", "+00:00", "Etc/UTC")  # a unit change is harmless
    return False


# bump whenever check_file's verdict on the same bytes can change: stored checks
# (analyzer.tierindex) made by another version are then not used
CHECK_VERSION = 2


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
    res.pods = _maybe_set(md, schema.get_field_index("pod"))
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
    """:func:`check_file` for many files, in their order. An object store's footers are read
    in parallel; a folder's in turn, unless the first :data:`PROBE_FILES` show each read
    waiting on I/O (a network mount): then the rest in parallel."""
    head: list[FileCheck] = []
    if fs is None:
        t0 = time.perf_counter()
        for e in entries:
            head.append(check_file(e))
            if len(head) == PROBE_FILES:
                if (time.perf_counter() - t0) / PROBE_FILES <= SLOW_FOOTER_S:
                    head += [check_file(x) for x in entries[PROBE_FILES:]]
                break
    rest = entries[len(head) :]
    if len(rest) < 16:
        return head + [check_file(e, fs) for e in rest]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads) as ex:
        return head + list(ex.map(lambda e: check_file(e, fs), rest))


def one_schema(checks: list[FileCheck]) -> bool:
    """Every file has the same Parquet schema (so a reader need not reconcile them)."""
    hashes = {c.schema_hash for c in checks}
    return len(hashes) == 1 and None not in hashes


def live(checks: list[FileCheck]) -> tuple[list[FileCheck], list[FileCheck]]:
    """(readable files not replaced by a compacted one, files that cannot be read)."""
    gone = {(c.entry.folder, n) for c in checks if c.problem is None for n in c.replaces}
    good = [c for c in checks if c.problem is None and (c.entry.folder, c.entry.name) not in gone]
    bad = [
        c for c in checks if c.problem is not None and (c.entry.folder, c.entry.name) not in gone
    ]
    return good, bad


def replaced_names(checks: list[FileCheck]) -> set[tuple[str, str]]:
    """(folder, name) of every file a readable compacted file stands for."""
    return {(c.entry.folder, n) for c in checks if c.problem is None for n in c.replaces}
