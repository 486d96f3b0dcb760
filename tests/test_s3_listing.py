"""Listing a table on a real S3-compatible server (moto, 127.0.0.1): the same files as in a
folder of the same layout, whatever the scope, and a narrow scope lists only its prefixes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from motoserver import MOTO, moto_s3, s3_with_bucket

from collector import layout, layoutscan

pytestmark = pytest.mark.skipif(MOTO is None, reason="moto[server] missing")

DAYS = [dt.date(2026, 11, 1) + dt.timedelta(days=i) for i in range(10)]
HOSTS = ["gpu-a", "gpu-b", "gpu/1", "gpu-c", "gpu-d"]
BUCKET = "listing"


def _relpaths() -> list[str]:
    out = []
    for day in DAYS:
        for host in HOSTS:
            folder = layout.partition("gpu_samples", day, host)
            out += [f"{folder}/f{i}.parquet" for i in range(2)]
            out.append(f"{folder}/{layout.TMP_PREFIX}x.parquet")  # never listed
    out.append("gpu_samples/date=2026-11-02/stray.parquet")  # not in a host folder
    out.append("proc_samples/date=2026-11-02/host=gpu-a/p.parquet")  # another table
    return out


class Counting:
    """A file system that counts what its listings return (S3 answers 1,000 keys a request)."""

    def __init__(self, fs: Any) -> None:
        self.fs, self.listings, self.keys = fs, 0, 0

    def get_file_info(self, what: Any) -> Any:
        got = self.fs.get_file_info(what)
        self.listings += 1
        self.keys += len(got) if isinstance(got, list) else 1
        return got


@pytest.fixture(scope="module")
def buckets(tmp_path_factory):
    local = tmp_path_factory.mktemp("local")
    with moto_s3(BUCKET) as env:
        host, port = env["AWS_ENDPOINT_URL"].removeprefix("http://").split(":")
        s3 = s3_with_bucket(host, int(port), BUCKET)
        for rel in _relpaths():
            (local / rel).parent.mkdir(parents=True, exist_ok=True)
            (local / rel).write_bytes(b"x")
            with s3.open_output_stream(f"{BUCKET}/{rel}") as f:
                f.write(b"x")
        yield str(local), s3


def _one(d: dt.date) -> layout.DateOk:
    return lambda x: x == d


SCOPES: dict[str, tuple[layout.DateOk, layout.HostOk]] = {
    "everything": (layout.ANY, layout.ANY),
    "one day": (_one(DAYS[3]), layout.ANY),
    "most days": (lambda d: d >= DAYS[2], layout.ANY),
    "one host": (layout.ANY, lambda h: h == "gpu/1"),
    "most hosts": (layout.ANY, lambda h: h != "gpu-a"),
    "one day, one host": (_one(DAYS[5]), lambda h: h == "gpu-b"),
    "a day not there": (_one(dt.date(2025, 1, 1)), layout.ANY),
    "filters that keep all": (lambda _d: True, lambda _h: True),
}


@pytest.mark.parametrize("scope", SCOPES)
def test_s3_lists_what_a_folder_lists(buckets, scope: str) -> None:
    local, s3 = buckets
    date_ok, host_ok = SCOPES[scope]
    here = layout.list_entries(local, "gpu_samples", None, date_ok, host_ok)
    there = layout.list_entries(BUCKET, "gpu_samples", s3, date_ok, host_ok)
    key = [(e.path.removeprefix(local).strip("/"), e.day, e.host) for e in here]
    assert [(e.path.removeprefix(BUCKET).strip("/"), e.day, e.host) for e in there] == key
    assert all(e.stamp is not None for e in there)  # size and time come with the listing
    if scope == "everything":
        assert len(there) == len(DAYS) * len(HOSTS) * 2


def test_a_narrow_scope_lists_only_its_prefixes(buckets) -> None:
    _local, s3 = buckets
    whole = Counting(s3)
    layout.list_entries(BUCKET, "gpu_samples", whole)
    assert whole.listings == 1 and whole.keys >= len(DAYS) * len(HOSTS) * 3
    narrow = Counting(s3)
    got = layout.list_entries(BUCKET, "gpu_samples", narrow, _one(DAYS[5]), lambda h: h == "gpu-b")
    assert len(got) == 2
    # the dates, the hosts of one date, then one host folder's three files
    assert narrow.listings == 3 and narrow.keys == len(DAYS) + len(HOSTS) + 3
    day = Counting(s3)
    assert len(layout.list_entries(BUCKET, "gpu_samples", day, _one(DAYS[5]))) == 10
    assert day.keys < whole.keys / 5 and day.listings == 2  # the dates, then that day
    host = Counting(s3)  # a host over every day: one listing, not two a day
    got = layout.list_entries(BUCKET, "gpu_samples", host, layout.ANY, lambda h: h == "gpu-b")
    assert len(got) == 20 and host.listings == 1


def test_one_folder_is_listed_alone(buckets) -> None:
    local, s3 = buckets
    host_dir = layout.encode_host("gpu/1")
    here = layout.folder_entries(local, "gpu_samples", DAYS[0], host_dir)
    counted = Counting(s3)
    there = layout.folder_entries(BUCKET, "gpu_samples", DAYS[0], host_dir, counted)
    assert [e.name for e in here] == [e.name for e in there] == ["f0.parquet", "f1.parquet"]
    assert {e.host for e in there} == {"gpu/1"}
    assert counted.listings == 1 and counted.keys == 3
    assert layout.folder_entries(BUCKET, "gpu_samples", DAYS[0], "nobody", s3) == []
    assert layout.folder_entries(local, "gpu_samples", DAYS[0], "nobody") == []


def test_objects_are_staged_several_at_a_time_whole_or_not_at_all(buckets, tmp_path) -> None:
    """stage() fetches objects STAGE_THREADS at a time (in turn, 200 objects behind a 20 ms
    answer took 8.2 s against 1.0 s); each lands whole under
    its key or not at all, and a key given twice is fetched once. (bench/stage_bench.py
    measures it.)"""
    from analyzer.staging import stage

    _local, s3 = buckets
    keys = [e.path for e in layout.list_entries(BUCKET, "gpu_samples", s3)]
    got = stage(s3, keys + keys[:3], tmp_path / "stage")
    assert len(got) == len(keys) + 3 and got[-3:] == got[:3]
    assert all(Path(p).read_bytes() == b"x" for p in got)
    assert not [p for p in (tmp_path / "stage").rglob("*") if p.name.endswith(".part")]
    missing = f"{BUCKET}/gpu_samples/date=2026-11-01/host=gpu-a/nope.parquet"
    with pytest.raises(OSError):
        stage(s3, [keys[0], missing], tmp_path / "other")
    assert not (tmp_path / "other" / missing).exists()


@pytest.mark.parametrize(
    "scope, named", [("everything", True), ("one day", False), ("one host", True)]
)
def test_parquet_outside_the_layout_is_named_not_skipped(buckets, scope: str, named: bool) -> None:
    """A .parquet key or file the layout cannot place (here loose in a date folder) comes
    back as an unlisted entry saying why, on S3 as in a folder; the day of the stray file
    (2026-11-02) is not in "one day" (DAYS[3]); a file of no host may be any host's."""
    local, s3 = buckets
    date_ok, host_ok = SCOPES[scope]
    for root, fs in ((local, None), (BUCKET, s3)):
        got = layout.list_entries(root, "gpu_samples", fs, date_ok, host_ok, bad_folders=True)
        bad = [e for e in got if e.unlisted]
        want = ["gpu_samples/date=2026-11-02/stray.parquet"] if named else []
        assert [e.path.removeprefix(root).strip("/") for e in bad] == want, fs
        assert all(e.why == layout.MISPLACED for e in bad)
        plain = layout.list_entries(root, "gpu_samples", fs, date_ok, host_ok)
        assert [e for e in got if not e.unlisted] == plain  # nothing else changes


