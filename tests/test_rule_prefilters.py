"""CC001 and HR001 measure only what can fire: CC001 the GPUs with a dynamic process
pool, HR001 the RSS series that span the growth looked for. Over every simulated
scenario and a range of parameters (strict ones, the defaults, and loose ones under
which most GPUs and series qualify), each must return exactly what the plain form
returns, which measures everything and filters at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from analyzer import logevents, rollup
from analyzer.bucket import open_checked
from analyzer.packs import Rule, parse_rule

RULES = Path(__file__).resolve().parents[1] / "analyzer" / "packs" / "default" / "rules"

# The plain forms: every GPU (CC001) and every series (HR001) measured.
CC001_PLAIN = """
WITH procs AS (
    SELECT host, gpu_index, pb, min(first_ts) AS ts, sum(used_avg * samples) / max(samples) AS proc_used
    FROM proc_bins WHERE gpu_index IS NOT NULL AND used_avg IS NOT NULL GROUP BY ALL
),
gpu AS (
    SELECT g.host, g.gpu_index, CAST(floor(epoch(g.b) / s.proc_bin_s) AS BIGINT) AS pb, avg(g.used_avg) AS used
    FROM gpu_buckets g, rollup_settings s GROUP BY ALL
),
span AS (SELECT host, gpu_index, min(pb) AS pb0, max(pb) - min(pb) + 1 AS nb FROM procs GROUP BY ALL),
unattributed AS (
    SELECT p.host, p.gpu_index, p.ts, g.used - p.proc_used AS orphan,
           1 + CAST(floor(4 * (p.pb - s.pb0) / s.nb) AS INTEGER) AS quarter
    FROM procs p JOIN gpu g USING (host, gpu_index, pb) JOIN span s USING (host, gpu_index)
),
growth AS (
    SELECT host, gpu_index, min(ts) AS start, max(ts) AS "end",
           median(orphan) FILTER (WHERE quarter = 1) AS first_orphan,
           median(orphan) FILTER (WHERE quarter = 4) AS last_orphan
    FROM unattributed GROUP BY ALL
),
short AS (
    SELECT host, gpu_index, count(*) AS short_lived FROM gpu_lifetimes
    WHERE epoch(last_ts) - epoch(first_ts) < $short_lived_minutes * 60 GROUP BY ALL
),
maps AS (
    SELECT host, arg_max(pid, last_n - first_n) AS parent_pid, max(last_n - first_n) AS map_growth
    FROM (SELECT host, pid, process_start, arg_min(nvidia_device_count, ts) AS first_n,
                 arg_max(nvidia_device_count, ts) AS last_n
          FROM proc_maps WHERE nvidia_device_count IS NOT NULL GROUP BY ALL)
    GROUP BY host
)
SELECT g.host, g.gpu_index AS gpu, g.start, g."end",
       round((g.last_orphan - g.first_orphan) / 1048576, 0) AS growth_mib,
       coalesce(s.short_lived, 0) AS short_lived_pids, coalesce(m.map_growth, 0) AS map_growth
FROM growth g LEFT JOIN short s USING (host, gpu_index) LEFT JOIN maps m USING (host)
WHERE g.last_orphan - g.first_orphan >= $min_growth_mib * 1048576.0
  AND (coalesce(s.short_lived, 0) >= $min_short_lived OR coalesce(m.map_growth, 0) >= $min_map_growth)
