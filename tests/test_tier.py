"""The stored rollup tier: same findings with no tier, a partial and a full one;
a stale tier is rebuilt, never read."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer import tier, timesanity
from analyzer.packs import load_packs
from analyzer.runner import analyze
from collector import filecheck, layout
from simulator.generate import simulate

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
START = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
DAY2 = dt.date(2026, 11, 24)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """Two scenarios over 30 h: two dates per host, so the analysis buckets by the minute."""
    out = tmp_path_factory.mktemp("tier") / "bucket"
    for scenario in ("fast-image-processor-leak", "cache-warmup"):
        simulate(scenario, out, hosts=1, hours=30, seed=5, start=START)
    return out


@pytest.fixture
def bucket(base: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(base, tmp_path / "bucket"))


def _doc(bucket: Path, said: list[str] | None = None) -> str:
    d = analyze(
        bucket, load_packs(), now=NOW, progress=said.append if said is not None else None
    ).to_dict()
    for r in d["run"]["rules"]:
        r.pop("duration_s")
    d["run"].pop("bucket")
    return json.dumps(d, sort_keys=True)


def _tier_files(bucket: Path) -> list[Path]:
    return sorted(p for t in tier.ALL_TIERS for p in (bucket / t).rglob("*.parquet"))


@pytest.mark.parametrize("weeks", [False, True], ids=["day-files", "week-files"])
def test_findings_identical_with_no_partial_and_full_tier(bucket, weeks: bool) -> None:
    said: list[str] = []
    none = _doc(bucket, said)
    assert not [s for s in said if s.startswith("rollup tier")]
    assert json.loads(none)["findings"], "the scenario must find something to compare"
    part = tier.build(bucket, before=DAY2, weeks=weeks)  # only the first day is finished
    assert part.built == 2 and part.current == 0
    said = []
    assert _doc(bucket, said) == none
    assert "rollup tier: 2 host-days stored, 2 derived from raw samples" in said
    full = tier.build(bucket, before=NOW.date(), weeks=weeks)
    assert (full.built, full.current) == (2, 2)  # the first day was already current
    said = []
    assert _doc(bucket, said) == none
    assert "rollup tier: 4 host-days stored, 0 derived from raw samples" in said


# a numeric column of each tier table, and the figure it holds in the rollup table
SENTINEL = {
    "tier_gpu_info": ("samples", "SELECT max(samples) FROM gpu_info"),
    "tier_gpu_buckets": ("used_max", "SELECT max(used_max) FROM gpu_buckets"),
    "tier_gpu_blocks": ("used_max", "SELECT max(used_max) FROM gpu_blocks"),
    "tier_metric_norm": ("value", "SELECT max(value) FROM metric_norm"),
    "tier_proc_bins": ("used_max", "SELECT max(used_max) FROM proc_bins"),
    "tier_source_runs": ("runs", "SELECT max(runs) FROM source_runs"),
    "tier_server_parts": (
        "mem_fraction_static",
        "SELECT max(mem_fraction_static) FROM server_info",
    ),
    "tier_idle_segments": ("high", "SELECT max(high) FROM idle_windows"),
}
BIG = 7 * 10**15


def _rewrite(f: Path, col: str, value: float, meta: dict[bytes, bytes] | None = None) -> None:
    """Set ``col`` of every row of the tier file ``f`` to ``value`` (same hashes unless ``meta``)."""
    t = pq.read_table(f)
    md = dict(t.schema.metadata or {})
    i = t.schema.get_field_index(col)
    new = pa.array([value] * t.num_rows, t.schema.field(i).type)
    f.unlink()
    pq.write_table(t.set_column(i, col, new).replace_schema_metadata(md | (meta or {})), f)


def _rollup_figure(bucket: Path, sql: str) -> float:
    from analyzer import bucket as bucket_mod
    from analyzer import logevents, rollup

    opened = bucket_mod.open_checked(bucket, now=NOW)
    try:
        logevents.build(opened.con)
        overrides = rollup.with_width({}, opened.span_s)
        rollup.build(opened.con, overrides.get("rollup"), tier=opened.tier)
        row = opened.con.execute(sql).fetchone()
        assert row is not None
        return float(row[0])
    finally:
        opened.con.close()


def test_the_tier_is_read_where_current(bucket) -> None:
    none = _doc(bucket)
    tier.build(bucket, before=NOW.date(), weeks=False)
    for t, (col, sql) in SENTINEL.items():
        assert _rollup_figure(bucket, sql) < BIG
        files = sorted((bucket / t).rglob("*.parquet"))
        assert len(files) == 4, t  # two hosts, two days
        for f in files:
            _rewrite(f, col, BIG)  # same hashes, other numbers: the analysis must show them
        assert _rollup_figure(bucket, sql) >= BIG, t  # gpu_info sums its days
    assert _doc(bucket) != none


def test_stored_rows_are_read_in_place_not_copied_into_memory(bucket) -> None:
    """With a tier, the per-bucket and per-bin tables are views over the stored files plus
    the raw rest (a month of them would otherwise fill the memory budget)."""
    from analyzer import bucket as bucket_mod
    from analyzer import logevents, rollup

    tier.build(bucket, before=DAY2, weeks=False)
    opened = bucket_mod.open_checked(bucket, now=NOW)
    try:
        logevents.build(opened.con)
        rollup.build(opened.con, rollup.with_width({}, opened.span_s).get("rollup"), opened.tier)
        views = {
            r[0] for r in opened.con.execute("SELECT view_name FROM duckdb_views()").fetchall()
        }
        tables = {
            r[0] for r in opened.con.execute("SELECT table_name FROM duckdb_tables()").fetchall()
        }
    finally:
        opened.con.close()
    held = {"gpu_buckets", "metric_norm", "proc_bins"}
    assert held <= views and not held & tables
    assert {f"{t}_rest" for t in held} <= tables  # today's rows, derived from raw samples
    assert "gpu_info" in tables and "gpu_info_rest" not in tables  # summed: a small table


@pytest.mark.parametrize("stale_table", sorted(SENTINEL))
def test_a_stale_tier_is_never_read_and_is_rebuilt(bucket, stale_table: str) -> None:
    none = _doc(bucket)
    tier.build(bucket, before=NOW.date(), weeks=False)
    col, sql = SENTINEL[stale_table]
    stale = [f for f in _tier_files(bucket) if f"{stale_table}/" in str(f)]
    assert stale
    for f in stale:  # made by "other SQL", and with other numbers
        _rewrite(f, col, BIG, {tier.HASH_KEY: b"0" * 32})
    assert _rollup_figure(bucket, sql) < BIG  # the stale host-days come from raw samples
    said: list[str] = []
    assert _doc(bucket, said) == none
    # and the analysis says so: a tier left by another version is not read, and is slower
    assert [s for s in said if "stored by other rollup SQL" in s] == [
        f"rollup tier: {len(stale)} host-days ({START.date()} to {DAY2}) were stored by other "
        "rollup SQL or settings (another leakreport version?): not read, derived from raw "
        "samples instead; `leakreport rollup` stores them again"
    ]
    again = tier.build(bucket, before=NOW.date(), weeks=False)
    assert again.built == len(stale) and not any(f.exists() for f in stale)
    said.clear()
    assert _doc(bucket, said) == none
    assert not [s for s in said if "other rollup SQL" in s]


def test_other_parameters_read_raw_samples(bucket) -> None:
    """The tier was derived with the default parameters: an analysis with another
    per-process bin width derives proc_bins from raw samples (and still reads the rest)."""
    from analyzer import bucket as bucket_mod
    from analyzer import logevents, rollup

    tier.build(bucket, before=NOW.date(), weeks=False)
    for f in (bucket / "tier_proc_bins").rglob("*.parquet"):
        _rewrite(f, "used_max", BIG)
    for f in (bucket / "tier_gpu_buckets").rglob("*.parquet"):
        _rewrite(f, "used_max", BIG)
    opened = bucket_mod.open_checked(bucket, now=NOW)
    logevents.build(opened.con)
    times: list[dict[str, object]] = []
    rollup.build(opened.con, {"proc_bin_s": 600}, tier=opened.tier, timings=times)
    by_table = {str(t["stage"]).split(":")[1]: t["tier"] for t in times}
    assert by_table["proc_bins"] is False and by_table["gpu_buckets"] is True
    (pb,) = opened.con.execute("SELECT max(used_max) FROM proc_bins").fetchone() or (None,)
    (gb,) = opened.con.execute("SELECT max(used_max) FROM gpu_buckets").fetchone() or (None,)
    assert pb is not None and pb < BIG and gb == BIG


@pytest.mark.parametrize(
    "params", [{"chart_block": 3}, {"bucket_s": 30}], ids=["other-blocks", "other-buckets"]
)
def test_chart_blocks_follow_the_buckets_they_are_made_of(bucket, params) -> None:
    """gpu_blocks is made from gpu_buckets: with another block size it comes from raw
    samples; with another bucket width too (gpu_buckets does), though its own parameters
    are the tier's."""
    from analyzer import bucket as bucket_mod
    from analyzer import logevents, rollup

    tier.build(bucket, before=NOW.date(), weeks=False)
    for f in (bucket / "tier_gpu_blocks").rglob("*.parquet"):
        _rewrite(f, "used_max", BIG)
    opened = bucket_mod.open_checked(bucket, now=NOW)
    logevents.build(opened.con)
    times: list[dict[str, object]] = []
    rollup.build(opened.con, params, tier=opened.tier, timings=times)
    by_table = {str(t["stage"]).split(":")[1]: t["tier"] for t in times}
    assert by_table["gpu_blocks"] is False
    assert by_table["gpu_buckets"] is ("bucket_s" not in params)
    (gb,) = opened.con.execute("SELECT max(used_max) FROM gpu_blocks").fetchone() or (None,)
    assert gb is not None and gb < BIG