OUTSIDE = {  # Parquet outside the layout -> the scopes (of SCOPES_OUT) that must name it
    "gpu_samples/date=20261105/host=gpu-a/bad-date.parquet": {"all", "day", "days", "day+host", "host"},
    "gpu_samples/backup/date=2026-11-05/host=gpu-a/nested.parquet": {"all", "day", "days", "day+host", "host"},
    "gpu_samples/date=2026-11-05/loose.parquet": {"all", "day", "days", "day+host", "host"},
    "gpu_samples/loose-top.parquet": {"all", "day", "days", "day+host", "host"},
    "gpu_samples/gpu_samples/date=2026-11-03/host=gpu-b/copied.parquet": {"all", "day", "days", "day+host", "host"},
    "gpu_samples/date=2026-11-02/host=gpu-a/sub/deep.parquet": {"all", "host"},
    "gpu_samples/_staging/date=2026-11-05/host=gpu-a/hidden.parquet": set(),
}  # fmt: skip
SCOPES_OUT: dict[str, tuple[layout.DateOk, layout.HostOk]] = {
    "all": (layout.ANY, layout.ANY),
    "day": (_one(DAYS[4]), layout.ANY),
    "days": (lambda d: d >= DAYS[4], layout.ANY),
    "day+host": (_one(DAYS[4]), lambda h: h == "gpu-a"),
    "host": (layout.ANY, lambda h: h == "gpu-a"),
}


