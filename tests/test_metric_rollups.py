"""`requests`: requests served per host, cumulative over the whole span across counter
resets, whether each day comes from the stored tier (its `day_increase`) or from raw
samples; checked against the plain definition, reading by reading."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from analyzer import logevents, rollup, tier
from analyzer.bucket import open_checked
from collector.writer import BucketWriter

D1 = dt.datetime(2026, 11, 10, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
NOW = D1 + 4 * DAY


def _readings() -> dict[str, list[tuple[dt.datetime, float]]]:
    step = dt.timedelta(minutes=20)
    a: list[tuple[dt.datetime, float]] = []
    for i in range(72):  # day 1: a restart at 10:00
        t = D1 + i * step
        a.append((t, 100.0 + 5 * i if t.hour < 10 else 3.0 + 5 * (i - 30)))
    for i in range(72):  # no day 2; day 3 starts below day 1's last: a restart overnight
        a.append((D1 + 2 * DAY + i * step + dt.timedelta(minutes=7), 2.0 + 7 * i))
    # host b: days 1 and 2, one counter across midnight, readings at odd times
    b = [(D1 + dt.timedelta(minutes=13 + 29 * i), 1e6 + 11.0 * i) for i in range(99)]
    return {"a": a, "b": b}


def _expected(rows: list[tuple[dt.datetime, float]]) -> list[float]:
    out, cum, prev = [], 0.0, None
    for _t, v in sorted(rows):
        if prev is not None:
            cum += v if v < prev else v - prev
        out.append(cum)
        prev = v
    return out


@pytest.fixture
def bucket(tmp_path: Path) -> Path:
    for host, rows in _readings().items():
        BucketWriter(tmp_path, host).write(
            "metric_samples",
            [
                {
                    "ts": t,
                    "host": host,
                    "name": "vllm:request_success_total",
                    "labels": {},
                    "value": v,
                }
                for t, v in rows
            ],
        )
    return tmp_path


def _requests(bucket: Path) -> tuple[dict[str, list[float]], set[str]]:
    opened = open_checked(bucket, now=NOW)
    try:
        logevents.build(opened.con)
        rollup.build(opened.con, rollup.with_width({}, opened.span_s).get("rollup"), opened.tier)
        got: dict[str, list[float]] = {}
        for host, cum in opened.con.execute(
            "SELECT host, cum_requests FROM requests ORDER BY host, ts"
        ).fetchall():
            got.setdefault(host, []).append(cum)
        return got, set(opened.tier.tables) if opened.tier else set()
    finally:
        opened.con.close()


@pytest.mark.parametrize("before", [None, D1 + DAY, D1 + 2 * DAY, D1 + 3 * DAY])
def test_cumulative_requests_across_resets_days_and_tier(bucket: Path, before) -> None:
    """No tier, day 1 stored, days 1-2 stored, every day stored: the same sums."""
    if before is not None:
        tier.build(bucket, before=before.date(), weeks=before.day % 2 == 0)
    got, tables = _requests(bucket)
    assert ("metric_norm" in tables) == (before is not None)
    want = {h: _expected(rows) for h, rows in _readings().items()}
    assert got == want
    assert want["a"][-1] == 5 * 29 + (3 + 5 * 41) + 2 + 7 * 71  # two restarts, counted whole


# what kv_usage and activity are: every reading, from metrics and log lines, grouped by
# host and time (the highest wins; from_log where only log lines said it)
KV_SPEC = """SELECT host, ts, max(v) FROM (
    SELECT host, ts, value AS v FROM metric_norm WHERE metric = 'kv_usage'
    UNION ALL
    SELECT host, ts, kv_usage_ratio FROM log_events WHERE event = 'batch_stats' AND kv_usage_ratio IS NOT NULL)
GROUP BY ALL ORDER BY ALL"""
ACTIVITY_SPEC = """SELECT host, ts, max(running), bool_and(from_log) FROM (
    SELECT host, ts, value AS running, false AS from_log FROM metric_norm WHERE metric = 'running'
    UNION ALL
    SELECT host, ts, running_reqs, true FROM log_events WHERE event = 'batch_stats')
