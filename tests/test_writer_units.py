"""collector/writer.py in detail: schema conforming, partitions by UTC date, atomic
files that never overwrite, compaction and derived files, plain-file copies."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collector import __version__
from collector.layout import COMPACT_MARK, TMP_PREFIX
from collector.schema import SCHEMA_VERSION
from collector.writer import (
    BucketWriter,
    _fsync_dir,
    read_metadata,
    replaced_by,
    to_arrow,
    write_compacted,
    write_derived,
)

T = dt.datetime(2026, 1, 5, 23, 59, 50, tzinfo=dt.UTC)


def _row(ts: dt.datetime, used: int = 1, host: str = "ignored") -> dict:
    return {"ts": ts, "host": host, "gpu_index": 0, "memory_used_bytes": used}


def test_to_arrow_fills_missing_columns_and_refuses_unknown_ones() -> None:
    t = to_arrow("gpu_samples", [_row(T)])
    assert t.column("memory_total_bytes").null_count == 1 and t.num_rows == 1
    with pytest.raises(ValueError, match=r"gpu_samples: unknown columns \['bogus'\]"):
        to_arrow("gpu_samples", [{**_row(T), "bogus": 1}])
    arrow = pa.table({"ts": pa.array([T]), "gpu_index": pa.array([3], pa.int8())})
    t = to_arrow("gpu_samples", arrow)
    assert t.schema == to_arrow("gpu_samples", []).schema  # cast to the declared types
    assert t.column("gpu_index").to_pylist() == [3] and t.column("host").null_count == 1
    with pytest.raises(ValueError, match=r"gpu_samples: unknown columns \['zz'\]"):
        to_arrow("gpu_samples", arrow.append_column("zz", pa.array([1])))


def test_write_splits_by_utc_date_sets_the_host_and_leaves_no_temp(tmp_path) -> None:
    w = BucketWriter(tmp_path, "gpu-node/1")
    files = w.write("gpu_samples", [_row(T, 1), _row(T + dt.timedelta(seconds=20), 2)])
    assert [f.parent.relative_to(tmp_path).as_posix() for f in files] == [
        "gpu_samples/date=2026-01-05/host=gpu-node%2F1",
        "gpu_samples/date=2026-01-06/host=gpu-node%2F1",
    ]
    assert [pq.read_table(f).column("memory_used_bytes").to_pylist() for f in files] == [[1], [2]]
    assert {h for f in files for h in pq.read_table(f).column("host").to_pylist()} == {"gpu-node/1"}
    assert all(f.name.startswith("gpu_samples-20260105T235950") for f in files[:1])
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(TMP_PREFIX)]
    assert w.write("gpu_samples", []) == []
    one = w.write("gpu_samples", [_row(T, 5), _row(T, 6)])
    assert len(one) == 1 and pq.read_table(one[0]).num_rows == 2


def test_files_carry_their_metadata_and_are_never_overwritten(tmp_path) -> None:
    w = BucketWriter(tmp_path, "h")
    (f,) = w.write("gpu_samples", [_row(T)])
    assert read_metadata(f) == {
        "leakreport.schema_version": str(SCHEMA_VERSION),
        "leakreport.collector_version": __version__,
        "leakreport.table": "gpu_samples",
    }
    assert replaced_by(f) == [] and replaced_by(str(f)) == []
    assert pq.ParquetFile(f).metadata.row_group(0).column(0).compression == "ZSTD"
    data = pq.read_table(f)
    with pytest.raises(FileExistsError):
        w._write_file("gpu_samples", T.date(), data, name=f.name)
    assert pq.read_table(f).equals(data)  # the original is untouched
    assert not [p for p in f.parent.iterdir() if p.name.startswith(TMP_PREFIX)]


def test_compacted_and_derived_files(tmp_path) -> None:
    data = to_arrow("gpu_samples", [_row(T)])
    c = write_compacted(
        tmp_path, "h%2Fx", "gpu_samples", T.date(), data, ["b.parquet", "a.parquet"]
    )
    assert c.parent.name == "host=h%2Fx" and COMPACT_MARK in c.name
    assert replaced_by(c) == ["a.parquet", "b.parquet"]
    assert json.loads(read_metadata(c)["leakreport.replaces"]) == ["a.parquet", "b.parquet"]
    d = write_derived(tmp_path, "h", "gpu_samples", T.date(), data, {b"leakreport.tier": b"x"})
    assert d.name.startswith("gpu_samples-20260105T000000000000Z-")
    assert read_metadata(d)["leakreport.tier"] == "x"
    assert d.parent.relative_to(tmp_path).as_posix() == "gpu_samples/date=2026-01-05/host=h"
    # a folder named otherwise than encode_host would name it today is compacted in place
    old = write_compacted(tmp_path, "h%2fx", "gpu_samples", T.date(), data, ["a.parquet"])
    assert old.parent.relative_to(tmp_path).as_posix() == "gpu_samples/date=2026-01-05/host=h%2fx"
    new = write_derived(tmp_path, "h%2fx", "gpu_samples", T.date(), data, {})
    assert new.parent == old.parent


def test_put_file_copies_atomically(tmp_path) -> None:
    src = tmp_path / "snap.pickle"
    src.write_bytes(b"\x00snapshot")
    w = BucketWriter(tmp_path / "b", "gpu/h")
    where = w.put_file("memory_snapshots", T.date(), src)
    assert Path(where) == tmp_path / "b/memory_snapshots/date=2026-01-05/host=gpu%2Fh/snap.pickle"
    assert Path(where).read_bytes() == b"\x00snapshot"
    assert not [p for p in (tmp_path / "b").rglob("*") if p.name.startswith(TMP_PREFIX)]
    src.write_bytes(b"new")
    w.put_file("memory_snapshots", T.date(), src)  # a newer copy replaces the old one
    assert Path(where).read_bytes() == b"new"


def test_fsync_of_a_missing_folder_is_quiet(tmp_path) -> None:
    _fsync_dir(tmp_path / "gone")  # nothing to sync: no error
    _fsync_dir(tmp_path)
