"""Idle windows from the stored tier's idle segments are the ones derived from raw samples:
runs joined across midnight keep their exact median, a day's first buckets are checked
against the readings of the day before, and server log lines count in the stored days."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from analyzer import bucket as bucket_mod
from analyzer import logevents, rollup, tier
from collector.writer import BucketWriter

D1 = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
D2, D3 = D1 + dt.timedelta(days=1), D1 + dt.timedelta(days=2)
END = D3 + dt.timedelta(hours=12)
NOW = D3 + dt.timedelta(days=1)
MIB = 1 << 20
MINUTE = dt.timedelta(minutes=1)


def _busy(t: dt.datetime) -> bool:
    """The GPU computes: an hour on each day."""
    return any(d + dt.timedelta(hours=6) <= t < d + dt.timedelta(hours=7) for d in (D1, D2, D3))


def _used(t: dt.datetime) -> int:
    """Idle memory differs per day and wobbles within it: a window across midnight has a
    median that neither day alone gives."""
    base = {D1.date(): 1000, D2.date(): 2000, D3.date(): 1500}[t.date()]
    return (base + (t.minute % 7) * 3 + (500 if _busy(t) else 0)) * MIB


def _sample(t: dt.datetime, used: int, util: float) -> dict[str, Any]:
    return {
        "ts": t,
        "host": "h",
        "gpu_index": 0,
        "memory_total_bytes": 80_000 * MIB,
        "memory_used_bytes": used,
        "utilization_gpu_pct": util,
    }


def _write(out: Path) -> None:
    w = BucketWriter(out, "h")
    n = int((END - D1).total_seconds() // 10)
    ts = [D1 + dt.timedelta(seconds=10 * i) for i in range(n)]
    w.write(
        "gpu_samples",
        [_sample(t, _used(t), 90.0 if _busy(t) else 0.0) for t in ts],
    )
    # running requests once a minute, none; but the last reading of the first day says
    # 3, 30 s before midnight, and the second day's readings start at 00:03 - so the
    # second day's first bucket is busy, which that day's samples alone cannot tell
    metrics = []
    for i in range(int((END - D1).total_seconds() // 60)):
        t = D1 + dt.timedelta(seconds=60 * i + 30)
        if D2 <= t < D2 + dt.timedelta(minutes=3):
            continue
        running = 3.0 if t == D2 - dt.timedelta(seconds=30) else 0.0
        metrics.append(
            {
                "ts": t,
                "host": "h",
                "name": "sglang:num_running_reqs",
                "labels": {},
                "value": running,
            }
        )
    w.write("metric_samples", metrics)
    # the server's batch-stats lines: busy for ten minutes of the second day's afternoon
    # while the GPU shows no utilisation (only the log tells)
    lines = []
    for i in range(60):
        t = D2 + dt.timedelta(hours=15, seconds=10 * i)
        text = (
            f"[{t:%Y-%m-%d %H:%M:%S} TP0] Decode batch, #running-req: 2, #token: 900, "
            "token usage: 0.40, cuda graph: True, gen throughput (token/s): 50.00, #queue-req: 0"
        )
        lines.append(
            {
                "ts": t,
                "host": "h",
                "file": "/var/log/sglang.log",
                "inode": 7,
                "offset": 200 * i,
                "text": text,
            }
        )
    w.write("log_lines", lines)


def _windows(out: Path) -> tuple[list[tuple[Any, ...]], int]:
    """idle_windows as the analysis derives it, and how many host-days the tier covered."""
    opened = bucket_mod.open_checked(out, now=NOW)
    try:
        logevents.build(opened.con)
        rollup.build(opened.con, rollup.with_width({}, opened.span_s).get("rollup"), opened.tier)
        rows = opened.con.execute("SELECT * FROM idle_windows ORDER BY ALL").fetchall()
        # every baseline is the median of its window's buckets, whichever days they lie in
        (off,) = opened.con.execute(
            "SELECT count(*) FROM idle_windows w WHERE baseline IS DISTINCT FROM ("
            "SELECT median(used_avg) FROM gpu_buckets g WHERE g.host = w.host "
            "AND g.gpu_index = w.gpu_index AND g.b >= w.start AND g.b < w.end)"
        ).fetchone() or (None,)
        assert off == 0
        (covered,) = opened.con.execute("SELECT count(*) FROM idle_cover").fetchone() or (0,)
        return rows, int(covered)
    finally:
        opened.con.close()


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("idle") / "bucket"
    _write(out)
    return out


WEEKS = pytest.mark.parametrize("weeks", [False, True], ids=["day-files", "week-files"])


@WEEKS
def test_idle_windows_identical_with_no_partial_and_full_tier(
    made: Path, tmp_path: Path, weeks: bool
) -> None:
    import shutil

    out = Path(shutil.copytree(made, tmp_path / "b"))
    raw, covered = _windows(out)
    assert covered == 0
    starts = {r[2] for r in raw}
    ends = {r[3] for r in raw}
    # the reading before midnight keeps the second day's first bucket out of every window
    assert D2 not in starts and D2 not in ends
    assert D2 + dt.timedelta(minutes=1) in starts
    # the log's busy minutes split the second day's afternoon
    assert D2 + dt.timedelta(hours=15) in ends
    # one window runs across the second midnight, its median from both days
    across = [r for r in raw if r[2] < D3 < r[3]]
    assert len(across) == 1
    assert 2000 * MIB < across[0][5] < 2018 * MIB or 1500 * MIB < across[0][5] < 1518 * MIB

    tier.build(out, before=D2.date(), weeks=weeks)  # the first day stored
    assert _windows(out) == (raw, 1)
    tier.build(out, before=D3.date(), weeks=weeks)  # and the second: the third is derived
    assert _windows(out) == (raw, 2)
    # the second day's stored segments hold its first bucket as idle (the day alone cannot
    # tell): the analysis checked it against the first day's last reading
    import duckdb

    (stored,) = duckdb.connect().execute(
        f"SELECT count(*) FROM read_parquet('{out}/tier_idle_segments*/*/*/*.parquet', "
        f"union_by_name = true) WHERE zone AND b0 = {int(D2.timestamp()) // 60}"
    ).fetchone() or (0,)
    assert stored == 1


def test_other_idle_parameters_derive_every_day(made: Path, tmp_path: Path) -> None:
    """Segments stored with the default idle threshold are not read by an analysis with
    another one: every host-day is derived again, and the windows are those of raw samples."""
    import shutil

    out = Path(shutil.copytree(made, tmp_path / "b"))
    tier.build(out, before=D3.date())

    def windows(params: dict[str, Any]) -> tuple[int, int]:
        opened = bucket_mod.open_checked(out, now=NOW)
        try:
            logevents.build(opened.con)
            p = {**rollup.with_width({}, opened.span_s)["rollup"], **params}
            rollup.build(opened.con, p, opened.tier)
            (n,) = opened.con.execute("SELECT count(*) FROM idle_windows").fetchone() or (0,)
            (c,) = opened.con.execute("SELECT count(*) FROM idle_cover").fetchone() or (0,)
            return int(n), int(c)
        finally:
            opened.con.close()

    assert windows({})[1] == 2
    # at 95 % every bucket is idle (busy hours at 90 %): one window a day fewer splits
    n, covered = windows({"idle_util_pct": 95.0})
    assert covered == 0
    shutil.rmtree(out / "tier_idle_segments")
    assert windows({"idle_util_pct": 95.0}) == (n, 0)


@WEEKS
def test_late_log_lines_make_their_day_derived_again(
    made: Path, tmp_path: Path, weeks: bool
) -> None:
    """Log lines written after the rollup make that host-day's stored segments stale (its
    stored buckets are still read): the windows are those of raw samples, with the new
    busy minutes."""
    import shutil

    out = Path(shutil.copytree(made, tmp_path / "b"))
    tier.build(out, before=D3.date(), weeks=weeks)
    assert any((out / f"{t}_week").exists() for t in tier.ALL_TIERS) == weeks
    t0 = D2 + dt.timedelta(hours=20)
    late = [
        {
            "ts": t0 + dt.timedelta(seconds=10 * i),
            "host": "h",
            "file": "/var/log/sglang.log",
            "inode": 7,
            "offset": 100_000 + 200 * i,
            "text": f"[{t0 + dt.timedelta(seconds=10 * i):%Y-%m-%d %H:%M:%S} TP0] Decode batch, "
            "#running-req: 1, #token: 90, token usage: 0.10, cuda graph: True, "
            "gen throughput (token/s): 9.00, #queue-req: 0",
        }
        for i in range(30)
    ]
    BucketWriter(out, "h").write("log_lines", late)
    plain = Path(shutil.copytree(out, tmp_path / "plain"))
    for t in tier.ALL_TIERS:
        shutil.rmtree(plain / t, ignore_errors=True)
        shutil.rmtree(plain / f"{t}_week", ignore_errors=True)
    raw, _ = _windows(plain)
    assert t0 in {r[3] for r in raw}  # the late lines end a window
    assert _windows(out) == (raw, 1)  # the first day stored; the second derived again
    # the idle segments derived in the analysis read the stored buckets of the second day
    # only (the first day's, covered, are not read at all)
    opened = bucket_mod.open_checked(out, now=NOW)
    try:
        logevents.build(opened.con)
        rollup.build(opened.con, rollup.with_width({}, opened.span_s).get("rollup"), opened.tier)
        (sql,) = opened.con.execute(
            "SELECT sql FROM duckdb_views() WHERE view_name = 'idle_gpu_buckets'"
        ).fetchone() or ("",)
    finally:
        opened.con.close()
    if weeks:  # the week file, its rows of the second day only
        assert "tier_gpu_buckets_week/date=2026-11-23/" in sql
        assert "_tier_key IN ('2026-11-24/h')" in sql
    else:
        assert "tier_gpu_buckets/date=2026-11-24/" in sql and "date=2026-11-23" not in sql


def test_a_reading_where_the_gpu_samples_have_a_gap_still_counts(tmp_path: Path) -> None:
    """The GPU is not sampled for the last two minutes of the first day, but the server
    says 3 requests run 30 s before midnight: the second day's first bucket is busy (the
    reading is 90 s old at its end), its second idle, with no tier and with both days
    stored."""
    w = BucketWriter(tmp_path, "h")
    gap = (D2 - 2 * MINUTE, D2)
    w.write(
        "gpu_samples",
        [
            _sample(t, 1000 * MIB, 0.0)
            for i in range(int((END - D1).total_seconds() // 10))
            if not (gap[0] <= (t := D1 + dt.timedelta(seconds=10 * i)) < gap[1])
        ],
    )
    w.write(
        "metric_samples",
        [
            {
                "ts": t,
                "host": "h",
                "name": "sglang:num_running_reqs",
                "labels": {},
                "value": 3.0 if t == D2 - dt.timedelta(seconds=30) else 0.0,
            }
            for i in range(int((END - D1).total_seconds() // 60))
            # none in the second day's first three minutes
            if not (D2 <= (t := D1 + dt.timedelta(seconds=60 * i + 30)) < D2 + 3 * MINUTE)
        ],
    )
    raw, covered = _windows(tmp_path)
    assert covered == 0
    starts = {r[2] for r in raw}
    assert D2 not in starts and D2 + MINUTE in starts
    tier.build(tmp_path, before=D3.date())
    assert _windows(tmp_path) == (raw, 2)