WHERE running IS NOT NULL GROUP BY ALL ORDER BY ALL"""


def test_kv_usage_and_activity_group_only_shared_times() -> None:
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(
        "CREATE TABLE metric_norm (host VARCHAR, ts TIMESTAMPTZ, metric VARCHAR, value DOUBLE,"
        " day_increase DOUBLE)"
    )
    con.execute(
        "CREATE TABLE log_events (host VARCHAR, ts TIMESTAMPTZ, event VARCHAR,"
        " kv_usage_ratio DOUBLE, running_reqs DOUBLE)"
    )
    t = [D1 + dt.timedelta(seconds=10 * i) for i in range(8)]
    metrics = [
        ("a", t[0], "kv_usage", 0.5),
        ("a", t[0], "running", 2.0),  # metrics alone
        ("a", t[1], "kv_usage", 0.2),
        ("a", t[1], "running", 1.0),  # a log line says more
        ("a", t[2], "kv_usage", 0.9),
        ("a", t[2], "running", 9.0),  # a log line says less
        ("b", t[1], "kv_usage", 0.3),
        ("b", t[1], "running", 0.0),  # same time, other host
        ("a", t[3], "queued", 4.0),
    ]
    logs = [
        ("a", t[1], "batch_stats", 0.4, 3.0),
        ("a", t[2], "batch_stats", 0.1, 2.0),
        ("a", t[4], "batch_stats", 0.6, 5.0),  # log lines alone, two at one time
        ("a", t[4], "batch_stats", 0.7, 4.0),
        ("a", t[5], "batch_stats", None, None),  # says neither
        ("a", t[6], "oom", 0.99, 99.0),  # not a batch line
        ("c", t[7], "batch_stats", 0.05, 1.0),
    ]
    con.executemany("INSERT INTO metric_norm VALUES (?, ?, ?, ?, NULL)", metrics)
    con.executemany("INSERT INTO log_events VALUES (?, ?, ?, ?, ?)", logs)
    stmts = {
        m.group(1): s
        for s in rollup._statements((rollup.ROLLUP_DIR / "02_activity.sql").read_text())
        if (m := rollup._CREATES.search(s))
    }
    for table, spec in (("kv_usage", KV_SPEC), ("activity", ACTIVITY_SPEC)):
        con.execute(stmts[table])
        got = con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
        assert got == con.execute(spec).fetchall()
        assert [(h, x) for h, x, *_ in got] == [
            ("a", t[0]),
            ("a", t[1]),
            ("a", t[2]),
            ("a", t[4]),
            ("b", t[1]),
            ("c", t[7]),
        ]
        values = {(h, x): tuple(rest) for h, x, *rest in got}
        if table == "kv_usage":
            assert [values["a", t[i]] for i in (1, 2, 4)] == [(0.4,), (0.9,), (0.7,)]
        else:
            assert [values["a", t[i]] for i in (1, 2, 4)] == [
                (3.0, False),
                (9.0, False),
                (5.0, True),
            ]


SERVER_INFO_SPEC = """SELECT host, pid, arg_max(engine, o), arg_max(engine_version, o), arg_max(model, o),
       arg_max(cmdline, o), arg_max(mem_fraction_static, o), arg_max(gpu_memory_utilization, o),
       arg_max(disable_fast_image_processor, o), arg_max(tp_size, o), arg_max(flags_json, o),
       min(ts), max(ts)
FROM (SELECT *, (ts, log_file, log_offset) AS o
      FROM (SELECT * FROM processes UNION ALL BY NAME SELECT * FROM log_server_info))