HARMLESS = ["gpu_samples/notes/readme.txt", "gpu_samples/date=2026-11-02/logs/run.txt"]
FOREIGN = {  # data at the top that no table reads -> the scopes (of SCOPES_OUT) that name it
    "gpu_sample/date=2026-11-05/host=gpu-a/typo.parquet": {"all", "day", "days", "day+host", "host"},
    "nvlink_samples/date=2026-11-02/host=gpu-b/newer.parquet": {"all"},
    # a copy one level down: its date=/host= folders are not where a table has them
    "backup/gpu_samples/date=2026-11-02/host=gpu-a/old.parquet": {"all", "day", "days", "day+host", "host"},
    "loose.parquet": {"all", "day", "days", "day+host", "host"},
    "_scratch/date=2026-11-05/host=gpu-a/hidden.parquet": set(),
    "tier_newer_release/date=2026-11-05/host=gpu-a/t.parquet": set(),  # the tier: derived
    "notes/date=2026-11-05/readme.txt": set(),
}  # fmt: skip


@pytest.fixture(scope="module")
def odd_buckets(tmp_path_factory):
    local = tmp_path_factory.mktemp("odd")
    rels = [f"{layout.partition('gpu_samples', d, h)}/f.parquet" for d in DAYS for h in HOSTS]
    with moto_s3("odd") as env:
        host, port = env["AWS_ENDPOINT_URL"].removeprefix("http://").split(":")
        s3 = s3_with_bucket(host, int(port), "odd")
        for rel in rels + list(OUTSIDE) + HARMLESS + list(FOREIGN):
            (local / rel).parent.mkdir(parents=True, exist_ok=True)
            (local / rel).write_bytes(b"x")
            with s3.open_output_stream(f"odd/{rel}") as f:
                f.write(b"x")
        yield str(local), s3


@pytest.mark.parametrize("scope", SCOPES_OUT)
def test_s3_and_a_folder_name_the_same_data_outside_the_layout(odd_buckets, scope) -> None:
    """On S3 a table copied into itself was read as data, a copy one level down was
    dropped without a word, and a narrow scope's listings saw none of it, where a folder
    named all of it. A folder is named as a folder, an object by its key."""
    local, s3 = odd_buckets
    date_ok, host_ok = SCOPES_OUT[scope]
    want = sorted(k for k, scopes in OUTSIDE.items() if scope in scopes)
    got = {}
    for root, fs in ((local, None), ("odd", s3)):
        es = layout.list_entries(root, "gpu_samples", fs, date_ok, host_ok, bad_folders=True)
        named = [e.path.removeprefix(root).strip("/") for e in es if e.unlisted]
        got[fs is None] = sorted(
            k for k in OUTSIDE if any(k.startswith(n + "/") or k == n for n in named)
        )
        assert len(named) == len(set(named)), named  # each once
        # folders without Parquet are nobody's data: not named, whatever the listing
        assert not [n for n in named if any(k.startswith(n + "/") for k in HARMLESS)], named
        plain = [e.path for e in es if not e.unlisted]
        assert not [p for p in plain if p.removeprefix(root).strip("/") in OUTSIDE], plain
    assert got[True] == got[False] == want, got


@pytest.mark.parametrize("scope", SCOPES_OUT)
def test_data_in_a_folder_no_table_reads_is_named(odd_buckets, scope) -> None:
    """A misspelt table folder, a newer collector's table or a copy kept beside the tables
    was read by no view and mentioned nowhere: now each folder holding Parquet in scope (by
    its date=/host= folders, where it has them) is named, on S3 as in a folder; hidden
    names, the rollup tier's (derived data) and folders without Parquet are not."""
    from analyzer.bucket import _known_table

    local, s3 = odd_buckets
    date_ok, host_ok = SCOPES_OUT[scope]
    want = sorted(
        k if "/" not in k else k.split("/")[0] for k, sc in FOREIGN.items() if scope in sc
    )
    for root, fs in ((local, None), ("odd", s3)):
        got = layoutscan.foreign_tables(root, _known_table, fs, date_ok, host_ok)
        assert [g.removeprefix(root).strip("/") for g in got] == want, fs


def test_a_copy_that_fails_names_its_object_and_drops_the_copies_not_begun(
    tmp_path, monkeypatch
) -> None:
    """Found by a user's pass: with the S3 server frozen mid-analysis, every queued copy
    waited its own timeout after the first had failed, then each object was looked up in
    turn: about 9 minutes to an error that named no object."""
    import pyarrow.fs as pafs

    from analyzer import staging

    src = tmp_path / "src"
    src.mkdir()
    keys = []
    for k in range(40):
        (src / f"{k:02}.parquet").write_bytes(b"x" * 10)
        keys.append(str(src / f"{k:02}.parquet"))
    missing = str(src / "gone.parquet")
    started: list[str] = []
    real = pafs.copy_files

    def copy(key, *a, **kw):  # type: ignore[no-untyped-def]
        started.append(key)
        return real(key, *a, **kw)

    monkeypatch.setattr(pafs, "copy_files", copy)
    with pytest.raises(staging.StageError) as e:
        staging.stage(pafs.LocalFileSystem(), [missing, *keys], tmp_path / "stage")
    assert e.value.key == missing and str(e.value).startswith(missing)
    assert len(started) < len(keys) + 1  # the queue was dropped at the error
