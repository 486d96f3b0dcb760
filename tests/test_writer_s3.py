"""collector/writer.py on S3: the object keys, their content and metadata, plain-file
copies, compacted and derived files, read back through pyarrow's own S3 client.

The store is moto in server mode, started in this process on 127.0.0.1 (a real HTTP
server on a free port, once per session): fast enough for ``make mutate``, which runs
these tests once per mutant of the writer's S3 paths.
"""

from __future__ import annotations

import datetime as dt
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from motoserver import s3_with_bucket

from collector import __version__
from collector.schema import SCHEMA_VERSION
from collector.writer import BucketWriter, replaced_by, to_arrow, write_compacted, write_derived

moto_server = pytest.importorskip("moto.server", reason="moto[server] missing")
T = dt.datetime(2026, 1, 5, 23, 59, 50, tzinfo=dt.UTC)
BUCKET = "wtraces"


@pytest.fixture(scope="session")
def s3fs() -> Iterator[Any]:
    """A pyarrow S3 filesystem on an empty moto server, with the AWS variables the
    writer reads set for the session (and restored after)."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # moto keeps its store per process: empty it (an earlier session in this process,
    # as under mutmut, may have left objects behind)
    urllib.request.urlopen(
        urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST"), timeout=10
    ).close()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    }
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        s3 = s3_with_bucket(host, port, BUCKET)
        try:
            yield s3
        finally:
            server.stop()


def _keys(s3: Any, prefix: str) -> list[str]:
    from pyarrow.fs import FileSelector, FileType

    infos = s3.get_file_info(FileSelector(prefix, recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == FileType.File)


def _row(ts: dt.datetime, used: int) -> dict:
    return {"ts": ts, "host": "ignored", "gpu_index": 0, "memory_used_bytes": used}


def test_write_puts_one_object_per_utc_date_under_the_prefix(s3fs) -> None:
    w = BucketWriter(f"s3://{BUCKET}/fleet/a/", "gpu-node/1")
    assert w.s3 is not None and w.s3_root == f"{BUCKET}/fleet/a"
    files = w.write("gpu_samples", [_row(T, 1), _row(T + dt.timedelta(seconds=20), 2)])
    keys = _keys(s3fs, f"{BUCKET}/fleet/a")
    assert [str(f) for f in files] == [f"s3:/{k}" for k in keys]  # what was written, only that
    assert [k.rsplit("/", 1)[0] for k in keys] == [
        f"{BUCKET}/fleet/a/gpu_samples/date=2026-01-05/host=gpu-node%2F1",
        f"{BUCKET}/fleet/a/gpu_samples/date=2026-01-06/host=gpu-node%2F1",
    ]
    assert keys[0].rsplit("/", 1)[1].startswith("gpu_samples-20260105T235950000000Z-")
    tables = [pq.read_table(k, filesystem=s3fs) for k in keys]
    assert [t.column("memory_used_bytes").to_pylist() for t in tables] == [[1], [2]]
    assert {h for t in tables for h in t.column("host").to_pylist()} == {"gpu-node/1"}
    md = {k.decode(): v.decode() for k, v in (tables[0].schema.metadata or {}).items()}
    assert md["leakreport.schema_version"] == str(SCHEMA_VERSION)
    assert md["leakreport.collector_version"] == __version__
    assert md["leakreport.table"] == "gpu_samples"
    with s3fs.open_input_file(keys[0]) as f:
        meta = pq.ParquetFile(f).metadata
        assert meta.row_group(0).column(0).compression == "ZSTD"
    assert w.write("gpu_samples", []) == [] and len(_keys(s3fs, f"{BUCKET}/fleet/a")) == 2


def test_a_bucket_without_a_prefix_and_a_local_folder_stay_apart(s3fs, tmp_path) -> None:
    (f,) = BucketWriter(f"s3://{BUCKET}", "h").write("gpu_samples", [_row(T, 7)])
    (key,) = _keys(s3fs, f"{BUCKET}/gpu_samples")
    assert str(f) == f"s3:/{key}" and key.startswith(f"{BUCKET}/gpu_samples/date=2026-01-05/")
    local = BucketWriter(tmp_path / "b", "h")
    assert local.s3 is None and local.s3_root == ""
    (g,) = local.write("gpu_samples", [_row(T, 8)])
    assert g.is_file() and g.is_relative_to(tmp_path / "b/gpu_samples/date=2026-01-05/host=h")
    assert _keys(s3fs, f"{BUCKET}/gpu_samples") == [key]  # the local write put nothing on S3


def test_put_file_copies_a_snapshot_object(s3fs, tmp_path) -> None:
    src = tmp_path / "snap.pickle"
    src.write_bytes(b"\x00snapshot")
    w = BucketWriter(f"s3://{BUCKET}/snaps", "gpu-node/2")
    where = w.put_file("memory_snapshots", T.date(), src)
    key = f"{BUCKET}/snaps/memory_snapshots/date=2026-01-05/host=gpu-node%2F2/snap.pickle"
    assert where == f"s3://{key}" and _keys(s3fs, f"{BUCKET}/snaps") == [key]
    with s3fs.open_input_stream(key) as f:
        assert f.read() == b"\x00snapshot"


def test_compacted_and_derived_objects_keep_the_folder_they_stand_for(s3fs) -> None:
    data = to_arrow("gpu_samples", [_row(T, 3)])
    # a folder named by an older collector, not as encode_host would name it today
    c = write_compacted(
        f"s3://{BUCKET}/cmp", "h%2fx", "gpu_samples", T.date(), data, ["b.parquet", "a.parquet"]
    )
    (key,) = _keys(s3fs, f"{BUCKET}/cmp")
    assert str(c) == f"s3:/{key}"
    assert key.startswith(f"{BUCKET}/cmp/gpu_samples/date=2026-01-05/host=h%2fx/gpu_samples-c")
    assert replaced_by(key, filesystem=s3fs) == ["a.parquet", "b.parquet"]
    d = write_derived(f"s3://{BUCKET}/der", "h", "gpu_samples", T.date(), data, {b"k": b"v"})
    (key,) = _keys(s3fs, f"{BUCKET}/der")
    assert str(d) == f"s3:/{key}"
    assert Path(key).name.startswith("gpu_samples-20260105T000000000000Z-")
    assert pq.read_schema(key, filesystem=s3fs).metadata[b"k"] == b"v"
    assert replaced_by(key, filesystem=s3fs) == []
