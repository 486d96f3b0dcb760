"""Server lifetimes without a process table: from each log family, from memory resets."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer import logevents, rollup
from analyzer.bucket import Scope, open_bucket
from analyzer.packs import load_packs, referenced_params
from analyzer.runner import analyze
from simulator.generate import simulate


def lifetimes(bucket: Path) -> list[tuple[int, int, str]]:
    """(GPU, lifetime id, source) per lifetime: ids 1, 2, ... from the process table,
    -1, -2, ... inferred."""
    con, _ = open_bucket(bucket, Scope())
    try:
        logevents.build(con)
        rollup.build(con)
        rows = con.execute(
            "SELECT gpu_index, lifetime, lifetime_source FROM gpu_lifetimes ORDER BY gpu_index, first_ts"
        ).fetchall()
    finally:
        con.close()
    return [(int(g), int(p), str(s)) for g, p, s in rows]


@pytest.fixture(scope="module")
def sawtooth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SGLang restarted every 90 min, as nvidia-smi CSV + server log (3.5 h: 3 lifetimes)."""
    b = tmp_path_factory.mktemp("saw") / "b"
    simulate("restart-masked-leak", b, hosts=1, hours=3.5, seed=5, shape="nvidia-smi-csv")
    return b


def test_sglang_log_start_lines_make_lifetimes(sawtooth: Path) -> None:
    got = lifetimes(sawtooth)
    assert [(g, p) for g, p, _ in got] == [(0, -1), (0, -2), (0, -3)]
    assert {s for _, _, s in got} == {"server log"}


