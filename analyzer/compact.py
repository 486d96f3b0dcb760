"""`leakreport compact`: merge a finished day's many small per-run files.

Per table/date/host folder: read every file, write one sorted file that names
the files it replaces in its Parquet metadata, check its row count, and only
then delete the originals. Readers skip replaced files as soon as the new one
exists, so at every instant they count each row once: old files, or the new
one, never both and never neither. A crash leaves the new file plus originals
that readers already skip; the next run deletes them. On S3 the same holds per
object: the new object appears in one PUT, readers skip what it replaces.

A file that does not match the schema (truncated, empty, foreign, drifted) is
left where it is, out of the merge, and named in the result: compaction goes on.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from analyzer.bucket import exists
from collector import filecheck, layout
from collector.schema import TABLES, table
from collector.store import is_s3, remove, root_of, s3_filesystem
from collector.writer import COMPACT_MARK, to_arrow, write_compacted


class CompactError(Exception):
    pass


@dataclass
class Result:
    folders: int = 0
    files_before: int = 0
    files_after: int = 0
    rows: int = 0
    skipped: list[str] = field(default_factory=list)  # "file: reason", left as they are
    temp_removed: int = 0  # temporary files left by writers killed mid-write

    def add(
        self, where: str, counts: tuple[int, int, int], progress: Callable[[str], None] | None
    ) -> None:
        n_before, n_after, rows = counts
        self.folders += 1
        self.files_before += n_before
        self.files_after += n_after
        self.rows += rows
        if progress and n_before != n_after:
            progress(f"{where}: {n_before} -> {n_after} files ({rows} rows)")


Group = tuple[str, dt.date, str]  # table, date, encoded host folder


def groups(
    root: str,
    before: dt.date,
    fs: Any = None,
    tables: list[str] | None = None,
    bad_folders: bool = False,
) -> dict[Group, list[layout.Entry]]:
    """Finished table/date/host folders (days before ``before``) and their files; with
    ``bad_folders``, those that cannot be listed too (one group, named by its checks)."""
    out: dict[Group, list[layout.Entry]] = {}
    for name in tables or list(TABLES):
        for e in layout.list_entries(root, name, fs, lambda d: d < before, bad_folders=bad_folders):
            out.setdefault((e.table, e.day, e.host_dir), []).append(e)
    return out


def _rows_written(path: str, fs: Any) -> int:
    return int(pq.read_metadata(path, filesystem=fs).num_rows)


def compact_group(
    bucket: str,
    name: str,
    day: dt.date,
    host_dir: str,
    entries: list[layout.Entry],
    fs: Any = None,
    skipped: list[str] | None = None,
) -> tuple[int, int, int]:
    """One folder: (files before, files after, rows merged)."""
    checks = filecheck.check_all(entries, fs)
    gone = filecheck.replaced_names(checks)
    for c in checks:  # finish what a crashed run left: originals already replaced
        if (c.entry.folder, c.entry.name) in gone:
            remove(c.entry.path, fs)
    good, bad = filecheck.live(checks)
    prefix = "s3://" if fs is not None else ""
    if skipped is not None:
        skipped += [f"{prefix}{c.entry.path}: {c.problem}" for c in bad]
    if len(good) <= 1:
        return len(entries), len(good) + len(bad), 0
    parts, kept = [], []
    try:
        for c in good:
            raw = pq.read_table(c.entry.path, filesystem=fs).replace_schema_metadata(None)
            try:
                parts.append(to_arrow(name, raw))
            except ValueError as e:  # read by the analyzer, but not ours to rewrite: left
                kept.append(c)
                if skipped is not None:
                    skipped.append(f"{prefix}{c.entry.path}: {e}")
    except OSError:
        if all(exists(c.entry.path, fs) for c in good):
            raise
        return len(entries), len(entries), 0  # merged meanwhile by another compact (S3)
    good = [c for c in good if c not in kept]
    if len(good) <= 1:
        return len(entries), len(entries), 0
    data = pa.concat_tables(parts).sort_by(table(name).time_column)
    expected = sum(p.num_rows for p in parts)
    replaces = sorted({c.entry.name for c in good} | {n for c in good for n in c.replaces})
    new = str(write_compacted(bucket, host_dir, name, day, data, replaces))
    if fs is not None:  # the writer returns Path("s3://key"), which prints as "s3:/key"
        new = new.removeprefix("s3:").lstrip("/")
    got = _rows_written(new, fs)
    if got != expected:
        remove(new, fs)
        raise CompactError(f"{prefix}{new}: wrote {got} rows for {expected}; originals kept")
    for c in good:
        remove(c.entry.path, fs)
    return len(entries), 1 + len(bad) + len(kept), got


STALE_TEMP_S = 3600


def stale_temp(root: str, before: dt.date, tables: Iterable[str] = TABLES) -> list[Path]:
    """The ``.tmp-*`` files (a writer killed between writing and renaming) in the finished
    day folders of these tables of a local bucket."""
    files: list[Path] = []
    for name in tables:
        for date_dir in Path(root, name).glob("date=*"):
            try:
                if dt.date.fromisoformat(date_dir.name[5:]) >= before:
                    continue
            except ValueError:
                continue
            files += date_dir.glob(f"host=*/{layout.TMP_PREFIX}*")
    return files


def remove_old(files: Iterable[Path], min_age: float) -> int:
    """Delete those of ``files`` last written ``min_age`` seconds ago or more; how many."""
    import time

    gone = 0
    cutoff = time.time() - min_age
    for f in files:
        try:
            if f.is_file() and f.stat().st_mtime <= cutoff:
                f.unlink()
                gone += 1
        except OSError:
            continue  # gone already, or not ours to delete: leave it
    return gone


def compact(
    bucket: str | os.PathLike[str],
    before: dt.date | None = None,
    progress: Callable[[str], None] | None = None,
    alone: bool = False,
) -> Result:
    """Merge each finished day's files of a table and host into one. ``alone``: no other
    compact runs on this bucket (the caller holds its lock), so a temporary compacted
    file is one a stopped compact left, deleted whatever its age; every other temporary
    file (a collector's, still being written perhaps) once it is an hour old."""
    before = before or dt.datetime.now(dt.UTC).date()  # today is not finished
    res = Result()
    fs = s3_filesystem() if is_s3(bucket) else None
    if fs is None and not Path(bucket).is_dir():
        raise CompactError(f"{bucket}: no such bucket folder")
    root = root_of(bucket, fs)
    try:
        todo = groups(root, before, fs, bad_folders=True)
    except OSError as e:
        raise CompactError(f"{bucket}: cannot list the bucket: {e}") from e
    if fs is None:
        temp = stale_temp(root, before)
        ours = [f for f in temp if COMPACT_MARK in f.name]  # no other writer names these
        res.temp_removed = remove_old(ours, 0.0 if alone else STALE_TEMP_S) + remove_old(
            [f for f in temp if COMPACT_MARK not in f.name], STALE_TEMP_S
        )
    for (name, day, host_dir), entries in sorted(todo.items()):
        counts = compact_group(str(bucket), name, day, host_dir, entries, fs, res.skipped)
        res.add(f"{name}/{day}/host={host_dir}", counts, progress)
    for line in res.skipped:
        if progress:
            progress(f"left as it is: {line}")
    return res
