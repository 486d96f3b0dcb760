"""`leakreport compact`: merge a finished day's many small per-run files.

Per table/date/host folder: read every file, write one sorted file that names
the files it replaces in its Parquet metadata, check its row count, and only
then delete the originals. Readers skip replaced files as soon as the new one
exists, so at every instant they count each row once: old files, or the new
one, never both and never neither. A crash leaves the new file plus originals
that readers already skip; the next run deletes them. On S3 the same holds per
object: the new object appears in one PUT, readers skip what it replaces.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from collector.schema import TABLES, table
from collector.store import is_s3, s3_filesystem, s3_root
from collector.writer import COMPACT_MARK, TMP_PREFIX, replaced_by, to_arrow, write_compacted


class CompactError(Exception):
    pass


@dataclass
class Result:
    folders: int = 0
    files_before: int = 0
    files_after: int = 0
    rows: int = 0

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


def _folders(bucket: Path, before: dt.date):
    for name in TABLES:
        for date_dir in sorted((bucket / name).glob("date=*")):
            try:
                day = dt.date.fromisoformat(date_dir.name[5:])
            except ValueError:
                continue
            if day < before:
                for host_dir in sorted(date_dir.glob("host=*")):
                    yield name, day, host_dir


def compact_folder(name: str, day: dt.date, folder: Path) -> tuple[int, int, int]:
    files = sorted(f for f in folder.glob("*.parquet") if not f.name.startswith(TMP_PREFIX))
    gone = {n for f in files if COMPACT_MARK in f.name for n in replaced_by(f)}
    for f in files:  # finish what a crashed run left: originals already replaced
        if f.name in gone:
            f.unlink()
    live = [f for f in files if f.name not in gone]
    if len(live) <= 1:
        return len(files), len(live), 0
    parts = [to_arrow(name, pq.read_table(f).replace_schema_metadata(None)) for f in live]
    data = pa.concat_tables(parts).sort_by(table(name).time_column)
    expected = sum(p.num_rows for p in parts)
    replaces = sorted(
        {f.name for f in live} | {n for f in live if COMPACT_MARK in f.name for n in replaced_by(f)}
    )
    new = write_compacted(folder.parents[2], folder.name[5:], name, day, data, replaces)
    got = pq.read_metadata(new).num_rows
    if got != expected:
        new.unlink()
        raise CompactError(f"{new}: wrote {got} rows for {expected}; originals kept")
    for f in live:
        f.unlink()
    return len(files), 1, got


def _s3_groups(fs: Any, root: str, before: dt.date) -> dict[tuple[str, dt.date, str], list[str]]:
    from pyarrow.fs import FileSelector, FileType

    groups: dict[tuple[str, dt.date, str], list[str]] = {}
    for name in TABLES:
        sel = FileSelector(f"{root}/{name}".lstrip("/"), recursive=True, allow_not_found=True)
        for info in fs.get_file_info(sel):
            parts = info.path.split("/")
            if (
                info.type != FileType.File
                or not info.base_name.endswith(".parquet")
                or info.base_name.startswith(TMP_PREFIX)
                or len(parts) < 3
                or not parts[-3].startswith("date=")
                or not parts[-2].startswith("host=")
            ):
                continue
            try:
                day = dt.date.fromisoformat(parts[-3][5:])
            except ValueError:
                continue
            if day < before:
                groups.setdefault((name, day, parts[-2][5:]), []).append(info.path)
    return groups


def _delete(fs: Any, key: str) -> None:
    fs.delete_file(key)


def compact_s3_group(
    fs: Any, bucket: str, name: str, day: dt.date, host: str, keys: list[str]
) -> tuple[int, int, int]:
    """The same steps as :func:`compact_folder`, on objects: one PUT makes the new
    object appear whole; originals are deleted only after its row count checks out."""
    folder = keys[0].rsplit("/", 1)[0]
    gone = {
        f"{folder}/{n}" for k in keys if COMPACT_MARK in k for n in replaced_by(k, filesystem=fs)
    }
    for k in keys:
        if k in gone:
            _delete(fs, k)
    live = sorted(k for k in keys if k not in gone)
    if len(live) <= 1:
        return len(keys), len(live), 0
    parts = [
        to_arrow(name, pq.read_table(k, filesystem=fs).replace_schema_metadata(None)) for k in live
    ]
    data = pa.concat_tables(parts).sort_by(table(name).time_column)
    expected = sum(p.num_rows for p in parts)
    replaces = sorted(
        {k.rsplit("/", 1)[1] for k in live}
        | {n for k in live if COMPACT_MARK in k for n in replaced_by(k, filesystem=fs)}
    )
    # the writer returns Path("s3://key"), which a Path prints as "s3:/key"
    new = (
        str(write_compacted(bucket, host, name, day, data, replaces))
        .removeprefix("s3:")
        .lstrip("/")
    )
    got = pq.read_metadata(new, filesystem=fs).num_rows
    if got != expected:
        fs.delete_file(new)
        raise CompactError(f"s3://{new}: wrote {got} rows for {expected}; originals kept")
    for k in live:
        _delete(fs, k)
    return len(keys), 1, got


def compact(
    bucket: str | os.PathLike[str],
    before: dt.date | None = None,
    progress: Callable[[str], None] | None = None,
) -> Result:
    before = before or dt.datetime.now(dt.UTC).date()  # today is not finished
    res = Result()
    if is_s3(bucket):
        fs = s3_filesystem()
        try:
            groups = _s3_groups(fs, s3_root(str(bucket)), before)
        except OSError as e:
            raise CompactError(f"{bucket}: cannot list the S3 bucket: {e}") from e
        for (name, day, host), keys in sorted(groups.items()):
            counts = compact_s3_group(fs, str(bucket), name, day, host, keys)
            res.add(f"{name}/{day}/host={host}", counts, progress)
        return res
    root = Path(bucket)
    if not root.is_dir():
        raise CompactError(f"{root}: no such bucket folder")
    for name, day, folder in _folders(root, before):
        res.add(f"{name}/{day}/{folder.name}", compact_folder(name, day, folder), progress)
    return res
