"""The footer-check index of finished host-days: opening a bucket reads no footer twice.

Opening a bucket checks every raw file's footer against the schema
(:func:`collector.filecheck.check_file`) and reads every tier file's hash and sources. For
finished host-days these never change, so ``leakreport rollup`` (:func:`refresh`) stores
them in one file per day, ``<bucket>/tier_index/<YYYY-MM-DD>.json``, read only when an
analysis lists a file of that day (a week of a month-long bucket reads seven): per file
its path relative to the bucket, its size and modification time (ns; S3: the object's
size and LastModified), and what its footer said (the check's verdict, problem, rows,
time range, host, replaced files and whether a row can name a pod; for a tier file its
SQL and sources hashes). An analysis takes a file's check from the index when the path,
size and time still match and reads the footer of every other file as before: late
files, today's files, files
compacted or rewritten since.

The one change this cannot see: a file replaced by one of the same size and the same
modification time (to the nanosecond; on S3 LastModified, to the second, as pyarrow's
listing gives no ETag). Nothing of ours does that: the collector, compaction and the tier
write a new file under a temporary name and rename it (``os.replace``), which gives it a
new time, and usually a new name as well.

Each day's file is written atomically (a temporary file renamed; one PUT on S3), and only
when its entries changed. One that is unreadable, of another format, or made for another
schema or check version (:func:`collector.filecheck.check_fingerprint`) is ignored: footers
are read as if it were not there, so it can make an analysis slower, never different.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from collector import filecheck, layout
from collector.schema import TABLES
from collector.store import read_small, remove, write_small

INDEX_FORMAT = 3
INDEX_DIR = "tier_index"
_OLD_INDEX = "tier_index/footers.json"  # format 2: one file for every day
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)

Stamp = tuple[int, int]  # size in bytes, modification time in ns
TierMeta = tuple[str, str]  # the tier file's SQL hash and sources hash


def _us(t: dt.datetime | None) -> int | None:
    return None if t is None else (t - _EPOCH) // _US


def _time(us: int | None) -> dt.datetime | None:
    return None if us is None else (_EPOCH + us * _US).astimezone(dt.UTC)


# what the index keeps of a raw file's check, in order (filecheck.FileCheck's fields)
_FIELDS = ("problem", "rows", "ts_min", "ts_max", "replaces", "host", "schema_hash", "pods", "gpus")


def _encode(c: filecheck.FileCheck) -> list[Any]:
    return [
        c.problem,
        c.rows,
        _us(c.ts_min),
        _us(c.ts_max),
        c.replaces,
        c.host,
        c.schema_hash,
        c.pods,
        c.gpus,
    ]


def _decode(entry: layout.Entry, v: list[Any]) -> filecheck.FileCheck:
    problem, rows, lo, hi, replaces, host, shape, pods, gpus = v
    return filecheck.FileCheck(
        entry,
        problem,
        int(rows),
        _time(lo),
        _time(hi),
        list(replaces),
        host,
        shape,
        bool(pods),
        None if gpus is None else int(gpus),
    )


@dataclass
class Index:
    """Stored footer checks of one bucket (``root``: its folder, or ``bucket/prefix`` on S3)."""

    root: str
    fs: Any = None
    raw: dict[str, tuple[Stamp, list[Any]]] = field(default_factory=dict)
    tier: dict[str, tuple[Stamp, TierMeta]] = field(default_factory=dict)
    hits: int = 0  # files whose check came from the index
    warn: Callable[[str], None] | None = None
    days: dict[dt.date, set[str]] = field(default_factory=dict)  # day read -> its paths
    dirty: set[dt.date] = field(default_factory=set)  # days whose entries changed

    def _day(self, day: dt.date) -> None:
        """Read ``day``'s file once (nothing when it is missing or cannot be used)."""
        if day in self.days:
            return
        self.days[day] = set()
        got = _read_day(self.root, self.fs, day, self.warn)
        if got is not None:
            raw, tier = got
            self.raw.update(raw)
            self.tier.update(tier)
            self.days[day] = set(raw) | set(tier)

    def _remember(self, e: layout.Entry, rel: str) -> None:
        self.days.setdefault(e.day, set()).add(rel)
        self.dirty.add(e.day)

    def _key(self, e: layout.Entry) -> tuple[str, Stamp] | None:
        base = self.root.rstrip("/") + "/"
        if not e.path.startswith(base):
            return None
        if e.stamp is None and self.fs is not None:
            return None  # an S3 object listed without them: not asked for one by one
        try:
            stamp = layout.stamp_of(e)
        except OSError:
            return None
        return e.path[len(base) :], stamp

    def checks(
        self,
        entries: list[layout.Entry],
        read: Callable[[list[layout.Entry]], list[filecheck.FileCheck]],
    ) -> list[filecheck.FileCheck]:
        """Each entry's footer check: from the index where its key matches, else ``read``
        (whose results are remembered for :func:`save`)."""
        out: list[filecheck.FileCheck | None] = []
        for day in {e.day for e in entries}:
            self._day(day)
        keys = [self._key(e) for e in entries]
        for e, k in zip(entries, keys, strict=True):
            got = self.raw.get(k[0]) if k else None
            out.append(_decode(e, got[1]) if got and k and got[0] == k[1] else None)
        self.hits += sum(c is not None for c in out)
        missing = [i for i, c in enumerate(out) if c is None]
        fresh = read([entries[i] for i in missing]) if missing else []
        for i, c in zip(missing, fresh, strict=True):
            out[i] = c
            k = keys[i]
            if k is not None:
                self.raw[k[0]] = (k[1], _encode(c))
                self._remember(entries[i], k[0])
        return [c for c in out if c is not None]

    def tier_meta(
        self, entries: list[layout.Entry], read: Callable[[layout.Entry], TierMeta]
    ) -> list[TierMeta]:
        """Each tier file's (SQL hash, sources hash): from the index, else ``read``."""
        out: list[TierMeta] = []
        for day in {e.day for e in entries}:
            self._day(day)
        for e in entries:
            k = self._key(e)
            got = self.tier.get(k[0]) if k else None
            if got and k and got[0] == k[1]:
                self.hits += 1
                out.append(got[1])
                continue
            meta = read(e)
            if k is not None:
                self.tier[k[0]] = (k[1], meta)
                self._remember(e, k[0])
            out.append(meta)
        return out