WHERE engine IS NOT NULL
GROUP BY host, pid ORDER BY ALL"""


def test_server_info_from_day_parts_is_the_latest_of_each_field() -> None:
    """Made from per-day parts (as the stored tier keeps them), server_info is still each
    field's latest value over every process row and log line."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(
        "CREATE TABLE all_processes (ts TIMESTAMPTZ, host VARCHAR, pid BIGINT, cmdline VARCHAR,"
        " engine VARCHAR, engine_version VARCHAR, model VARCHAR, mem_fraction_static DOUBLE,"
        " gpu_memory_utilization DOUBLE, disable_fast_image_processor BOOLEAN, tp_size INTEGER,"
        " flags_json VARCHAR)"
    )
    con.execute(
        "CREATE TABLE log_server_info (ts TIMESTAMPTZ, host VARCHAR, pid BIGINT, engine VARCHAR,"
        " engine_version VARCHAR, model VARCHAR, mem_fraction_static DOUBLE,"
        " gpu_memory_utilization DOUBLE, disable_fast_image_processor BOOLEAN, tp_size INTEGER,"
        " flags_json VARCHAR, log_file VARCHAR, log_offset BIGINT)"
    )
    t = [D1 + dt.timedelta(hours=10 * i) for i in range(5)]  # over three days
    con.executemany(
        "INSERT INTO all_processes VALUES (?, 'a', 1, ?, ?, ?, 'm', ?, NULL, ?, 2, ?)",
        [
            (t[0], "run --a", "sglang", "0.4.1", 0.8, False, "{}"),
            (t[1], "run --b", "sglang", None, 0.85, None, None),  # the version not known then
            (t[2], None, "sglang", "0.4.2", None, True, '{"x": 1}'),
            (t[3], "run --c", None, "9.9", 0.1, True, None),  # no engine: not a server row
            (t[4], "run --d", "sglang", None, 0.9, None, None),
        ],
    )
    con.executemany(
        "INSERT INTO log_server_info VALUES (?, 'a', NULL, 'vllm', ?, 'lm', ?, 0.9, ?, 4, '{}', ?, ?)",
        [
            (t[1], "0.6", 0.5, None, "s.log", 10),
            (t[1], "0.7", None, False, "s.log", 20),  # one read at the same instant, later
            (t[4], None, 0.6, None, "s.log", 30),  # the version: the later line of t[1]
        ],
    )
    stmts = {
        m.group(1): s
        for s in rollup._statements((rollup.ROLLUP_DIR / "05_server_info.sql").read_text())
        if (m := rollup._CREATES.search(s))
    }
    con.execute("CREATE VIEW processes AS SELECT * FROM all_processes")
    want = con.execute(SERVER_INFO_SPEC).fetchall()
    parts = []
    for day in range(3):  # the parts of each day, alone
        con.execute(
            "CREATE OR REPLACE VIEW processes AS SELECT * FROM all_processes"
            f" WHERE CAST(ts AS DATE) = DATE '{(D1 + day * DAY).date()}'"
        )
        con.execute(stmts["server_parts"])
        parts.append(f"day{day}")
        con.execute(f"CREATE TABLE day{day} AS SELECT * FROM server_parts")
    con.execute("DROP TABLE server_parts")
    con.execute(
        "CREATE VIEW server_parts AS "
        + " UNION ALL BY NAME ".join(f"SELECT * FROM {p}" for p in parts)
    )
    con.execute(stmts["server_info"])
    got = con.execute("SELECT * FROM server_info ORDER BY ALL").fetchall()
    assert got == want
    (a1,) = [r for r in got if r[1] == 1]
    assert a1[2:5] == ("sglang", "0.4.2", "m") and a1[5] == "run --d" and a1[6] == 0.9
    assert a1[8] is True  # from the third row, the latest that says
    (log,) = [r for r in got if r[1] is None]
    assert log[3] == "0.7" and log[6] == 0.6 and log[8] is False