@pytest.mark.parametrize("weeks", [False, True], ids=["day-files", "week-files"])
def test_late_data_makes_the_day_raw_until_rebuilt(bucket, weeks: bool) -> None:
    tier.build(bucket, before=NOW.date(), weeks=weeks)
    folder = next((bucket / "gpu_samples").glob("date=2026-11-23/host=*"))
    late = next(folder.glob("*.parquet"))
    shutil.copy(late, folder / "gpu_samples-20261123T235959000000Z-late00000000.parquet")
    said: list[str] = []
    _doc(bucket, said)
    assert "rollup tier: 3 host-days stored, 1 derived from raw samples" in said
    assert tier.build(bucket, before=NOW.date(), weeks=weeks).built == 1
    said = []
    _doc(bucket, said)
    assert "rollup tier: 4 host-days stored, 0 derived from raw samples" in said


def test_a_raw_file_rewritten_under_its_name_makes_its_day_raw(bucket, tmp_path) -> None:
    """Same name, other rows (a repair, a re-import): the stored day is stale, never read."""
    import pyarrow.compute as pc

    tier.build(bucket, before=NOW.date(), weeks=False)
    raw = sorted((bucket / "gpu_samples").glob("date=2026-11-23/host=*/*.parquet"))[-1]
    t = pq.read_table(raw)
    i = t.schema.get_field_index("memory_used_bytes")
    more = pc.add(t.column(i), pa.scalar(2_000_000_000, pa.int64()))
    pq.write_table(t.set_column(i, t.schema.field(i), more), raw)
    said: list[str] = []
    tiered = _doc(bucket, said)
    assert "rollup tier: 3 host-days stored, 1 derived from raw samples" in said, said
    plain = Path(shutil.copytree(bucket, tmp_path / "plain"))
    for t_name in tier.ALL_TIERS:
        shutil.rmtree(plain / t_name, ignore_errors=True)
    assert tiered == _doc(plain)


