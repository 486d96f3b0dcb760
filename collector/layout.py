"""The bucket's layout, in one place: ``<bucket>/<table>/date=YYYY-MM-DD/host=<host>/<file>``.

Everything that writes, lists, compacts or reads a bucket goes through here:

- host names become one path component, reversibly (:func:`encode_host`): bytes
  outside ``A-Za-z0-9._-`` are percent-encoded (as Hive does for partition values),
  a leading dot too, so distinct names stay distinct and none can climb out of
  its folder; the empty name is ``%`` alone;
- file names (:func:`file_name`), temporary names (``.tmp-``) and compaction
  marks (a compacted file names the files it replaces in its Parquet metadata);
- listing a table's files in a local folder or an S3 bucket, pruned by date and
  host before any file is opened (:func:`list_entries`; the S3 prefixes to list, and
  data outside any table the analyzer reads, in :mod:`collector.layoutscan`);
- what a file's footer says (checked against the schema) lives beside it, in
  :mod:`collector.filecheck`.

Imports pyarrow only: the collector uses it, and the analyzer may import it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import uuid
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

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
    why: str = field(default="", compare=False)  # an unlisted entry's fault, where known

    @property
    def host(self) -> str:
        return decode_host(self.host_dir)

    @property
    def unlisted(self) -> bool:
        """A table, date or host folder that is a file or cannot be listed, standing as an
        entry of its own (``list_entries(bad_folders=True)``): no day, no host folder."""
        return self.day == dt.date.min and not self.host_dir

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
    day = parse_day(dv)
    return None if day is None else (table, day, hv, name)


DateOk = Callable[[dt.date], bool]
HostOk = Callable[[str], bool]


def _all(_x: Any) -> bool:
    return True


ANY = _all  # the date or host filter that keeps everything (S3 then lists the table at once)


def host_folders_in(path: str) -> list[str]:
    """The encoded ``host=`` folder values along a path (none: it is in no host folder)."""
    return [v for part in path.split("/") if (v := _value(part, "host")) is not None]


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
    bad_folders: bool = False,
) -> list[Entry]:
    """A table's files (temporary ones left out), pruned by date and by the real host
    name before anything is opened. ``root`` is a folder, or ``bucket/prefix`` on
    the pyarrow filesystem ``fs`` (S3: one recursive listing). ``bad_folders``: a local
    table, date or host folder in scope that is a file or cannot be listed comes as an
    entry of its own (day ``date.min``, no host folder), which no footer check passes."""
    out: list[Entry] = []
    bad: list[tuple[str, str]] = []  # (path, why): what the layout cannot place
    if fs is not None:
        from pyarrow.fs import FileSelector, FileType

        tdir = f"{root}/{table}".strip("/")
        from collector.layoutscan import s3_prefixes

        for base in s3_prefixes(fs, tdir, date_ok, host_ok, bad):
            sel = FileSelector(base, recursive=True, allow_not_found=True)
            for info in fs.get_file_info(sel):
                if info.type != FileType.File:
                    continue
                rel = info.path[len(tdir) + 1 :].split("/")  # date=, host=, file: no more
                p = parse(info.path) if len(rel) == 3 else None
                if p and date_ok(p[1]) and host_ok(decode_host(p[2])):
                    mtime = info.mtime_ns
                    stamp = (info.size, mtime) if info.size is not None and mtime else None
                    out.append(Entry(info.path, table, p[1], p[2], stamp))
                elif not p and _is_trace(info.base_name) and not any(map(_hidden, rel)):
                    bad.append((info.path, MISPLACED))
    else:
        tdir = os.path.join(root, table)
        for day, hv, hdir in _host_dirs(root, table, date_ok, host_ok, bad=bad):
            for f in _listdir(hdir, bad):
                if _is_trace(f):
                    out.append(Entry(os.path.join(hdir, f), table, day, hv))
                elif _holds_data(os.path.join(hdir, f)):  # a folder inside a host folder
                    bad.append((os.path.join(hdir, f), MISPLACED))
    if bad_folders:
        out += [
            Entry(b, table, dt.date.min, "", why=why)
            for b, why in bad
            if _bad_in_scope(b[len(tdir) + 1 :], date_ok, host_ok)
        ]
    return sorted(out, key=lambda e: e.path) if fs is not None else out


UNLISTABLE = "a folder of the bucket's layout that is a file or cannot be listed"
MISPLACED = "Parquet data outside the bucket's layout (TABLE/date=YYYY-MM-DD/host=NAME/*.parquet)"


def _hidden(name: str) -> bool:
    """Names the layout passes over, as Hive-style readers do: ``.x`` and ``_x``."""
    return name.startswith((".", "_"))


def _holds_data(path: str) -> bool:
    """Is there a Parquet file at or under ``path`` (hidden names passed over)?"""
    if _hidden(os.path.basename(path)):
        return False
    if not os.path.isdir(path):
        return _is_trace(os.path.basename(path))
    for _dir, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not _hidden(d)]
        if any(_is_trace(f) and not _hidden(f) for f in files):
            return True
    return False


def _bad_in_scope(rel: str, date_ok: DateOk, host_ok: HostOk) -> bool:
    """Is a path the layout could not place (``rel``: under its table's folder) in scope,
    as far as its ``date=`` and ``host=`` folders, where they stand, tell?"""
    parts = rel.replace(os.sep, "/").split("/")
    day = parse_day(_value(parts[0], "date") or "")
    hv = _value(parts[1], "host") if len(parts) > 1 and day is not None else None
    return (day is None or date_ok(day)) and (hv is None or host_ok(decode_host(hv)))


def folder_entries(
    root: str, table: str, day: dt.date, host_dir: str, fs: Any = None
) -> list[Entry]:
    """The files of one host-day folder of a table (one listing of that folder alone)."""
    path = f"{root.rstrip('/')}/{partition(table, day, '', host_dir)}"
    if fs is None:
        names = [f for f in _listdir(path) if _is_trace(f)]
        return [Entry(os.path.join(path, f), table, day, host_dir) for f in names]
    from pyarrow.fs import FileSelector, FileType

    sel = FileSelector(path.strip("/"), recursive=False, allow_not_found=True)
    infos = [i for i in fs.get_file_info(sel) if i.type == FileType.File]
    return sorted(
        (Entry(i.path, table, day, host_dir) for i in infos if _is_trace(i.base_name)),
        key=lambda e: e.path,
    )


def parse_day(value: str) -> dt.date | None:
    """A day spelt ``YYYY-MM-DD`` only, as ``date=`` folders are (and ``--since``): Python's
    ``fromisoformat`` also takes ``20261124`` and ``2026-W48-1``, no folder of ours."""
    if len(value) != 10 or value[4] != "-" or value[7] != "-":
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        return None


def _is_trace(name: str) -> bool:
    return name.endswith(".parquet") and not name.startswith(TMP_PREFIX)


def _host_dirs(
    root: str,
    table: str,
    date_ok: DateOk,
    host_ok: HostOk,
    skip: Container[str] = (),
    bad: list[tuple[str, str]] | None = None,
) -> Iterator[tuple[dt.date, str, str]]:
    """(day, host folder value, folder path) of a local table's host folders in scope;
    hosts in ``skip`` (real names) are passed over; folders that cannot be listed go
    into ``bad``, where given."""
    tdir = os.path.join(root, table)
    for date_name in _listdir(tdir, bad):
        day = parse_day(_value(date_name, "date") or "")
        if day is None:
            if bad is not None and _holds_data(os.path.join(tdir, date_name)):
                bad.append((os.path.join(tdir, date_name), MISPLACED))
            continue
        if not date_ok(day):
            continue
        ddir = os.path.join(tdir, date_name)
        for host_name in _listdir(ddir, bad):
            hv = _value(host_name, "host")
            if hv is None:
                if bad is not None and _holds_data(os.path.join(ddir, host_name)):
                    bad.append((os.path.join(ddir, host_name), MISPLACED))
                continue
            host = decode_host(hv)
            if host in skip or not host_ok(host):
                continue
            yield day, hv, os.path.join(ddir, host_name)


def _listdir(d: str, bad: list[tuple[str, str]] | None = None) -> list[str]:
    """Folders and Parquet files in ``d``; where ``bad`` is given, ``d`` goes into it when
    it is a file or cannot be listed (else that is passed over as empty)."""
    try:
        return sorted(
            e.name
            for e in os.scandir(d)  # a date= or host= entry that is a file: bad, said later
            if e.is_dir() or e.name.endswith(".parquet") or e.name.startswith(("date=", "host="))
        )
    except FileNotFoundError:
        return []
    except OSError:  # a file where a folder goes, or no permission to list it
        if bad is not None:
            bad.append((d, UNLISTABLE))
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
