from __future__ import annotations

import datetime as dt
import uuid

import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.schema import SCHEMA_VERSION, TABLES
from collector.writer import BucketWriter, encode_host, read_metadata

T0 = dt.datetime(2026, 3, 1, 23, 59, 50, tzinfo=dt.UTC)


def _gpu_rows(n: int, start: dt.datetime = T0) -> list[dict]:
    return [
        {
            "ts": start + dt.timedelta(seconds=10 * i),
            "host": "x",
            "gpu_index": 0,
            "memory_used_bytes": i,
        }
        for i in range(n)
    ]


def test_every_table_has_time_and_host() -> None:
    for t in TABLES.values():
        assert t.schema.field("ts").type.tz == "UTC" and t.schema.field("ts").type.unit == "us"
        assert not t.schema.field("host").nullable


def test_layout_metadata_and_no_temp_files(tmp_path) -> None:
    files = BucketWriter(tmp_path, "gpu-01").write("gpu_samples", _gpu_rows(3))
    assert len(files) == 2  # the rows span midnight: one file per UTC date
    rels = sorted(str(f.relative_to(tmp_path)).rsplit("/", 1)[0] for f in files)
    assert rels == [
        "gpu_samples/date=2026-03-01/host=gpu-01",
        "gpu_samples/date=2026-03-02/host=gpu-01",
    ]
    md = read_metadata(files[0])
    assert md["leakreport.schema_version"] == str(SCHEMA_VERSION)
    assert md["leakreport.collector_version"]
    assert sum(pq.read_table(f).num_rows for f in files) == 3
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")]


def test_never_overwrites(tmp_path, monkeypatch) -> None:
    w = BucketWriter(tmp_path, "h")
    fixed = uuid.UUID(int=1)
    monkeypatch.setattr(uuid, "uuid4", lambda: fixed)
    (first,) = w.write("gpu_samples", _gpu_rows(1, T0 - dt.timedelta(hours=1)))
    before = first.read_bytes()
    with pytest.raises(FileExistsError):
        w.write("gpu_samples", _gpu_rows(1, T0 - dt.timedelta(hours=1)))
    assert first.read_bytes() == before
    assert not [p for p in tmp_path.rglob(".tmp-*")]


def test_unknown_column_is_an_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown columns"):
        BucketWriter(tmp_path, "h").write(
            "gpu_samples", [{"ts": T0, "host": "h", "gpu_index": 0, "typo": 1}]
        )


def test_host_column_is_the_real_name_and_the_folder_is_encoded(tmp_path) -> None:
    (f,) = BucketWriter(tmp_path, "a/b").write(
        "gpu_samples", _gpu_rows(1, T0 - dt.timedelta(hours=1))
    )
    assert pq.read_table(f).column("host").to_pylist() == ["a/b"]
    assert f.parent.name == "host=a%2Fb" and f.parent.parent.parent.parent == tmp_path


@pytest.mark.parametrize(
    "raw,folder",
    [
        ("gpu-01.example.com", "gpu-01.example.com"),
        ("../../etc", "%2E.%2F..%2Fetc"),
        ("a/b", "a%2Fb"),
        ("", "%"),
        ("host=x", "host%3Dx"),
        ("..", "%2E."),
        ("bad\nname\x00", "bad%0Aname%00"),
    ],
)
def test_host_folder_examples(raw: str, folder: str) -> None:
    assert encode_host(raw) == folder


@given(st.text())
def test_host_folder_is_one_safe_component(name: str) -> None:
    s = encode_host(name)
    assert s and "/" not in s and s not in (".", "..") and not s.startswith(".")
    assert all(c.isascii() and (c.isalnum() or c in "._-%~") for c in s)


@pytest.mark.parametrize("table", sorted(n for n, t in TABLES.items() if t.optional))
def test_files_written_before_an_optional_column_are_read(tmp_path, table) -> None:
    """An optional column is one older files lack: the view gives it as NULL of its type.
    allocator_samples.pid_ns (a BIGINT) once had no SQL type there, and every analysis of
    a bucket with older allocator files failed with a KeyError."""
    from analyzer.bucket import open_bucket

    spec = TABLES[table]
    row: dict = {f.name: None for f in spec.schema}
    for f in spec.schema:
        if not f.nullable:
            row[f.name] = _SAMPLE[str(f.type)]
    (path,) = BucketWriter(tmp_path, "x").write(table, [row])
    old = pq.read_table(path)
    old = old.drop_columns(list(spec.optional)).replace_schema_metadata(old.schema.metadata)
    pq.write_table(old, path)
    con, counts = open_bucket(tmp_path)
    assert counts[table] == 1
    got = con.execute(f"SELECT {', '.join(spec.optional)} FROM {table}").fetchall()
    assert got == [tuple(None for _ in spec.optional)]


_SAMPLE = {
    "timestamp[us, tz=UTC]": T0,
    "string": "x",
    "int64": 1,
    "int32": 1,
    "double": 1.0,
    "bool": True,
    "map<string, string>": {},
}
