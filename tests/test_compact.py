"""`leakreport compact`: fewer files, same answers, and readers never count a row twice."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer import compact as compact_mod
from analyzer.bucket import open_bucket
from analyzer.packs import load_packs
from analyzer.runner import analyze
from simulator.generate import simulate

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _doc(bucket) -> str:
    d = analyze(bucket, load_packs(), now=NOW).to_dict()
    d["run"].pop("tables")
    for r in d["run"]["rules"]:
        r.pop("duration_s")
    return json.dumps(d, sort_keys=True)


def _counts(bucket) -> dict[str, int]:
    con, _ = open_bucket(bucket)
    return {
        t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
        for t in ("gpu_samples", "log_lines")
    }


def test_compaction_keeps_every_answer(tmp_path) -> None:
    simulate("fast-image-processor-leak", tmp_path, hosts=1, hours=3, seed=2)
    before_files = len(list(tmp_path.rglob("*.parquet")))
    before = (_doc(tmp_path), _counts(tmp_path))
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "compact", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    after_files = len(list(tmp_path.rglob("*.parquet")))
    assert after_files < before_files and after_files == len(
        {p.parent for p in tmp_path.rglob("*.parquet")}
    )
    assert (_doc(tmp_path), _counts(tmp_path)) == before
    again = compact_mod.compact(tmp_path)  # nothing left to do
    assert again.files_before == again.files_after


def test_crash_after_the_new_file_counts_rows_once(tmp_path, monkeypatch) -> None:
    simulate("healthy-static", tmp_path, hosts=1, hours=3, seed=2)
    expected = _counts(tmp_path)
    real_remove = compact_mod.remove

    def crash(path, *a, **k):  # die before the first original is deleted
        if "-compact-" not in Path(path).name:
            raise KeyboardInterrupt("killed")
        return real_remove(path, *a, **k)

    monkeypatch.setattr(compact_mod, "remove", crash)
    with pytest.raises(KeyboardInterrupt):
        compact_mod.compact(tmp_path)
    monkeypatch.undo()
    assert _counts(tmp_path) == expected  # new file and originals side by side: each row once
    compact_mod.compact(tmp_path)  # the next run finishes the job
    assert _counts(tmp_path) == expected


def test_row_count_mismatch_keeps_the_originals(tmp_path, monkeypatch) -> None:
    simulate("healthy-static", tmp_path, hosts=1, hours=2, seed=2)
    files = sorted(tmp_path.rglob("gpu_samples-*.parquet"))

    monkeypatch.setattr(compact_mod, "_rows_written", lambda path, fs: -1)
    with pytest.raises(compact_mod.CompactError, match="originals kept"):
        compact_mod.compact(tmp_path)
    assert all(f.exists() for f in files)


def test_today_is_left_alone(tmp_path) -> None:
    simulate(
        "healthy-static",
        tmp_path,
        hosts=1,
        hours=2,
        seed=2,
        start=dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0),
    )
    n = len(list(tmp_path.rglob("*.parquet")))
    compact_mod.compact(tmp_path)
    assert len(list(tmp_path.rglob("*.parquet"))) == n


def test_stale_temporary_files_are_removed(tmp_path) -> None:
    import os
    import time

    simulate("healthy-static", tmp_path, hosts=1, hours=1, seed=2)
    folder = next((tmp_path / "gpu_samples").glob("date=*/host=*"))
    old, fresh = folder / ".tmp-old.parquet", folder / ".tmp-fresh.parquet"
    old.write_bytes(b"half a file")
    fresh.write_bytes(b"being written")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    res = compact_mod.compact(tmp_path, dt.date(2030, 1, 1))
    assert res.temp_removed == 1 and not old.exists() and fresh.exists()


def test_a_stopped_compacts_temporary_file_goes_at_once_under_the_lock(tmp_path) -> None:
    """`leakreport compact` holds the bucket's lock: a temporary compacted file is one a
    stopped compact left, deleted at once; a collector's (no compact mark in its name)
    may still be being written, and stays until it is an hour old."""
    from collector.layout import COMPACT_MARK, TMP_PREFIX

    simulate("healthy-static", tmp_path, hosts=1, hours=1, seed=2)
    folder = next((tmp_path / "gpu_samples").glob("date=*/host=*"))
    mine = folder / f"{TMP_PREFIX}gpu_samples{COMPACT_MARK}20261123T000000000000Z-0a.parquet"
    theirs = folder / f"{TMP_PREFIX}gpu_samples-20261123T000000000000Z-0b.parquet"
    for f in (mine, theirs):
        f.write_bytes(b"half a file")
    assert compact_mod.compact(tmp_path, dt.date(2030, 1, 1)).temp_removed == 0  # no lock
    assert mine.exists() and theirs.exists()
    args = [sys.executable, "-m", "leakreport", "compact", str(tmp_path), "--before", "2030-01-01"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "; 1 stale temporary file removed" in r.stdout, r.stdout
    assert not mine.exists() and theirs.exists()


def test_two_compacts_of_one_folder_count_its_rows_once(tmp_path, monkeypatch) -> None:
    """Two compacts at once (S3 has no lock) each merge the same originals into a file of
    their own: readers take one of the two, and the next compact deletes the other. Each
    row counted twice before. A compact whose originals are gone while it reads them
    (merged meanwhile by the other) leaves that folder alone."""
    from collector import filecheck, layout
    from collector.writer import write_compacted

    simulate("healthy-static", tmp_path, hosts=1, hours=3, seed=2)
    before = _counts(tmp_path)
    entries = layout.list_entries(str(tmp_path), "gpu_samples")
    (folder,) = {e.folder for e in entries}
    e0 = entries[0]
    live, _bad = filecheck.live(filecheck.check_all(entries))
    data = pa.concat_tables(
        [pq.read_table(c.entry.path).replace_schema_metadata(None) for c in live]
    )
    names = sorted(c.entry.name for c in live)
    both = [
        write_compacted(tmp_path, e0.host_dir, "gpu_samples", e0.day, data, names) for _ in (1, 2)
    ]
    for c in live:
        Path(c.entry.path).unlink()
    assert _counts(tmp_path) == before
    checks = filecheck.check_all(layout.list_entries(str(tmp_path), "gpu_samples"))
    assert len(filecheck.superseded(checks)) == 1 and len(filecheck.live(checks)[0]) == 1
    compact_mod.compact(tmp_path)
    left = [p.name for p in Path(folder).glob("*.parquet")]
    assert left == [min(Path(str(p)).name for p in both)] and _counts(tmp_path) == before
    # a compact that finds its originals gone mid-read: the folder is someone else's now
    fresh = tmp_path / "again"
    simulate("healthy-static", fresh, hosts=1, hours=3, seed=2)
    group = compact_mod.groups(str(fresh), dt.date(2100, 1, 1), None, ["gpu_samples"])
    ((key, files),) = group.items()
    real = filecheck.check_all

    def checked_then_merged_by_another(entries, fs=None):
        out = real(entries, fs)
        Path(files[-1].path).unlink()  # the other compact deletes what it merged
        return out

    monkeypatch.setattr(filecheck, "check_all", checked_then_merged_by_another)
    assert compact_mod.compact_group(str(fresh), *key, files) == (len(files), len(files), 0)
    assert len(list(Path(files[0].folder).glob("*.parquet"))) == len(files) - 1  # no new file


def test_a_file_with_a_column_of_no_table_is_left_and_named_the_rest_compacted(tmp_path) -> None:
    """The analyzer reads such a file (the extra column aside); compact must not crash on
    it (every later folder and the rollup after it in the cron line would wait for good),
    nor drop the column silently: it leaves the file, names it, exits 3."""
    simulate("fast-image-processor-leak", tmp_path, hosts=1, hours=3, seed=2)
    before = (_doc(tmp_path), _counts(tmp_path))
    odd = sorted(tmp_path.glob("gpu_samples/*/*/*.parquet"))[0]
    t = pq.read_table(odd)
    pq.write_table(t.append_column("surprise", pa.array(["x"] * t.num_rows)), odd)
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "compact", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert f"{odd}: gpu_samples: unknown columns ['surprise']" in r.stderr
    assert odd.exists() and len(list(odd.parent.glob("*.parquet"))) == 2  # it, and the merge
    assert len(list(tmp_path.glob("log_lines/*/*/*.parquet"))) == 1  # later tables compacted
    assert (_doc(tmp_path), _counts(tmp_path)) == before
