"""Write trace tables into a bucket, atomically.

Layout: ``<bucket>/<table>/date=YYYY-MM-DD/host=<host>/<table>-<start>-<uuid>.parquet``.

A file is written under a hidden temporary name in its final folder, flushed to
disk, then linked to its final name (which fails rather than overwrite), so a
reader globbing ``*.parquet`` never sees half a file and a crash leaves at most
a hidden temporary file behind. On S3 a file is one PUT under a unique name: an
object appears whole or not at all and never replaces another.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from collector import __version__
from collector.layout import (
    COMPACT_MARK,
    REPLACES_KEY,
    SCHEMA_KEY,
    TABLE_KEY,
    TMP_PREFIX,
    decode_host,
    encode_host,
    file_name,
    partition,
)
from collector.schema import SCHEMA_VERSION, table

__all__ = ["COMPACT_MARK", "TMP_PREFIX", "BucketWriter", "encode_host", "write_compacted"]
COMPRESSION = "zstd"


def _file_metadata(table_name: str, extra: dict[bytes, bytes] | None = None) -> dict[bytes, bytes]:
    return {
        SCHEMA_KEY: str(SCHEMA_VERSION).encode(),
        b"leakreport.collector_version": __version__.encode(),
        TABLE_KEY: table_name.encode(),
        **(extra or {}),
    }


def to_arrow(table_name: str, rows: Iterable[Mapping[str, Any]] | pa.Table) -> pa.Table:
    """Conform rows (dicts, or an Arrow table) to the declared schema.

    Missing columns become nulls; unknown columns are an error, so a typo in a
    producer fails loudly instead of silently dropping data.
    """
    spec = table(table_name)
    if isinstance(rows, pa.Table):
        extra = set(rows.column_names) - set(spec.columns)
        if extra:
            raise ValueError(f"{table_name}: unknown columns {sorted(extra)}")
        cols = []
        for f in spec.schema:
            if f.name in rows.column_names:
                cols.append(rows.column(f.name).cast(f.type))
            else:
                cols.append(pa.nulls(rows.num_rows, f.type))
        return pa.Table.from_arrays(cols, schema=spec.schema)
    rows = list(rows)
    for r in rows:
        extra = set(r) - set(spec.columns)
        if extra:
            raise ValueError(f"{table_name}: unknown columns {sorted(extra)}")
    return pa.Table.from_pylist(rows, schema=spec.schema)


class BucketWriter:
    """Writes trace tables for one host into a bucket: a local folder or ``s3://...``."""

    def __init__(self, bucket: str | os.PathLike[str], host: str) -> None:
        from collector.store import is_s3, s3_filesystem, s3_root

        self.s3 = s3_filesystem() if is_s3(bucket) else None
        self.s3_root = s3_root(str(bucket)) if self.s3 is not None else ""
        self.root = Path(bucket)  # a local bucket's folder (unused for S3)
        self.host = host  # the real name, in the ``host`` column; encoded in paths
        self.host_dir = encode_host(host)

    def _rel(self, kind: str, day: dt.date, name: str) -> str:
        """``<kind>/date=.../host=.../<name>``: where a file goes inside the bucket."""
        return f"{partition(kind, day, self.host, self.host_dir)}/{name}"

    def write(self, table_name: str, rows: Iterable[Mapping[str, Any]] | pa.Table) -> list[Path]:
        """Write rows, one file per UTC date they span. Returns the files written."""
        data = to_arrow(table_name, rows)
        if data.num_rows == 0:
            return []
        data = data.set_column(
            data.schema.get_field_index("host"),
            "host",
            pa.array([self.host] * data.num_rows, pa.string()),
        )
        # UTC dates, vectorised (no Python datetime per row)
        dates = pc.cast(data.column(table(table_name).time_column), pa.date32())
        days = sorted(pc.unique(dates).to_pylist())
        written = []
        for day in days:
            if len(days) == 1:
                part = data
            else:
                part = data.filter(pc.equal(dates, pa.scalar(day, pa.date32())))
            written.append(self._write_file(table_name, day, part))
        return written

    def _write_file(
        self,
        table_name: str,
        day: dt.date,
        data: pa.Table,
        extra: dict[bytes, bytes] | None = None,
        mark: str = "-",
        name: str | None = None,
    ) -> Path:
        rel = self._rel(table_name, day, name or _file_name(table_name, data, mark))
        data = data.replace_schema_metadata(_file_metadata(table_name, extra))
        if self.s3 is not None:  # one PUT: an object appears whole or not at all
            key = f"{self.s3_root}/{rel}"
            pq.write_table(data, key, filesystem=self.s3, compression=COMPRESSION)
            return Path("s3://" + key)
        final = self.root / rel
        folder = final.parent
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{TMP_PREFIX}{final.name}"
        pq.write_table(data, tmp, compression=COMPRESSION)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, final)  # fails if final exists: never overwrite
        finally:
            os.unlink(tmp)
        _fsync_dir(folder)
        return final

    def put_file(self, kind: str, day: dt.date, src: Path) -> str:
        """Copy a file that is not a table (a memory snapshot) to
        ``<bucket>/<kind>/date=.../host=.../<name>``, atomically; returns where it went."""
        data = src.read_bytes()
        if self.s3 is not None:
            key = f"{self.s3_root}/{self._rel(kind, day, src.name)}"
            with self.s3.open_output_stream(key) as out:
                out.write(data)
            return "s3://" + key
        final = self.root / self._rel(kind, day, src.name)
        folder = final.parent
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{TMP_PREFIX}{src.name}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(folder)
        return str(final)


def _file_name(table_name: str, data: pa.Table, mark: str) -> str:
    return file_name(table_name, pc.min(data.column(table(table_name).time_column)).as_py(), mark)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_compacted(
    bucket: str | os.PathLike[str],
    host_dir: str,
    table_name: str,
    day: dt.date,
    data: pa.Table,
    replaces: list[str],
) -> Path:
    """One file that stands for ``replaces`` (file names in the same folder): readers
    that see it skip those, so old and new are never counted together."""
    import json

    w = BucketWriter(bucket, decode_host(host_dir))
    w.host_dir = host_dir  # the folder it compacts, as it is named
    extra = {REPLACES_KEY: json.dumps(sorted(replaces)).encode()}
    return w._write_file(table_name, day, data, extra, mark=COMPACT_MARK)


def write_derived(
    bucket: str | os.PathLike[str],
    host_dir: str,
    table_name: str,
    day: dt.date,
    data: pa.Table,
    extra: dict[bytes, bytes],
) -> Path:
    """A derived table's file (the analyzer's rollup tier) for one host-day, written
    like a trace file (atomically, never overwriting) with ``extra`` metadata."""
    w = BucketWriter(bucket, decode_host(host_dir))
    w.host_dir = host_dir
    start = dt.datetime.combine(day, dt.time(), dt.UTC)
    name = file_name(table_name, start)
    return w._write_file(table_name, day, data, extra, name=name)


def replaced_by(path: str | os.PathLike[str], filesystem: Any = None) -> list[str]:
    """The file names a compacted file stands for (empty for an ordinary file)."""
    import json

    md = pq.read_schema(str(path), filesystem=filesystem).metadata or {}
    raw = md.get(REPLACES_KEY)
    return list(json.loads(raw)) if raw else []


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The leakreport key/values stamped in a trace file's Parquet metadata."""
    md = pq.read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in md.items() if k.startswith(b"leakreport.")}