def _location(root: str, fs: Any, name: str) -> str:
    rel = f"{INDEX_DIR}/{name}"
    return f"{root.rstrip('/')}/{rel}" if fs is not None else os.path.join(root, rel)


def _header() -> dict[str, Any]:
    return {"format": INDEX_FORMAT, "checks": filecheck.check_fingerprint()}


def _read_day(
    root: str, fs: Any, day: dt.date, warn: Callable[[str], None] | None
) -> tuple[dict[str, tuple[Stamp, list[Any]]], dict[str, tuple[Stamp, TierMeta]]] | None:
    """One day's stored entries (raw, tier); None when there is no file or it cannot be
    used (unreadable, another format or check version, damaged: said through ``warn``)."""
    where = _location(root, fs, f"{day}.json")
    try:
        data = read_small(where, fs)
    except OSError as e:
        if warn:
            warn(f"tier index {where}: unreadable ({e}); footers are read instead")
        return None
    if data is None:
        return None
    try:
        doc = json.loads(data)
        if {k: doc.get(k) for k in _header()} != _header():
            if warn:
                warn(f"tier index {where}: made by another version; footers are read instead")
            return None
        raw = {str(p): ((int(s), int(m)), list(v)) for p, s, m, v in doc["raw"]}
        tier = {str(p): ((int(s), int(m)), (str(h), str(src))) for p, s, m, h, src in doc["tier"]}
        for v in raw.values():
            if len(v[1]) != len(_FIELDS):
                raise ValueError("a raw file's check has the wrong length")
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        if warn:
            warn(f"tier index {where}: damaged ({e}); footers are read instead")
        return None
    return raw, tier


def load(root: str, fs: Any = None, warn: Callable[[str], None] | None = None) -> Index:
    """The bucket's stored index, each day's file read when a file of that day is first
    looked up; a day whose file is missing or cannot be used (said through ``warn``)
    has its footers read."""
    return Index(root, fs, warn=warn)


def stored(root: str, fs: Any = None) -> Index | None:
    """The bucket's index, or None when it has none (footers are read)."""
    where = _location(root, fs, "")
    try:
        if fs is not None:
            from pyarrow import fs as pafs

            there = fs.get_file_info(where.rstrip("/")).type != pafs.FileType.NotFound
        else:
            there = os.path.isdir(where)
    except OSError:
        return None
    return load(root, fs) if there else None


def save(idx: Index, keep: Callable[[str], bool]) -> int:
    """Write atomically the file of every day read whose entries changed, with the entries
    whose relative path ``keep`` accepts (files still there); how many entries the days
    read hold."""
    held = 0
    for day, paths in sorted(idx.days.items()):
        gone = {p for p in paths if not keep(p)}
        mine = sorted(paths - gone)
        held += len(mine)
        if day not in idx.dirty and not gone:
            continue
        doc = _header() | {
            "raw": [[p, *idx.raw[p][0], idx.raw[p][1]] for p in mine if p in idx.raw],
            "tier": [[p, *idx.tier[p][0], *idx.tier[p][1]] for p in mine if p in idx.tier],
        }
        data = json.dumps(doc, separators=(",", ":")).encode()
        write_small(_location(idx.root, idx.fs, f"{day}.json"), data, idx.fs)
        idx.days[day] = set(mine)
    idx.dirty.clear()
    return held


def refresh(
    root: str,
    fs: Any,
    before: dt.date,
    idx: Index,
    tier_tables: list[str],
    read_tier: Callable[[layout.Entry], TierMeta],
) -> int:
    """Bring the index up to date with every raw and tier file of the days before
    ``before`` (footers read only for files it does not hold yet) and write it."""
    finished: Callable[[dt.date], bool] = lambda d: d < before  # noqa: E731
    live: set[str] = set()
    base = root.rstrip("/") + "/"
    for name in TABLES:
        entries = layout.list_entries(root, name, fs, finished)
        idx.checks(entries, lambda es: filecheck.check_all(es, fs))
        live |= {e.path[len(base) :] for e in entries}
    for name in tier_tables:
        entries = layout.list_entries(root, name, fs, finished)
        idx.tier_meta(entries, read_tier)
        live |= {e.path[len(base) :] for e in entries}
    _drop_old(root, fs)
    return save(idx, live.__contains__)


def _drop_old(root: str, fs: Any) -> None:
    """The one-file index of format 2, which no reader uses now."""
    remove(_location(root, fs, os.path.basename(_OLD_INDEX)), fs)