ORDER BY g.host, g.gpu_index
"""

HR001_RSS = """WITH rss AS (
    SELECT host, pid, coalesce(epoch_us(process_start), 0) AS started, min(first_ts) AS ts,
           avg(rss_avg) AS rss, 'procfs' AS source
    FROM proc_bins WHERE rss_avg IS NOT NULL GROUP BY host, pid, started, pb
    UNION ALL
    SELECT host, 0 AS pid, 0 AS started, ts, value AS rss, 'metrics' AS source
    FROM metric_norm WHERE metric = 'rss_bytes'
),
span AS ("""


@pytest.fixture(scope="module")
def con(sim_bucket) -> duckdb.DuckDBPyConnection:
    opened = open_checked(sim_bucket[0])
    logevents.build(opened.con)
    rollup.build(opened.con, rollup.with_width({}, opened.span_s).get("rollup"))
    return opened.con


def _rule(rule_id: str) -> Rule:
    rule = parse_rule(RULES / f"{rule_id}.sql")
    assert isinstance(rule, Rule), rule
    return rule


def _run(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> list[tuple]:
    return con.execute(sql, params).fetchall()


CC001_PARAMS: list[dict[str, Any]] = [
    {},
    {"min_short_lived": 0},  # every GPU is in a pool
    {"min_short_lived": 0, "min_growth_mib": -1_000_000},  # ... and every measured GPU fires
    {"min_short_lived": 2, "min_growth_mib": 0},
    {"min_short_lived": 1000, "min_map_growth": 1},  # the mappings alone decide
]


@pytest.mark.parametrize("over", CC001_PARAMS, ids=[str(p) for p in CC001_PARAMS])
def test_cc001_measures_only_pool_gpus_and_finds_the_same(con, over) -> None:
    rule = _rule("CC001")
    params = rule.bound_params(over)
    # not pid: arg_max over pids whose mappings grew alike picks any of them, in both forms
    cols = 'host, gpu, start, "end", growth_mib, short_lived_pids, map_growth'
    got = _run(con, f"SELECT {cols} FROM ({rule.sql})", params)
    assert got == _run(con, CC001_PLAIN, params)


def test_cc001_comparison_is_not_vacuous(con) -> None:
    """The loose parameters make every GPU fire, and the defaults find the pool scenario."""
    rule = _rule("CC001")
    loose = rule.bound_params(CC001_PARAMS[2])
    assert len(_run(con, CC001_PLAIN, loose)) > 10
    assert _run(con, CC001_PLAIN, rule.bound_params(None))


@pytest.fixture(scope="module")
def rss_con() -> duckdb.DuckDBPyConnection:
    """Synthetic RSS series (the scenarios have two): 90 processes on 3 hosts, 48 bins each,
    flat, growing at different rates, one spike on slow growth, a step up; some on two
    GPUs, some bins without RSS, some PIDs reused; a server metric per host; requests
    flat or rising."""
    c = duckdb.connect()
    c.execute("SET TimeZone = 'UTC'")
    c.execute("SELECT setseed(0.17)")
    c.execute(
        """CREATE TABLE proc_bins AS
        SELECT 'h' || (pid % 3) AS host, gpu AS gpu_index, pid, b AS pb,
               TIMESTAMPTZ '2026-01-05 00:00:00+00' + to_minutes(5 * b) AS first_ts,
               -- every seventh PID comes back halfway: a second process (start known)
               CASE WHEN pid % 7 = 0 AND b >= 24
                    THEN TIMESTAMPTZ '2026-01-05 02:00:00+00' END AS process_start,
               CASE WHEN (pid + b) % 17 = 0 THEN NULL ELSE 2e9 + random() * 4e7 + CASE pid % 4
                   WHEN 0 THEN 0
                   WHEN 1 THEN b * pid * 4e5
                   WHEN 2 THEN CASE WHEN b = 20 THEN 1.2e9 ELSE b * 8e6 END
                   ELSE CASE WHEN b > 30 THEN 7e8 ELSE 0 END END END AS rss_avg
        FROM range(1, 91) p(pid), range(48) r(b), range(2) g(gpu)
        WHERE gpu = 0 OR pid % 5 = 0"""
    )
    c.execute(
        """CREATE TABLE metric_norm AS
        SELECT 'h' || h AS host, TIMESTAMPTZ '2026-01-05 00:00:00+00' + to_minutes(5 * b) AS ts,
               'rss_bytes' AS metric, 3e9 + b * h * 1.5e7 + random() * 3e7 AS value
        FROM range(3) x(h), range(48) r(b)"""
    )
    c.execute(
        """CREATE TABLE requests AS
        SELECT 'h' || h AS host, TIMESTAMPTZ '2026-01-05 00:00:00+00' + to_minutes(5 * b) AS ts,
               b * 600.0 + CASE WHEN h = 2 THEN b * b * 20.0 ELSE 0 END AS cum_requests
        FROM range(3) x(h), range(48) r(b)"""
    )
    return c


HR001_PARAMS: list[dict[str, Any]] = [
    {},
    {"min_growth_mib": 100, "min_samples": 1, "max_rate_rise": 1000.0, "min_late_fraction": -10.0},
    {"min_growth_mib": 300},
    {"min_growth_mib": 600, "min_late_fraction": 0.0},
    {"min_growth_mib": 1200},
    {"min_growth_mib": 100_000},
]


def _hr001(plain: bool, hits: bool) -> str:
    """HR001 as given or in the plain form; with ``hits``, every candidate (before one
    per host is picked) instead of the findings."""
    sql = _rule("HR001").sql
    if plain:
        sql = HR001_RSS + sql.split("\nspan AS (", 1)[1]
        assert "moved" not in sql
    if hits:
        head = sql.split("\n)\nSELECT host, NULL AS gpu", 1)[0]
        sql = (
            head
            + "\n)\nSELECT host, pid, started, source, start, q1, q3, q4, early, late FROM hits "
            "ORDER BY ALL"
        )
    return sql


@pytest.mark.parametrize("over", HR001_PARAMS, ids=[str(p) for p in HR001_PARAMS])
@pytest.mark.parametrize("hits", [True, False], ids=["hits", "findings"])
def test_hr001_measures_only_moving_series_and_finds_the_same(rss_con, con, over, hits) -> None:
    params = _rule("HR001").bound_params(over)
    for c in (rss_con, con):
        assert _run(c, _hr001(False, hits), params) == _run(c, _hr001(True, hits), params)


def test_hr001_comparison_is_not_vacuous(rss_con) -> None:
    """Some series are left out by the span test, and the rest still fire: the
    comparisons above cover both sides."""
    rule = _rule("HR001")
    counts = [len(_run(rss_con, _hr001(True, True), rule.bound_params(p))) for p in HR001_PARAMS]
    assert counts[1] > 30 and 0 < counts[0] < counts[1] and counts[-1] == 0
    moved = rule.sql.split("\nrss AS (", 1)[0] + "\nSELECT count(*) FROM moved"
    n = _run(rss_con, moved, {"min_growth_mib": 512})[0][0]
    assert 0 < n < 90
