"""Week files of the rollup tier: each host-day is read from exactly one file, whatever
state a rollup (or a crash in one) left behind, and the findings are those of raw samples."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_tier import _rewrite, _tier_files

from analyzer import tier, tiercurrent, tierweek
from analyzer.bucket import Scope
from analyzer.packs import load_packs
from analyzer.runner import analyze
from collector import layout
from simulator.generate import simulate

# Sunday noon to Tuesday 04:00: two finished days in two weeks, and today
START = dt.datetime(2026, 11, 29, 12, tzinfo=dt.UTC)
NOW = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)
BEFORE = NOW.date()
WEEKS = {dt.date(2026, 11, 23), dt.date(2026, 11, 30)}
BIG = 7 * 10**15


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tierweek") / "bucket"
    for scenario in ("fast-image-processor-leak", "cache-warmup"):
        simulate(scenario, out, hosts=1, hours=40, seed=11, start=START)
    return out


@pytest.fixture
def bucket(base: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(base, tmp_path / "bucket"))


def _doc(bucket: Path, scope: Scope | None = None, said: list[str] | None = None) -> str:
    d = analyze(
        bucket,
        load_packs(),
        scope=scope,
        now=NOW,
        progress=said.append if said is not None else None,
    ).to_dict()
    for r in d["run"]["rules"]:
        r.pop("duration_s")
    d["run"].pop("bucket")
    return json.dumps(d, sort_keys=True)


def _figures(bucket: Path) -> tuple[float, ...]:
    """Sums that count every row once: a host-day read twice (or not at all) changes them."""
    from analyzer import bucket as bucket_mod
    from analyzer import logevents, rollup

    opened = bucket_mod.open_checked(bucket, now=NOW)
    try:
        logevents.build(opened.con)
        rollup.build(opened.con, rollup.with_width({}, opened.span_s).get("rollup"), opened.tier)
        row = opened.con.execute(
            """SELECT (SELECT sum(samples) FROM gpu_info),
                      (SELECT count(*) FROM gpu_buckets), (SELECT max(used_max) FROM gpu_buckets),
                      (SELECT count(*) FROM metric_norm), (SELECT count(*) FROM proc_bins),
                      (SELECT count(*) FROM idle_windows)"""
        ).fetchone()
        assert row is not None
        return tuple(float(x) for x in row)
    finally:
        opened.con.close()


def _week_files(bucket: Path, t: str = "tier_gpu_buckets") -> list[Path]:
    return sorted((bucket / f"{t}_week").rglob("*.parquet"))


def test_a_rollup_leaves_each_week_in_one_file_per_table(bucket: Path) -> None:
    none, plain = _doc(bucket), _figures(bucket)
    res = tier.build(bucket, before=BEFORE)
    assert (res.built, res.weeks) == (4, 2 * len(tier.ALL_TIERS))
    assert _tier_files(bucket) == []
    hosts = {e.host_dir for e in layout.list_entries(str(bucket), "gpu_samples")}
    assert len(hosts) == 2
    for t in tier.ALL_TIERS:
        entries = layout.list_entries(str(bucket), f"{t}_week")
        assert {e.day for e in entries} == WEEKS and len(entries) == 2, t
        for e in entries:
            assert e.host_dir == layout.FLEET_DIR
            md = pq.read_metadata(e.path).metadata
            assert md[tier.HASH_KEY].decode() == tier.sql_hash(60.0, t)
            held = set(json.loads(md[tier.SOURCES_KEY]))
            day = "2026-11-29" if e.day == dt.date(2026, 11, 23) else "2026-11-30"
            assert held == {f"{day}/{h}" for h in hosts}, t
            # sorted by host-day, after the column a week file of the table sorts by first
            first = tierweek.SORT_FIRST.get(t)
            rows = pq.read_table(e.path, columns=["_tier_key", *([first] if first else [])])
            order = [(r.get(first, ""), r["_tier_key"]) for r in rows.to_pylist()]
            assert {k for _f, k in order} <= held and order == sorted(order), t
            if first:  # several values, so the order is a test of SORT_FIRST
                assert len({f for f, _k in order}) > 1 and order != sorted(
                    order, key=lambda x: x[1]
                )
    names = sorted(p.name for t in tier.ALL_TIERS for p in _week_files(bucket, t))
    said: list[str] = []
    assert _doc(bucket, said=said) == none and _figures(bucket) == plain
    assert "rollup tier: 4 host-days stored, 2 derived from raw samples" in said
    again = tier.build(bucket, before=BEFORE)  # nothing new: nothing written
    assert (again.built, again.weeks) == (0, 0)
    assert sorted(p.name for t in tier.ALL_TIERS for p in _week_files(bucket, t)) == names


def test_the_week_files_are_what_is_read(bucket: Path) -> None:
    plain = _figures(bucket)
    tier.build(bucket, before=BEFORE)
    for f in _week_files(bucket):
        _rewrite(f, "used_max", BIG)  # same hashes, other numbers: the analysis must show them
    got = _figures(bucket)
    assert got[2] >= BIG and got[:2] == plain[:2] and got[3:] == plain[3:]


@pytest.mark.parametrize("table", sorted(tier.ALL_TIERS))
def test_a_stale_week_file_is_never_read_and_is_written_again(bucket: Path, table: str) -> None:
    none, plain = _doc(bucket), _figures(bucket)
    tier.build(bucket, before=BEFORE)
    stale = _week_files(bucket, table)
    col = {
        "tier_gpu_info": "samples",
        "tier_metric_norm": "value",
        "tier_idle_segments": "high",
        "tier_source_runs": "runs",
        "tier_server_parts": "mem_fraction_static",
    }
    for f in stale:  # made by "other SQL", and with other numbers
        _rewrite(f, col.get(table, "used_max"), BIG, {tier.HASH_KEY: b"0" * 32})
    assert _figures(bucket) == plain
    said: list[str] = []
    assert _doc(bucket, None, said) == none
    # the host-days the stale week files hold, not the files: said, with the hint
    assert [s.split(" were ")[0] for s in said if "stored by other rollup SQL" in s] == [
        "rollup tier: 4 host-days (2026-11-29 to 2026-11-30)"
    ]
    again = tier.build(bucket, before=BEFORE)
    assert again.built == 4 and again.weeks >= 2 and not any(f.exists() for f in stale)
    assert len(_week_files(bucket, table)) == 2 and _tier_files(bucket) == []
    assert _doc(bucket) == none and _figures(bucket) == plain


def test_day_files_left_beside_a_week_file_are_read_instead_of_it(bucket: Path) -> None:
    """A crash after writing the week file and before deleting the day files it holds."""
    none, plain = _doc(bucket), _figures(bucket)
    tier.build(bucket, before=BEFORE, weeks=False)
    aside = bucket.parent / "aside"
    for t in tier.ALL_TIERS:
        shutil.copytree(bucket / t, aside / t)
    tier.build(bucket, before=BEFORE)
    assert _tier_files(bucket) == []
    for t in tier.ALL_TIERS:
        shutil.copytree(aside / t, bucket / t, dirs_exist_ok=True)
    for f in _week_files(bucket):
        _rewrite(f, "used_max", BIG)
    assert _figures(bucket) == plain  # every host-day once, from its day file
    assert _doc(bucket) == none
    res = tier.build(bucket, before=BEFORE)  # the next rollup puts them in week files
    assert res.built == 0 and res.weeks == 2 * len(tier.ALL_TIERS) and _tier_files(bucket) == []
    assert _figures(bucket) == plain and _doc(bucket) == none


def test_of_two_week_files_holding_a_day_the_newest_is_read(bucket: Path) -> None:
    plain = _figures(bucket)
    tier.build(bucket, before=BEFORE)
    for f in _week_files(bucket):
        newer = f.with_name(layout.file_name("tier_gpu_buckets_week", dt.datetime.now(dt.UTC)))
        shutil.copy(f, newer)
        _rewrite(newer, "used_max", BIG)
    got = _figures(bucket)
    assert got[2] >= BIG and got[1] == plain[1]  # the newest one's rows, and once
    res = tier.build(bucket, before=BEFORE)
    assert res.weeks == 2 and len(_week_files(bucket)) == 2
    assert _figures(bucket) == got


def test_a_scope_reads_its_host_days_of_a_week_file(bucket: Path) -> None:
    """An analysis of one host and one day reads that host-day's rows of the week file."""
    hosts = sorted({e.host for e in layout.list_entries(str(bucket), "gpu_samples")})
    scope = Scope(since=dt.date(2026, 11, 30), hosts=hosts[:1])
    want = _doc(bucket, scope)
    both = Scope(hosts=hosts[:1])
    want_both = _doc(bucket, both)
    tier.build(bucket, before=BEFORE)
    said: list[str] = []
    assert _doc(bucket, scope, said) == want
    assert "rollup tier: 1 host-days stored, 1 derived from raw samples" in said
    assert _doc(bucket, both) == want_both


