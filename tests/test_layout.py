"""The bucket layout: reversible host folders, listing, compaction marks, schema checks."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector import filecheck, layout
from collector.schema import SCHEMA_VERSION, TABLES
from collector.writer import BucketWriter, to_arrow

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def _rows(n: int, host: str = "x", start: dt.datetime = T0) -> list[dict]:
    return [
        {"ts": start + dt.timedelta(seconds=10 * i), "host": host, "gpu_index": 0} for i in range(n)
    ]


@pytest.mark.parametrize(
    "names",
    [
        ("gpu-nodé-1", "gpu-nodè-1"),
        ("", ".", "..", "unknown", "%", "_"),
        ("a/b", "a_b", "a%2Fb", "a b"),
        ("host=x", "host_x"),
        ("bad\nname\x00", "bad_name_"),
    ],
)
def test_distinct_names_stay_distinct_and_come_back(names: tuple[str, ...]) -> None:
    enc = [layout.encode_host(n) for n in names]
    assert len(set(enc)) == len(names)
    assert [layout.decode_host(e) for e in enc] == list(names)


@given(st.text(max_size=80))
def test_every_name_is_one_safe_component(name: str) -> None:
    s = layout.encode_host(name)
    assert s and "/" not in s and s not in (".", "..") and not s.startswith(".")
    assert all(c.isascii() and (c.isalnum() or c in "._-%~") for c in s)
    assert len(s) <= layout.MAX_COMPONENT
    if "~" not in s:  # names that fit are reversible; longer ones end in a hash
        assert layout.decode_host(s) == name


def test_very_long_names_stay_distinct_and_short() -> None:
    a, b = "é" * 300 + "a", "é" * 300 + "b"
    ea, eb = layout.encode_host(a), layout.encode_host(b)
    assert ea != eb and len(ea) <= layout.MAX_COMPONENT and "~" in ea


def test_folders_written_before_encoding_read_as_themselves() -> None:
    assert layout.decode_host("gpu_01") == "gpu_01"
    assert layout.decode_host("a%zz") == "a%zz"


def test_writer_lists_back_by_real_name(tmp_path) -> None:
    for host in ("gpu-nodé-1", "gpu-nodè-1", ".."):
        BucketWriter(tmp_path, host).write("gpu_samples", _rows(2))
    entries = layout.list_entries(str(tmp_path), "gpu_samples")
    assert sorted(e.host for e in entries) == sorted(["gpu-nodé-1", "gpu-nodè-1", ".."])
    # every file stays inside the bucket, and the host column keeps the real name
    for e in entries:
        assert e.path.startswith(str(tmp_path / "gpu_samples" / "date=2026-03-01" / "host="))
        assert pq.read_table(e.path).column("host").to_pylist() == [e.host, e.host]
    only = layout.list_entries(str(tmp_path), "gpu_samples", host_ok=lambda h: h == "gpu-nodé-1")
    assert [e.host for e in only] == ["gpu-nodé-1"]
    assert layout.hosts_in(str(tmp_path), TABLES) == sorted(["gpu-nodé-1", "gpu-nodè-1", ".."])


def test_hosts_in_names_hosts_with_a_trace_file_in_scope(tmp_path) -> None:
    """A host counts once any folder of it holds a trace file, in whichever table or day;
    folders holding only a temporary file, or nothing, name no host."""
    BucketWriter(tmp_path, "a").write("gpu_samples", _rows(2, "a"))
    metric = {"ts": T0, "host": "b", "name": "m", "labels": {}, "value": 1.0}
    BucketWriter(tmp_path, "b").write("metric_samples", [metric])
    BucketWriter(tmp_path, "c").write("gpu_samples", _rows(2, "c", T0 + dt.timedelta(days=3)))
    empty = tmp_path / "gpu_samples" / "date=2026-03-01" / "host=d"
    empty.mkdir()
    (empty / f"{layout.TMP_PREFIX}gpu_samples-x.parquet").write_bytes(b"half")
    (tmp_path / "processes" / "date=2026-03-01" / "host=e").mkdir(parents=True)
    want = sorted(e.host for t in TABLES for e in layout.list_entries(str(tmp_path), t))
    assert want == ["a", "b", "c"]
    assert layout.hosts_in(str(tmp_path), TABLES) == want
    late = dt.date(2026, 3, 2)
    assert layout.hosts_in(str(tmp_path), TABLES, date_ok=lambda d: d >= late) == ["c"]
    assert layout.hosts_in(str(tmp_path), TABLES, host_ok=lambda h: h != "a") == ["b", "c"]


def test_parse_ignores_temporary_and_foreign_paths() -> None:
    good = "b/gpu_samples/date=2026-03-01/host=h%2F1/gpu_samples-x.parquet"
    assert layout.parse(good) == (
        "gpu_samples",
        dt.date(2026, 3, 1),
        "h%2F1",
        "gpu_samples-x.parquet",
    )
    assert layout.parse("b/gpu_samples/date=2026-03-01/host=h/.tmp-x.parquet") is None
    assert layout.parse("b/gpu_samples/date=yesterday/host=h/x.parquet") is None
    assert layout.parse("b/gpu_samples/host=h/x.parquet") is None


def _write_raw(path, table: pa.Table, meta: dict[bytes, bytes] | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata(meta), path)


def _meta(table_name: str = "gpu_samples", version: int = SCHEMA_VERSION) -> dict[bytes, bytes]:
    return {layout.SCHEMA_KEY: str(version).encode(), layout.TABLE_KEY: table_name.encode()}


def _check(tmp_path, name: str) -> str | None:
    (e,) = [e for e in layout.list_entries(str(tmp_path), "gpu_samples") if e.name == name]
    return filecheck.check_file(e).problem


def test_schema_check_names_what_is_wrong(tmp_path) -> None:
    folder = tmp_path / "gpu_samples" / "date=2026-03-01" / "host=x"
    good = to_arrow("gpu_samples", _rows(3))
    _write_raw(folder / "ok.parquet", good, _meta())
    (folder / "empty.parquet").write_bytes(b"")
    (folder / "cut.parquet").write_bytes((folder / "ok.parquet").read_bytes()[:-40])
    _write_raw(folder / "foreign.parquet", good, None)
    _write_raw(folder / "v9.parquet", good, _meta(version=99))
    _write_raw(folder / "wrong-table.parquet", good, _meta("log_lines"))
    mib = good.set_column(
        good.schema.get_field_index("memory_used_bytes"),
        "memory_used_bytes",
        pa.array([1.5] * 3, pa.float64()),
    )
    _write_raw(folder / "float.parquet", mib, _meta())
    _write_raw(folder / "nocol.parquet", good.drop_columns(["gpu_index"]), _meta())
    text_ts = good.set_column(0, "ts", pa.array([str(t) for t in good.column("ts").to_pylist()]))
    _write_raw(folder / "textts.parquet", text_ts, _meta())
    assert _check(tmp_path, "ok.parquet") is None
    expected = {
        "empty.parquet": "unreadable Parquet",
        "cut.parquet": "unreadable Parquet",
        "foreign.parquet": "not a leakreport trace file",
        "v9.parquet": "schema_version 99",
        "wrong-table.parquet": "a 'log_lines' file",
        "float.parquet": "column 'memory_used_bytes' is double",
        "nocol.parquet": "column 'gpu_index' is missing",
        "textts.parquet": "column 'ts' is string",
    }
    for name, words in expected.items():
        assert words in (_check(tmp_path, name) or ""), name


def test_footer_gives_time_range_and_replaced_files(tmp_path) -> None:
    (f,) = BucketWriter(tmp_path, "h").write("gpu_samples", _rows(4))
    (e,) = layout.list_entries(str(tmp_path), "gpu_samples")
    c = filecheck.check_file(e)
    assert (c.rows, c.ts_min, c.ts_max) == (4, T0, T0 + dt.timedelta(seconds=30))
    assert c.replaces == []
    folder = f.parent
    meta = {**_meta(), layout.REPLACES_KEY: json.dumps([f.name]).encode()}
    _write_raw(
        folder / "gpu_samples-compact-x.parquet", to_arrow("gpu_samples", _rows(4, host="h")), meta
    )
    good, bad = filecheck.live(
        filecheck.check_all(layout.list_entries(str(tmp_path), "gpu_samples"))
    )
    assert [c.entry.name for c in good] == ["gpu_samples-compact-x.parquet"] and not bad


def test_footer_tells_which_files_can_name_a_pod(tmp_path) -> None:
    """A file whose pod statistics show every row NULL, or that has no pod column, names
    no pod; one pod in any row group does. The stored check keeps the answer."""
    from analyzer import tierindex

    folder = tmp_path / "gpu_samples" / "date=2026-03-01" / "host=x"
    rows = _rows(6)
    _write_raw(folder / "none.parquet", to_arrow("gpu_samples", rows), _meta())
    labelled = [{**r, "pod": "srv-a" if i == 5 else None} for i, r in enumerate(rows)]
    t = to_arrow("gpu_samples", labelled)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(t.replace_schema_metadata(_meta()), folder / "late.parquet", row_group_size=2)
    _write_raw(folder / "nocol.parquet", t.drop_columns(["namespace", "pod", "container"]), _meta())
    checks = {
        c.entry.name: c
        for c in filecheck.check_all(layout.list_entries(str(tmp_path), "gpu_samples"))
    }
    assert pq.ParquetFile(folder / "late.parquet").metadata.num_row_groups == 3
    assert {n: (c.problem, c.pods) for n, c in checks.items()} == {
        "none.parquet": (None, False),
        "late.parquet": (None, True),
        "nocol.parquet": (None, False),
    }
    for c in checks.values():
        assert tierindex._decode(c.entry, tierindex._encode(c)) == c


def test_an_entry_is_the_same_file_whatever_its_stamp() -> None:
    """The size and time the S3 listing gives ride along, but do not change which file it is."""
    a = layout.Entry(
        "b/gpu_samples/date=2026-03-01/host=x/f.parquet", "gpu_samples", T0.date(), "x"
    )
    b = layout.Entry(a.path, a.table, a.day, a.host_dir, (10, 20))
    assert a == b and hash(a) == hash(b) and {a, b} == {a}


def test_stored_checks_are_tied_to_the_check_version(monkeypatch) -> None:
    """A stored check_file verdict is reused only by a reader that would give the same one."""
    fp = filecheck.check_fingerprint()
    assert fp == filecheck.check_fingerprint()
    monkeypatch.setattr(filecheck, "CHECK_VERSION", filecheck.CHECK_VERSION + 1)
    assert filecheck.check_fingerprint() != fp
    monkeypatch.undo()
    import dataclasses

    drifted = dataclasses.replace(TABLES["gpu_samples"], time_column="other")
    monkeypatch.setitem(filecheck.TABLES, "gpu_samples", drifted)
    assert filecheck.check_fingerprint() != fp


def test_files_written_alike_have_one_schema(tmp_path) -> None:
    """Files of the same columns, order and types share a schema hash (read without
    reconciling); one that lacks an optional column or stores another time unit does not."""
    folder = tmp_path / "gpu_samples" / "date=2026-03-01" / "host=x"
    good = to_arrow("gpu_samples", _rows(3))
    for i in range(3):
        _write_raw(folder / f"same{i}.parquet", to_arrow("gpu_samples", _rows(2 + i)), _meta())
    checks = filecheck.check_all(layout.list_entries(str(tmp_path), "gpu_samples"))
    assert filecheck.one_schema(checks) and all(c.problem is None for c in checks)
    old = good.drop_columns(["pod"])
    _write_raw(folder / "old.parquet", old, _meta())
    ns = good.set_column(0, "ts", good.column("ts").cast(pa.timestamp("ns", tz="UTC")))
    _write_raw(folder / "ns.parquet", ns, _meta())
    for extra in ("old.parquet", "ns.parquet"):
        (c,) = [
            filecheck.check_file(e)
            for e in layout.list_entries(str(tmp_path), "gpu_samples")
            if e.name == extra
        ]
        assert c.problem is None, extra  # readable: only not alike
        assert not filecheck.one_schema([*checks, c]), extra
    assert not filecheck.one_schema([*checks, filecheck.FileCheck(checks[0].entry, "unreadable")])


@pytest.mark.parametrize("host", ["gpu-" + "n" * 240, "", "gpu/1", "plain"])
def test_a_host_is_found_by_its_name_whatever_its_folder(tmp_path, host: str) -> None:
    """Whoever looks a host's files up by its real name finds them: an analysis scoped to
    it, and the Prometheus import's check for an earlier overlapping import (a name too
    long for a folder decodes to its cut form, not to itself)."""
    from analyzer.bucket import Scope
    from collector import promruns
    from collector.writer import BucketWriter

    t = dt.datetime(2026, 11, 23, 12, tzinfo=dt.UTC)
    run = promruns.run_id(t.timestamp(), t.timestamp() + 3600, t)
    row = {"ts": t, "host": host, "run_id": run, "source": "prometheus:x", "status": "ok"}
    BucketWriter(tmp_path, host).write("collector_runs", [row])
    (e,) = layout.list_entries(str(tmp_path), "collector_runs")
    assert Scope(hosts=[host]).host_ok(e.host) and not Scope(hosts=["other"]).host_ok(e.host)
    said = promruns.overlapping(tmp_path, "prometheus:x", {host}, t.timestamp(), t.timestamp() + 60)
    assert said is not None and "already holds" in said


def test_remove_tolerates_a_file_already_gone_and_prunes_empty_folders(tmp_path) -> None:
    from collector.store import remove

    table = tmp_path / "tier_gpu_buckets"
    a = table / "date=2026-11-30" / "host=a" / "x.parquet"
    b = table / "date=2026-11-30" / "host=b" / "y.parquet"
    for f in (a, b):
        f.parent.mkdir(parents=True)
        f.write_bytes(b"x")
    remove(str(a), prune=True)
    assert not a.parent.exists() and b.exists()  # host=a went; the date folder still holds b
    remove(str(a), prune=True)  # gone already: another rollup took it
    remove(str(b), prune=True)
    assert not (table / "date=2026-11-30").exists() and table.is_dir()
    keep = table / "date=2026-12-01" / "host=c"
    keep.mkdir(parents=True)
    remove(str(keep / "never.parquet"))  # no prune: folders stay
    assert keep.is_dir()
    with pytest.raises(IsADirectoryError):
        remove(str(table / "date=2026-12-01"))  # not a file: a real error


@pytest.mark.parametrize("delay", [0.0, 0.003])
def test_a_folder_s_footers_are_read_in_turn_unless_each_waits_on_io(
    tmp_path, monkeypatch, delay
) -> None:
    """Fast footer reads (the page cache) stay on the calling thread, where threads would
    only contend for the GIL; slow ones (a network mount: here, each read made to wait 3 ms)
    go parallel after the probe. Either way every file is checked once, in order."""
    import threading
    import time

    w = BucketWriter(tmp_path, "h")
    for i in range(filecheck.PROBE_FILES + 40):
        w.write("gpu_samples", _rows(2, start=T0 + dt.timedelta(minutes=i)))
    entries = layout.list_entries(str(tmp_path), "gpu_samples")
    assert len(entries) == filecheck.PROBE_FILES + 40
    real = filecheck.check_file
    seen: list[tuple[str, int]] = []

    def check(e: layout.Entry, fs: object = None) -> filecheck.FileCheck:
        time.sleep(delay)
        seen.append((e.name, threading.get_ident()))
        return real(e, fs)

    monkeypatch.setattr(filecheck, "check_file", check)
    checks = filecheck.check_all(entries)
    assert [c.entry for c in checks] == entries
    assert all(c.problem is None and c.rows == 2 for c in checks)
    assert sorted(n for n, _ in seen) == sorted(e.name for e in entries)  # each once
    me = threading.get_ident()
    probe = {t for n, t in seen[: filecheck.PROBE_FILES]}
    rest = {t for n, t in seen[filecheck.PROBE_FILES :]}
    assert probe == {me}
    if delay:
        assert me not in rest and len(rest) > 1  # the pool's threads
    else:
        assert rest == {me}