@pytest.mark.parametrize("missing", [None, "tier_gpu_blocks"], ids=["twin", "twin-and-missing"])
def test_a_rollup_stopped_between_writing_and_deleting_leaves_no_twin(bucket, missing) -> None:
    """A run killed after writing a host-day's tier file and before deleting the one it
    replaces leaves two current files of the same rows (and, killed mid-derivation, a
    table of the host-day not written): the next rollup keeps one file of each."""
    want = _doc(bucket)
    tier.build(bucket, before=NOW.date(), weeks=False)
    folder = next((bucket / "tier_gpu_info").glob("date=2026-11-23/host=*"))
    (f,) = folder.glob("*.parquet")
    shutil.copy(f, f.with_name(f.name[: -len("0123456789ab.parquet")] + "0123456789ab.parquet"))
    if missing:
        for p in (bucket / missing / folder.parent.name / folder.name).glob("*.parquet"):
            p.unlink()
    assert _doc(bucket) == want
    res = tier.build(bucket, before=NOW.date())
    assert res.built == (1 if missing else 0) and res.weeks == len(tier.ALL_TIERS)
    left = sorted(bucket.glob("tier_*_week/*/*/*.parquet"))
    assert sorted(bucket.glob("tier_*/*/*/*.parquet")) == left
    assert len(left) == len(tier.ALL_TIERS), left  # one week file per table, nothing beside
    assert all(p.parent.name == f"host={layout.FLEET_DIR}" for p in left), left
    assert _doc(bucket) == want