def test_late_data_in_a_packed_week_is_read_raw_then_packed_again(bucket: Path) -> None:
    tier.build(bucket, before=BEFORE)
    folder = next((bucket / "gpu_samples").glob("date=2026-11-30/host=*"))
    late = next(folder.glob("*.parquet"))
    shutil.copy(late, folder / "gpu_samples-20261130T235959000000Z-late00000000.parquet")
    said: list[str] = []
    late_doc = _doc(bucket, said=said)
    assert "rollup tier: 3 host-days stored, 3 derived from raw samples" in said
    res = tier.build(bucket, before=BEFORE)
    # the host-day's device-sample tables (3) and its idle segments, in the week of the 30th
    assert (res.built, res.weeks) == (1, 4) and _tier_files(bucket) == []
    assert _doc(bucket) == late_doc


def test_failed_collector_sources_read_the_same_from_the_tier(bucket: Path) -> None:
    """Failures on two days of two weeks: counted and named the same from week files."""
    from collector.writer import BucketWriter

    host = sorted({e.host for e in layout.list_entries(str(bucket), "collector_runs")})[0]
    rows = [
        {"ts": START + dt.timedelta(hours=h), "host": host, "run_id": f"r{h}",
         "source": "metrics", "status": "failed", "error": err}
        for h, err in ((2, "refused"), (3, "timed out"), (20, None))
    ]  # fmt: skip
    BucketWriter(bucket, host).write("collector_runs", rows)
    none = _doc(bucket)
    gaps = json.loads(none)["run"]["gaps"]
    assert [g for g in gaps if "source metrics failed in 3 of" in g and "timed out" in g]
    res = tier.build(bucket, before=BEFORE)
    assert res.weeks == 2 * len(tier.ALL_TIERS)
    assert _doc(bucket) == none