def test_memory_resets_make_lifetimes_without_a_log(sawtooth: Path, tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(sawtooth, b)
    shutil.rmtree(b / "log_lines")  # nvidia-smi alone: the restarts show as memory resets
    got = lifetimes(b)
    assert len(got) == 3 and {s for _, _, s in got} == {"memory reset"}


def test_no_reset_no_log_is_one_lifetime(tmp_path: Path) -> None:
    b = tmp_path / "b"
    simulate("cache-warmup", b, hosts=1, hours=2, seed=5, shape="nvidia-smi-csv")
    shutil.rmtree(b / "log_lines")
    assert lifetimes(b) == [(0, -1, "memory reset")]


def test_native_keeps_process_table_lifetimes(tmp_path: Path) -> None:
    b = tmp_path / "b"
    simulate("restart-masked-leak", b, hosts=1, hours=3.5, seed=5)
    got = lifetimes(b)
    assert [(p, s) for _, p, s in got] == [
        (1, "process table"),
        (2, "process table"),
        (3, "process table"),
    ]


def test_vllm_oom_restarts_are_a_sawtooth_not_a_load_spike(tmp_path: Path) -> None:
    """The hourly vision OOM story: vLLM's start-up lines and pid prefixes cut the
    lifetimes, so the OOMs are tied to the growth before them."""
    b = tmp_path / "b"
    simulate("vision-oom-hourly", b, hosts=1, hours=4, seed=5, shape="nvidia-smi-csv")
    got = lifetimes(b)
    assert len(got) >= 3 and {s for _, _, s in got} == {"server log"}
    doc = analyze(b, load_packs(), with_series=False)
    by_rule = {f.rule_id: f for f in doc.findings}
    assert by_rule["RM001"].evidence["lifetime_source"] == "server log"
    assert by_rule["OE001"].evidence["leak_before"] is True
    assert "the end of a leak" in by_rule["OE001"].summary
    assert by_rule["GM001"].evidence["lifetime_source"] == "server log"


def test_oom_with_no_device_samples_says_it_cannot_tell(tmp_path: Path) -> None:
    b = tmp_path / "b"
    simulate("vision-oom-hourly", b, hosts=1, hours=2, seed=5, shape="logs-only")
    doc = analyze(b, load_packs(), with_series=False)
    (oe,) = [f for f in doc.findings if f.rule_id == "OE001"]
    assert "cannot be told from a load spike" in oe.summary and oe.evidence["leak_before"] is False
    cov = {c["host"]: c for c in doc.coverage}[oe.host]
    assert cov["inputs"] == ["log_lines"] and not cov["complete"]
    lacked = {m["rule_id"]: m for m in cov["not_checked"]}
    assert "device memory" in lacked["GM001"]["lacked"][0]
    assert "nvidia-smi" in lacked["GM001"]["hint"]
    skipped = {r.rule_id: r for r in doc.run.rules if r.status == "skipped"}
    assert skipped["CC001"].hint and "leakcollect run" in skipped["CC001"].hint


def _pid_lifetimes(bucket: Path) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """(lifetime, pid, first day) of the leaking host's GPU 0, and (segment, pid) of its idle trend."""
    con, _ = open_bucket(bucket, Scope())
    try:
        logevents.build(con)
        rollup.build(con)
        where = "WHERE host = 'fast-image-processor-leak-00' AND gpu_index = 0"
        lt = con.execute(
            f"SELECT lifetime, pid, day(first_ts) FROM gpu_lifetimes {where} ORDER BY lifetime"
        ).fetchall()
        tr = con.execute(f"SELECT segment, pid FROM idle_trend {where} ORDER BY segment").fetchall()
    finally:
        con.close()
    return [(int(a), int(b), int(c)) for a, b, c in lt], [(int(a), int(b)) for a, b in tr]


def _findings(bucket: Path) -> list[dict[str, object]]:
    doc = analyze(bucket, load_packs(), with_series=False)
    return [dataclasses.asdict(f) for f in doc.findings]


# A PID the OS hands out again: the simulator gives the servers of both weeks of
# the two_weeks bucket (conftest) the same PIDs (4000, 4017, 4034, 4051 on GPU 0 of
# fast-image-processor-leak-00).
REUSED = [(1, 4000, 18), (2, 4017, 18), (3, 4034, 18), (4, 4051, 18),
          (5, 4000, 25), (6, 4017, 25), (7, 4034, 25), (8, 4051, 25)]  # fmt: skip


def test_a_reused_pid_is_a_new_lifetime_and_findings_do_not_vary(two_weeks: Path) -> None:
    lt, trend = _pid_lifetimes(two_weeks)
    assert lt == REUSED  # two lifetimes per PID, one each week, numbered by first sample
    assert trend == [(k, pid) for k, pid, _ in REUSED]
    first = _findings(two_weeks)
    by_rule = {f["rule_id"]: f for f in first}
    assert by_rule["RM001"]["evidence"]["lifetimes"] == 8
    assert by_rule["GM001"]["pid"] == 4051 and by_rule["GM001"]["evidence"]["segments"] == 8
    for _ in range(4):
        assert _findings(two_weeks) == first


def test_without_process_start_the_gap_splits_a_reused_pid(two_weeks: Path, tmp_path: Path) -> None:
    """As from an importer with no process start: the week between the two servers of
    one PID cuts it; the samples of one server (every 10 s) stay one lifetime."""
    b = tmp_path / "b"
    shutil.copytree(two_weeks, b)
    files = list((b / "gpu_processes").rglob("*.parquet"))
    assert files
    for f in files:
        t = pq.read_table(f)
        i = t.schema.get_field_index("process_start")
        t = t.set_column(i, t.schema.field(i), pa.nulls(len(t), t.schema.field(i).type))
        pq.write_table(t, f)
    lt, _ = _pid_lifetimes(b)
    assert lt == REUSED


PROC_SQL = """
CREATE TABLE gpu_processes AS
SELECT 'h' AS host, 0 AS gpu_index, pid, TIMESTAMPTZ '2026-01-05 00:00:00+00' + to_seconds(s) AS ts,
       CAST(1e9 AS BIGINT) AS used_gpu_memory_bytes, CAST(NULL AS BIGINT) AS vm_rss_bytes,
       CASE WHEN known THEN TIMESTAMPTZ '2026-01-05 00:00:00+00' + to_seconds(st) END AS process_start
FROM (VALUES {rows}) v(pid, s0, s1, st, known), LATERAL (SELECT unnest(range(s0, s1, 10)) AS s);
CREATE TABLE gpu_info AS SELECT 'h' AS host, 0 AS gpu_index,
    TIMESTAMPTZ '2026-01-05 00:00:00+00' AS first_ts, TIMESTAMPTZ '2026-01-06 00:00:00+00' AS last_ts;
CREATE TABLE log_lines (host VARCHAR, ts TIMESTAMPTZ, text VARCHAR);
CREATE TABLE gpu_buckets (host VARCHAR, gpu_index INTEGER, bi BIGINT, b TIMESTAMPTZ,
                          used_min DOUBLE, used_max DOUBLE, total DOUBLE);
CREATE TABLE gpu_samples (host VARCHAR, gpu_index INTEGER, ts TIMESTAMPTZ, namespace VARCHAR, pod VARCHAR);
CREATE VIEW gpu_pod_samples AS SELECT * FROM gpu_samples;
"""


def _proc_lifetimes(rows: str) -> list[tuple[int, int, int, int]]:
    """(lifetime, pid, first s, last s) from gpu_processes rows (pid, from s, to s, start s,
    start known) sampled every 10 s, through the lifetime statements alone."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(PROC_SQL.format(rows=rows))
    (f,) = [f for f in rollup.rollup_files() if f.name.startswith("02b_")]
    for stmt in rollup._statements(f.read_text(encoding="utf-8")):
        refs = referenced_params(stmt)
        con.execute(stmt, {k: rollup.DEFAULTS[k] for k in refs} if refs else None)
    got = con.execute(
        "SELECT lifetime, pid, epoch(first_ts) - epoch(TIMESTAMPTZ '2026-01-05 00:00:00+00'),"
        " epoch(last_ts) - epoch(TIMESTAMPTZ '2026-01-05 00:00:00+00') FROM gpu_lifetimes ORDER BY lifetime"
    ).fetchall()
    con.close()
    return [(int(a), int(b), int(c), int(d)) for a, b, c, d in got]


def test_process_start_splits_a_pid_back_at_once() -> None:
    # pid 7 exits at 1790 s and a new process gets pid 7 at 1800 s (no gap to tell)
    assert _proc_lifetimes("(7, 0, 1800, 0, true), (7, 1800, 3600, 1795, true)") == [
        (1, 7, 0, 1790),
        (2, 7, 1800, 3590),
    ]


def test_without_process_start_only_a_long_gap_splits() -> None:
    # lifetime_merge_s is 600: after the sample at 1790 s, a 601 s silence cuts, 600 s does not
    assert _proc_lifetimes("(7, 0, 1800, 0, false), (7, 2390, 3600, 0, false)") == [(1, 7, 0, 3590)]
    assert _proc_lifetimes("(7, 0, 1800, 0, false), (7, 2391, 3600, 0, false)") == [
        (1, 7, 0, 1790),
        (2, 7, 2391, 3591),
    ]


def test_samples_without_a_start_join_the_known_one() -> None:
    """A sample whose start could not be read (the process was exiting) is no new lifetime
    (before its first known start either), and a long gap within one known start is none;
    ids follow the first sample."""
    assert _proc_lifetimes(
        "(9, 600, 1200, 600, true), (9, 1200, 1500, 0, false), (9, 5000, 6000, 600, true),"
        " (3, 0, 300, 0, false), (5, 0, 300, 0, false), (5, 300, 900, 10, true)"
    ) == [(1, 3, 0, 290), (2, 5, 0, 890), (3, 9, 600, 5990)]