def test_temporary_files_of_a_stopped_rollup_are_removed(bucket) -> None:
    """A rollup killed between writing a file and renaming it leaves a temporary file in
    the tier: `leakreport rollup`, holding the bucket's lock, knows no other writer made it
    and deletes it at once; a library call without the lock only deletes an hour-old one."""
    import os
    import subprocess
    import sys

    tier.build(bucket, before=NOW.date())
    folder = bucket / "tier_gpu_info_week" / "date=2026-11-23" / "host=@all"
    temps = [
        folder / ".tmp-tier_gpu_info_week-20261123T000000000000Z-0123456789ab.parquet",
        bucket / "tier_index" / ".2026-11-23.json.0123456789ab.tmp",
        bucket / "_week_findings" / ".2026-W48.json.0123456789ab.tmp",
    ]
    temps[2].parent.mkdir(exist_ok=True)
    for t in temps:
        t.write_bytes(b"PAR1")
    assert tier.build(bucket, before=NOW.date()).temp_removed == 0
    assert all(t.exists() for t in temps)
    os.utime(temps[0], (0, 0))  # an hour old and more
    assert tier.build(bucket, before=NOW.date()).temp_removed == 1
    assert not temps[0].exists() and temps[1].exists() and temps[2].exists()
    temps[0].write_bytes(b"PAR1")
    args = [sys.executable, "-m", "leakreport", "rollup", str(bucket), "--before", "2026-12-01"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "; 3 temporary files removed" in r.stdout, r.stdout
    assert not any(t.exists() for t in temps)
    written = [*bucket.glob("tier_*/**/*"), *bucket.glob("_week_findings/*")]  # by rollup
    assert not [p for p in written if p.is_file() and p.name.startswith(".")]


def test_tier_files_follow_the_layout(bucket) -> None:
    tier.build(bucket, before=DAY2, weeks=False)
    for t in tier.ALL_TIERS:
        entries = layout.list_entries(str(bucket), t)
        assert {e.day for e in entries} == {dt.date(2026, 11, 23)}
        for e in entries:
            md = pq.read_metadata(e.path).metadata
            assert md[tier.HASH_KEY].decode() == tier.sql_hash(60.0, t)
            assert md[layout.TABLE_KEY].decode() == t


def test_rollup_command(bucket) -> None:
    import subprocess
    import sys

    args = [sys.executable, "-m", "leakreport", "rollup", str(bucket), "--before", "2026-11-24"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    n = len(tier.ALL_TIERS)  # one week: a file per tier table
    assert f"2 host-days derived, 0 already current, {n} week files written" in r.stdout
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert "0 host-days derived, 2 already current, 0 week files written" in r.stdout


def test_rollup_of_no_bucket_fails_naming_it(tmp_path) -> None:
    """A mistyped bucket in a cron line is an error (exit 2), not "0 host-days derived"."""
    import subprocess
    import sys

    (tmp_path / "a-file").write_text("")
    for bucket, why in (
        (tmp_path / "nope", "no such bucket folder"),
        (tmp_path / "a-file", "a bucket is a folder"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "leakreport", "rollup", str(bucket)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert r.returncode == 2 and f"{bucket}: {why}" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and "derived" not in r.stdout


def test_maintenance_of_a_folder_with_no_trace_files_says_so(bucket, tmp_path) -> None:
    """A cron line given the folder above the bucket (an easy slip) found nothing to do and
    exited 0 every day, quietly. Now compact and rollup say the folder holds no trace files
    and exit 3; the same commands on the bucket itself, and on a bucket holding only the
    current day's files (nothing finished yet), exit 0."""
    import shutil
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "leakreport", *args, "-q"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    parent = tmp_path / "data"
    shutil.copytree(bucket, parent / "traces")
    for cmd, what in (("compact", "compact"), ("rollup", "roll up")):
        r = cli(cmd, str(parent), "--before", "2026-11-24")
        assert r.returncode == 3, (cmd, r.stderr)
        assert f"nothing to {what}: {parent} holds no trace files" in r.stderr, r.stderr
        r = cli(cmd, str(parent / "traces"), "--before", "2026-11-24")
        assert r.returncode == 0 and r.stderr == "", (cmd, r.stderr)
    # only unfinished days: nothing to derive yet, and no complaint
    for cmd in ("compact", "rollup"):
        r = cli(cmd, str(parent / "traces"), "--before", "2026-01-01")
        assert r.returncode == 0 and r.stderr == "", (cmd, r.stderr)


def _trend(n: int, slope_bph: float) -> tuple[float, float]:
    """idle_trend's slope (bytes/h) over n idle windows on a line with outliers, and seconds."""
    import time

    import duckdb

    from analyzer import rollup as rollup_mod

    con = duckdb.connect()
    con.execute(
        f"""CREATE TABLE idle_windows AS
        SELECT 'h' AS host, 0 AS gpu_index, 1 AS segment, 4000 AS pid, 'process_table' AS lifetime_source,
               TIMESTAMPTZ '2026-11-01 00:00:00+00' + to_seconds(i * 600) AS start,
               TIMESTAMPTZ '2026-11-01 00:01:00+00' + to_seconds(i * 600) AS "end",
               CAST(2e10 + {slope_bph} * i / 6.0
                    + CASE WHEN i % 7 = 0 THEN 5e9 ELSE 0 END AS DOUBLE) AS baseline,
               8e10 AS total, 0.1 AS kv_idle, i * 10 AS cum_requests
        FROM range({n}) t(i)"""
    )
    (f,) = [f for f in rollup_mod.rollup_files() if f.name.startswith("04_")]
    t0 = time.perf_counter()
    for stmt in rollup_mod._statements(f.read_text()):
        con.execute(stmt, {"step_noise_mib": 8})
    took = time.perf_counter() - t0
    row = con.execute("SELECT slope_bps * 3600 FROM idle_trend").fetchone()
    assert row is not None
    return row[0], took


@pytest.mark.parametrize("n", [40, 64, 65, 3000])
def test_theil_sen_is_robust_exact_and_bounded(n: int) -> None:
    slope, _ = _trend(n, 50 * 2**20)  # 50 MiB/h, one window in seven 5 GB high
    assert slope == pytest.approx(50 * 2**20, rel=1e-6)


def test_theil_sen_cost_grows_with_windows_not_pairs() -> None:
    _, small = _trend(2_000, 2**20)
    _, big = _trend(40_000, 2**20)  # every pair: 800 M slopes; bounded: 1.3 M
    assert big < max(20 * small, 5.0)


def _sql_hosts(con, table: str) -> set[str]:
    return {r[0] for r in con.execute(f"SELECT DISTINCT host FROM {table}").fetchall()}


def test_hosts_per_table_from_footers_match_a_scan_and_fall_back_when_unsure(bucket) -> None:
    """Coverage takes each table's hosts from the footers (no scan) only where they are
    exact: every file's rows of one host and no row condition on the view."""
    from analyzer.bucket import Scope, open_checked

    o = open_checked(bucket, now=NOW)
    assert {"gpu_samples", "gpu_processes", "metric_samples"} <= set(o.hosts)
    for table, hosts in o.hosts.items():
        assert hosts == _sql_hosts(o.con, table), table
    assert len(o.hosts["gpu_samples"]) == 2
    # a file whose rows name two hosts: its footer cannot tell, the table is scanned
    f = sorted((bucket / "gpu_samples").rglob("*.parquet"))[0]
    t = pq.read_table(f)
    hosts = ["elsewhere"] + t.column("host").to_pylist()[1:]
    t = t.set_column(t.schema.get_field_index("host"), "host", pa.array(hosts, pa.string()))
    pq.write_table(t, f)
    o = open_checked(bucket, now=NOW)
    assert "gpu_samples" not in o.hosts
    assert "elsewhere" in _sql_hosts(o.con, "gpu_samples")
    assert "gpu_processes" in o.hosts
    # a scope's day condition on the rows: only tables with no file come from the listing
    o = open_checked(bucket, Scope(since=DAY2), now=NOW)
    assert o.counts["gpu_processes"] and "gpu_processes" not in o.hosts
    assert all(not o.counts[t] and hs == set() for t, hs in o.hosts.items())


# the footer-check index written by the rollup (analyzer.tierindex)


def _opened(bucket: Path | str, stage: Path | None = None) -> dict[str, object]:
    """Everything an opened bucket says, the views' SQL included (its file lists)."""
    from analyzer.bucket import open_checked

    o = open_checked(bucket, now=NOW, stage_dir=stage)
    try:
        views = o.con.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal")
        return {
            "views": sorted(views.fetchall()),
            "counts": o.counts,
            "skipped": o.skipped,
            "quarantined": o.quarantined,
            "span": o.span_s,
            "hosts": o.hosts,
            "tier": (o.tier.host_days, o.tier.raw_host_days, o.tier.tables) if o.tier else None,
        }
    finally:
        o.con.close()


def _index(bucket: Path) -> Path:
    from analyzer import tierindex

    return bucket / tierindex.INDEX_DIR


def _index_files(bucket: Path) -> dict[str, tuple[bytes, int]]:
    """The index's files: name -> (content, modification time)."""
    return {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in _index(bucket).iterdir()}


def _without_index(bucket: Path, what) -> object:
    """``what(bucket)`` with the index moved away for the while."""
    idx = _index(bucket)
    away = idx.with_name("index-away")
    idx.rename(away)
    try:
        return what(bucket)
    finally:
        away.rename(idx)


def _footer_reads(monkeypatch) -> list[str]:
    """Paths whose Parquet footer is read from now on (check_file and the tier's hashes)."""
    seen: list[str] = []
    real = pq.read_metadata

    def counting(where, *a, **k):
        seen.append(str(getattr(where, "path", where)))
        return real(where, *a, **k)

    monkeypatch.setattr(pq, "read_metadata", counting)
    return seen


def test_the_index_opens_the_same_bucket_without_reading_footers(bucket, monkeypatch) -> None:
    tier.build(bucket, before=NOW.date(), weeks=False)
    assert _index(bucket).exists()
    without = _without_index(bucket, _opened)
    reads = _footer_reads(monkeypatch)
    checks: list[str] = []
    real_check = filecheck.check_file
    monkeypatch.setattr(
        filecheck, "check_file", lambda e, *a: checks.append(e.path) or real_check(e, *a)
    )
    assert _opened(bucket) == without
    assert without["tier"] == (4, 0, {r for r, _s in tier.TIERS.values()} | tier.JOINT_TABLES)
    assert checks == [] and reads == []  # every file is of a finished day: all indexed
    monkeypatch.undo()
    assert _doc(bucket) == _without_index(bucket, _doc)


def test_a_rollup_with_nothing_new_reads_no_footer(bucket, monkeypatch) -> None:
    said: list[str] = []
    tier.build(bucket, before=NOW.date(), progress=said.append, weeks=False)
    assert not [s for s in said if "tier index" in s]  # none yet is not a damaged one
    before = _index_files(bucket)
    assert sorted(before) == ["2026-11-23.json", "2026-11-24.json"]  # one file a day
    reads = _footer_reads(monkeypatch)
    res = tier.build(bucket, before=NOW.date(), weeks=False)
    assert (res.built, res.current) == (0, 4)
    assert reads == []
    assert _index_files(bucket) == before  # not even written again


def test_an_analysis_reads_the_index_of_its_days_only(bucket, monkeypatch) -> None:
    """One day of a longer bucket: that day's index file is read, not the others'."""
    from analyzer import tierindex
    from analyzer.bucket import Scope

    tier.build(bucket, before=NOW.date(), weeks=False)
    read: list[str] = []
    real = tierindex.read_small
    monkeypatch.setattr(tierindex, "read_small", lambda w, fs: read.append(w) or real(w, fs))
    analyze(bucket, load_packs(), now=NOW, scope=Scope(since=DAY2, until=DAY2))
    assert [Path(w).name for w in read] == ["2026-11-24.json"]


def test_an_old_one_file_index_is_replaced(bucket) -> None:
    """The one-file index of an earlier version is ignored, and the rollup removes it."""
    tier.build(bucket, before=DAY2, weeks=False)
    old = _index(bucket) / "footers.json"
    old.write_bytes(b'{"format":2}')
    tier.build(bucket, before=NOW.date(), weeks=False)
    assert sorted(f.name for f in _index(bucket).iterdir()) == [
        "2026-11-23.json",
        "2026-11-24.json",
    ]


def _files(bucket: Path, table: str = "gpu_samples") -> list[Path]:
    return sorted((bucket / table).rglob("*.parquet"))


@pytest.mark.parametrize("how", ["truncated", "same-size"])
def test_a_raw_file_changed_after_the_rollup_is_checked_again(bucket, monkeypatch, how) -> None:
    import os

    tier.build(bucket, before=NOW.date(), weeks=False)
    f = _files(bucket)[0]
    data = f.read_bytes()
    if how == "truncated":
        f.write_bytes(data[: len(data) // 2])
    else:  # same size, the footer's length and magic gone; a later modification time
        st = f.stat()
        f.write_bytes(data[:-8] + b"\0" * 8)
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    reads = _footer_reads(monkeypatch)
    got = _opened(bucket)
    assert reads == [str(f)]  # that file alone
    assert got == _without_index(bucket, _opened)
    skipped = got["skipped"]
    assert isinstance(skipped, list) and len(skipped) == 1
    assert skipped[0].startswith(f"{f}: unreadable Parquet")
    monkeypatch.undo()
    assert _doc(bucket) == _without_index(bucket, _doc)


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: len(raw) // 2],  # cut
        lambda raw: b"\xff" + raw,  # not JSON
        lambda raw: raw.replace(b'"format":', b'"format":99', 1),  # another version
        lambda raw: raw.replace(b'"raw":[[', b'"raw":[[7,', 1),  # wrong shape
    ],
)
def test_a_damaged_or_foreign_index_is_ignored(bucket, monkeypatch, damage) -> None:
    tier.build(bucket, before=NOW.date(), weeks=False)
    want = _without_index(bucket, _opened)
    for idx in _index(bucket).iterdir():
        idx.write_bytes(damage(idx.read_bytes()))
    reads = _footer_reads(monkeypatch)
    assert _opened(bucket) == want
    assert len(reads) == len(list(bucket.rglob("*.parquet")))  # every footer, as before
    said: list[str] = []
    tier.build(bucket, before=NOW.date(), progress=said.append, weeks=False)
    assert any(s.startswith("tier index") and "footers are read instead" in s for s in said)
    reads.clear()
    assert _opened(bucket) == want and reads == []  # the rollup wrote it anew


def test_the_index_on_s3(tmp_path, monkeypatch) -> None:
    """S3 keys the index by each object's size and LastModified from the one listing."""
    from motoserver import MOTO, s3_environ

    from collector.store import s3_filesystem

    if MOTO is None:
        pytest.skip("moto[server] missing")
    with s3_environ("leaktraces"):
        bucket = "s3://leaktraces/indexed"
        simulate("cache-warmup", bucket, hosts=1, hours=30, seed=5, start=START)
        said: list[str] = []
        tier.build(bucket, before=NOW.date(), progress=said.append, weeks=False)
        assert not [s for s in said if "tier index" in s]  # none yet is not a damaged one
        fs = s3_filesystem()
        from pyarrow import fs as pafs

        infos = fs.get_file_info(pafs.FileSelector("leaktraces/indexed/tier_index"))
        assert sorted(i.base_name for i in infos) == ["2026-11-23.json", "2026-11-24.json"]
        stored = {i.path: fs.open_input_stream(i.path).read() for i in infos}
        fs.delete_dir("leaktraces/indexed/tier_index")
        want = _opened(bucket, tmp_path)
        for key, data in stored.items():
            with fs.open_output_stream(key) as f:
                f.write(data)
        reads = _footer_reads(monkeypatch)
        assert _opened(bucket, tmp_path) == want
        assert reads == []


def test_first_runs_from_the_footers_match_a_scan(bucket) -> None:
    """Each host's first collector run comes from the footers when they tell exactly;
    a file whose rows name no single host, or a run stamped after the bound, is scanned."""
    import dataclasses

    import duckdb

    from analyzer import bucket as bucket_mod

    checks, _bad = bucket_mod.checked_files(bucket, "collector_runs", bucket_mod.Scope())
    paths = [c.entry.path for c in checks]
    unsure = [dataclasses.replace(checks[0], host=None), *checks[1:]]
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    hi = NOW + timesanity.FUTURE_MARGIN
    footer = timesanity.first_runs(con, checks, paths, hi)
    assert len(footer) == 2 and footer == timesanity.first_runs(con, unsure, paths, hi)
    early = START + dt.timedelta(hours=3)  # some runs come after it: only a scan can tell
    assert timesanity.first_runs(con, checks, paths, early) == timesanity.first_runs(
        con, unsure, paths, early
    )
    assert timesanity.first_runs(con, checks, [], early) == {}  # it did scan


def _view_sql(bucket: Path, table: str) -> tuple[str, int]:
    from analyzer.bucket import open_checked

    o = open_checked(bucket, now=NOW)
    try:
        (sql,) = o.con.execute(
            "SELECT sql FROM duckdb_views() WHERE view_name = ?", [table]
        ).fetchone() or ("",)
        (n,) = o.con.execute(f"SELECT count(*) FROM {table}").fetchone() or (0,)
        return str(sql), int(n)
    finally:
        o.con.close()


def test_files_alike_are_read_without_reconciling_their_schemas(bucket, monkeypatch) -> None:
    """Where every file of a table has one Parquet schema, its view does not ask DuckDB to
    reconcile them (union_by_name): same findings; a file of another schema brings it back."""
    tier.build(
        bucket, before=DAY2, weeks=False
    )  # a partial tier: the _rest views read raw files too
    sql, rows = _view_sql(bucket, "gpu_samples")
    assert "union_by_name" not in sql
    assert rows == sum(pq.read_metadata(f).num_rows for f in _files(bucket))
    alike = _doc(bucket)
    monkeypatch.setattr(filecheck, "one_schema", lambda _checks: False)
    assert "union_by_name" in _view_sql(bucket, "gpu_samples")[0]
    assert _doc(bucket) == alike
    monkeypatch.undo()
    f = _files(bucket)[-1]  # written before the optional column "pod" existed
    t = pq.read_table(f)
    pq.write_table(t.drop_columns(["pod"]).replace_schema_metadata(t.schema.metadata), f)
    sql, n = _view_sql(bucket, "gpu_samples")
    assert "union_by_name" in sql and n == rows


@pytest.mark.parametrize("host", ["gpu-" + "n" * 240, ""])
def test_a_host_whose_folder_name_is_not_its_name_reads_the_same_from_the_tier(
    tmp_path, host: str
) -> None:
    """A host folder is the host's name encoded, and a long or empty name does not decode
    back to it: the tier must give the host its files name, never the folder's."""
    import dataclasses

    from simulator.generate import generate_host, plan_fleet

    out = tmp_path / "bucket"
    (plan,) = plan_fleet("fast-image-processor-leak", 1, 5)
    generate_host(dataclasses.replace(plan, host=host), 30, START, out)
    assert not (out / "gpu_samples" / "date=2026-11-23" / f"host={host}").exists()
    none = _doc(out)
    assert [f["host"] for f in json.loads(none)["findings"]] and {
        f["host"] for f in json.loads(none)["findings"]
    } == {host}
    tier.build(out, before=NOW.date())
    said: list[str] = []
    assert _doc(out, said) == none
    assert "rollup tier: 2 host-days stored, 0 derived from raw samples" in said
    # the collector's runs scanned (when their footers cannot tell) name the host alike
    import duckdb

    from analyzer import bucket as bucket_mod

    checks, _bad = bucket_mod.checked_files(out, "collector_runs", bucket_mod.Scope())
    unsure = [dataclasses.replace(c, host=None) for c in checks]
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    runs = timesanity.first_runs(con, unsure, [c.entry.path for c in checks], NOW)
    assert list(runs) == [host]
    # and an analysis scoped to the host by its name reads its files
    from analyzer.bucket import Scope

    scoped = analyze(out, load_packs(), now=NOW, scope=Scope(hosts=[host])).to_dict()
    assert {f["host"] for f in scoped["findings"]} == {host}