def test_a_week_file_that_cannot_be_read_whole_is_named_and_the_rollup_goes_on(
    bucket: Path,
) -> None:
    """Its footer reads, its rows do not: rewriting the week (late data) fails for that
    table and week alone. It is named (week and table) with exit 3, not a traceback; the
    other tables' weeks are still packed, the week findings step still runs, and nothing
    is deleted: the late host-day's own file stays beside the week file it was not
    merged into. The next run says the same again."""
    import subprocess
    import sys

    tier.build(bucket, before=BEFORE)
    (f,) = [p for p in _week_files(bucket) if "date=2026-11-30" in str(p)]
    raw = bytearray(f.read_bytes())
    raw[4:4000] = bytes(3996)  # the first pages, not the footer
    f.write_bytes(bytes(raw))
    folder = next((bucket / "gpu_samples").glob("date=2026-11-30/host=*"))
    late = next(folder.glob("*.parquet"))
    shutil.copy(late, folder / "gpu_samples-20261130T235959000000Z-late00000000.parquet")
    args = [sys.executable, "-m", "leakreport", "rollup", str(bucket), "--before", str(BEFORE)]
    for _ in range(2):
        r = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert r.returncode == 3, r.stderr
        assert "incomplete: tier week of 2026-11-30: tier_gpu_buckets not written" in r.stderr
        assert "Traceback" not in r.stderr and f.exists()
        assert "week findings:" in r.stdout  # the step after the week files still ran
    have = tiercurrent.current_tier(
        str(bucket), None, lambda _d: True, lambda _h: True, tier._width(None)
    )
    key = (dt.date(2026, 11, 30), folder.name.removeprefix("host="))
    buckets_at, _ = have[key]["tier_gpu_buckets"]
    assert not tierweek.is_week(buckets_at) and Path(buckets_at.path).exists()
    for table in ("tier_gpu_info", "tier_idle_segments"):  # packed after the failed one
        at, _ = have[key][table]
        assert tierweek.is_week(at), table