def _idle_bucket(out: Path) -> None:
    """Three hosts, two and a half days: a GPU busy at random minutes (idle windows start
    all over the day) and request counters read in bursts with gaps of up to five hours,
    restarting now and then (one host has none)."""
    import random

    rnd = random.Random(11)
    end = D1 + 2 * DAY + dt.timedelta(hours=12)
    for host in ("a", "b", "c"):
        w = BucketWriter(out, host)
        busy = {rnd.randrange(3600) for _ in range(700)}  # minutes of the span
        w.write(
            "gpu_samples",
            [
                {
                    "ts": D1 + dt.timedelta(seconds=15 * i),
                    "host": host,
                    "gpu_index": 0,
                    "memory_total_bytes": 80 << 30,
                    "memory_used_bytes": (20 << 30) + (i % 5) * (1 << 20),
                    "utilization_gpu_pct": 90.0 if (i // 4) in busy else 0.0,
                }
                for i in range(int((end - D1).total_seconds() // 15))
            ],
        )
        if host == "c":
            continue
        rows, t, v = [], int(D1.timestamp()) + rnd.randrange(7200), 50.0
        while t < end.timestamp():
            v = float(rnd.randrange(5)) if rnd.random() < 0.02 else v + rnd.randrange(5)
            rows.append(
                {
                    "ts": dt.datetime.fromtimestamp(t, dt.UTC),
                    "host": host,
                    "name": "sglang:num_requests_total",
                    "labels": {},
                    "value": v,
                }
            )
            t += rnd.choice([rnd.randrange(1, 240), rnd.randrange(3600, 5 * 3600)])
        w.write("metric_samples", rows)


@pytest.mark.parametrize("before", [None, D1 + DAY, D1 + 3 * DAY])
def test_idle_windows_requests_served_are_the_last_reading_at_or_before_the_start(
    tmp_path: Path, before
) -> None:
    """idle_windows.cum_requests, found from the idle segments' day_requests and
    request_days (no lookup over every reading), is what one ASOF join over every reading
    of `requests` gives: a reading in the start's hour, only later ones in it, none yet
    that day, none before the start at all, a host with none; with no tier, a partial
    one and a full one."""
    _idle_bucket(tmp_path)
    if before is not None:
        tier.build(tmp_path, before=before.date())
    opened = open_checked(tmp_path, now=NOW)
    try:
        con = opened.con
        logevents.build(con)
        rollup.build(con, rollup.with_width({}, opened.span_s).get("rollup"), opened.tier)
        assert ("idle_segments" in (opened.tier.tables if opened.tier else set())) == (
            before is not None
        )
        got = con.execute(
            "SELECT host, gpu_index, start, cum_requests FROM idle_windows ORDER BY ALL"
        ).fetchall()
        want = con.execute(
            "SELECT w.host, w.gpu_index, w.start, r.cum_requests FROM idle_windows w "
            "ASOF LEFT JOIN requests r ON r.host = w.host AND r.ts <= w.start ORDER BY ALL"
        ).fetchall()
        assert len(got) > 300 and got == want
        # the cases are all there: a reading in the start's hour before it; only later
        # ones in that hour; none yet that day (an earlier day's last); none at all
        same, later, day_before, before_any = con.execute(
            "SELECT count(*) FILTER (WHERE date_trunc('hour', r.ts) = date_trunc('hour', w.start)), "
            "count(*) FILTER (WHERE r.ts < date_trunc('hour', w.start) AND EXISTS (SELECT 1 FROM "
            "requests q WHERE q.host = w.host AND q.ts > w.start "
            "AND date_trunc('hour', q.ts) = date_trunc('hour', w.start))), "
            "count(*) FILTER (WHERE r.ts < date_trunc('day', w.start)), "
            "count(*) FILTER (WHERE r.ts IS NULL AND w.host <> 'c') "
            "FROM idle_windows w ASOF LEFT JOIN requests r ON r.host = w.host AND r.ts <= w.start"
        ).fetchone() or (0, 0, 0, 0)
        assert min(same, later, day_before, before_any) >= 2, (same, later, day_before, before_any)
    finally:
        opened.con.close()
