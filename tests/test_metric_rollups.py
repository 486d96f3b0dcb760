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


def test_idle_windows_requests_served_are_the_last_reading_at_or_before_the_start() -> None:
    """idle_windows.cum_requests, found per hour, is what one ASOF join over every
    reading gives: readings in the start's hour before, at and after it, hours with
    none, starts before the first reading, a NULL value as the last reading."""
    import random

    import duckdb

    rnd = random.Random(11)
    t0 = int(D1.timestamp())
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE requests (host VARCHAR, ts TIMESTAMPTZ, cum_requests DOUBLE)")
    con.execute(
        "CREATE TABLE idle_runs (host VARCHAR, gpu_index INTEGER, start TIMESTAMPTZ, "
        '"end" TIMESTAMPTZ, buckets BIGINT, baseline DOUBLE, low DOUBLE, high DOUBLE, '
        "total DOUBLE, kv_idle DOUBLE)"
    )
    con.execute(
        "CREATE TABLE gpu_lifetimes (host VARCHAR, gpu_index INTEGER, lifetime BIGINT, "
        "pid BIGINT, lifetime_source VARCHAR, first_ts TIMESTAMPTZ, last_ts TIMESTAMPTZ, "
        "max_used DOUBLE)"
    )
    readings, runs = [], []
    for host in ("a", "b", "c"):
        # bursts of readings a few seconds to minutes apart, with gaps of up to 5 hours
        t, cum = t0 + rnd.randrange(7200), 0.0
        while t < t0 + 2 * 86400:
            cum += rnd.randrange(5)
            step = rnd.choice([rnd.randrange(1, 240), rnd.randrange(3600, 5 * 3600)])
            # now and then a NULL value, also as the last reading before a gap
            readings.append((host, t, None if rnd.random() < 0.03 + 0.2 * (step >= 3600) else cum))
            t += step
        starts = [t0 + 60 * rnd.randrange(2 * 1440) for _ in range(150)]
        starts += [r[1] for r in readings if r[0] == host][:: len(readings) // 20 or 1]
        for s in starts:  # two GPUs often share a start
            for g in range(1 + (s % 2)):
                runs.append((host, g, s, s + 600, 10, 1.0, 1.0, 1.0, 80.0, None))
    con.executemany("INSERT INTO requests VALUES (?, to_timestamp(?), ?)", readings)
    con.executemany(
        "INSERT INTO idle_runs VALUES (?, ?, to_timestamp(?), to_timestamp(?), ?, ?, ?, ?, ?, ?)",
        runs,
    )
    (stmt,) = [
        s
        for s in rollup._statements((rollup.ROLLUP_DIR / "03_idle_windows.sql").read_text())
        if "TABLE idle_windows AS" in s
    ]
    con.execute(stmt, {"loaded_fraction": rollup.DEFAULTS["loaded_fraction"]})
    got = con.execute(
        "SELECT host, gpu_index, start, cum_requests FROM idle_windows ORDER BY ALL"
    ).fetchall()
    want = con.execute(
        "SELECT w.host, w.gpu_index, w.start, r.cum_requests FROM idle_runs w "
        "ASOF LEFT JOIN requests r ON r.host = w.host AND r.ts <= w.start ORDER BY ALL"
    ).fetchall()
    assert len(got) == len(runs) and got == want
    # the cases are all there: the reading in the start's hour; only later ones in it
    # (the answer is an earlier hour's); none before the start at all; a NULL value
    same, later, before_any, null = con.execute(
        "SELECT count(*) FILTER (WHERE hour(r.ts) = hour(w.start) AND r.ts::DATE = w.start::DATE), "
        "count(*) FILTER (WHERE r.ts < date_trunc('hour', w.start) AND EXISTS (SELECT 1 FROM "
        "requests q WHERE q.host = w.host AND q.ts > w.start "
        "AND date_trunc('hour', q.ts) = date_trunc('hour', w.start))), "
        "count(*) FILTER (WHERE r.ts IS NULL), "
        "count(*) FILTER (WHERE r.cum_requests IS NULL AND r.ts < date_trunc('hour', w.start)) "
        "FROM idle_runs w ASOF LEFT JOIN requests r ON r.host = w.host AND r.ts <= w.start"
    ).fetchone() or (0, 0, 0, 0)
    assert min(same, later, before_any, null) >= 2, (same, later, before_any, null)