def test_a_week_file_larger_than_the_memory_limit_is_written_sorted(tmp_path: Path) -> None:
    """A week file is sorted within the rollup's memory limit, spilling what does not fit:
    here 2.4 M metric_norm-like rows (60 hosts: six days in a week file, the seventh in day
    files) under a 64 MB limit, a scaled-down 125-host week under the real 512 MB. Sorted
    straight from the files, both ran out of memory (DuckDB 2.0)."""
    import duckdb

    hosts, days, day0 = 60, 6, dt.date(2026, 11, 23)
    gen = duckdb.connect()
    gen.execute("SET TimeZone = 'UTC'")

    def rows(key: str, host: str, n_days: int, first_day: int) -> str:
        return (
            f"SELECT {key} AS _tier_key, {host} AS host, TIMESTAMPTZ '2026-11-23 00:00:00+00' "
            "+ to_days(CAST(d AS INTEGER)) + to_seconds(60 * i) AS ts, "
            "['kv_usage', 'running', 'queued', 'requests_total'][m] AS metric, "
            "hash(h, d, i, m) / 18446744073709551615.0 AS value, "
            "CASE WHEN m = 4 THEN i * 1.0 END AS day_increase "
            f"FROM range(1, {hosts} + 1) a(h), range({first_day}, {first_day + n_days}) b(d), "
            "range(1440) c(i), range(1, 5) e(m)"
        )

    name = "'host=h' || lpad(CAST(h AS VARCHAR), 3, '0')"
    week = tmp_path / "week.parquet"
    key = f"strftime(DATE '2026-11-23' + CAST(d AS INTEGER), '%Y-%m-%d') || '/' || {name}"
    gen.execute(f"COPY ({rows(key, name, days, 0)}) TO '{week}' (FORMAT parquet)")
    files: dict[tierweek.Key, str] = {
        (day0 + dt.timedelta(days=d), f"host=h{h:03d}"): str(week)
        for h in range(1, hosts + 1)
        for d in range(days)
    }
    weeks = {str(week): frozenset(files)}
    last = day0 + dt.timedelta(days=days)
    for h in range(1, hosts + 1):  # the last day: one file per host, as `rollup` leaves it
        p = tmp_path / f"day-{h}.parquet"
        one = rows("NULL", f"'host=h{h:03d}'", 1, days).replace(
            f"range(1, {hosts} + 1)", f"range({h}, {h} + 1)"
        )
        gen.execute(f"COPY (SELECT * EXCLUDE (_tier_key) FROM ({one})) TO '{p}' (FORMAT parquet)")
        files[(last, f"host=h{h:03d}")] = str(p)

    con = duckdb.connect()
    for setting in ("memory_limit = '64MB'", "threads = 2", f"temp_directory = '{tmp_path}/spill'"):
        con.execute(f"SET {setting}")
    con.execute("SET TimeZone = 'UTC'")
    out = tmp_path / "out.parquet"
    tierweek.write(con, files, weeks, "metric", out, {"leakreport.table": "tier_metric_norm_week"})

    assert (
        pq.ParquetFile(out).schema_arrow.metadata[b"leakreport.table"] == b"tier_metric_norm_week"
    )
    cols = "metric, _tier_key, host, ts, value, day_increase"
    n, unsorted, keys = gen.execute(
        f"SELECT count(*), count(*) FILTER (WHERE n <> sorted_n), count(DISTINCT _tier_key) FROM ("
        f"SELECT _tier_key, file_row_number AS n, row_number() OVER (ORDER BY {cols}) - 1 AS sorted_n "
        f"FROM read_parquet('{out}', file_row_number = true))"
    ).fetchone()
    assert (n, unsorted, keys) == (hosts * (days + 1) * 1440 * 4, 0, hosts * (days + 1))
