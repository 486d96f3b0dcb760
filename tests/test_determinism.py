"""The same bucket gives the same findings document, every run, at any DuckDB thread count.

Parallel hash aggregates and sorts meet rows in an order that changes from run to run;
wherever a query keeps "one of" several rows (DISTINCT ON, arg_max on a tie, the first row
of a window partition) the document could change with it. These tests analyse a fleet of
several scenarios, with a log read twice and two source failures at one instant, under
1, 2 and 4 threads, twice each, and compare the documents.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from analyzer.bucket import open_checked
from analyzer.packs import load_packs
from analyzer.runner import analyze
from collector.writer import BucketWriter
from simulator.generate import simulate

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
START = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
THREADS = (1, 2, 4)
SCENARIOS = (
    "fast-image-processor-leak",
    "cache-warmup",
    "kv-pool-leak",
    "host-rss-leak",
    "rank-skew",
    "probe-tensor-leak",
    "hung-server",
    "vision-oom-hourly",
    "latency-pressure",
)
# host -> seconds between a log file's first read and its second (negative: the copy
# written later was read earlier, so "first file" and "earliest read" differ)
REREAD = {"vision-oom-hourly-00": 90, "fast-image-processor-leak-00": -30, "kv-pool-leak-00": 45}
FAILED_AT = dt.datetime(2026, 11, 23, 3, 0, 7, tzinfo=dt.UTC)
ERRORS = ("NVML: GPU is lost", "NVML: driver not loaded")  # the greater one written last


def _reread_logs(bucket: Path) -> None:
    """Every log line of the REREAD hosts written a second time, stamped ``shift`` later
    (a collector killed between writing its files and saving its log cursor)."""
    for host, shift in REREAD.items():
        files = sorted((bucket / "log_lines").rglob(f"host={host}/*.parquet"))
        lines = pa.concat_tables([pq.read_table(f) for f in files])
        later = pc.add(lines.column("ts"), pa.scalar(dt.timedelta(seconds=shift)))
        BucketWriter(bucket, host).write("log_lines", lines.set_column(0, "ts", later))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("determinism") / "bucket"
    for scenario in SCENARIOS:
        simulate(scenario, out, hosts=1, hours=6, seed=5, start=START)
    _reread_logs(out)
    failures = [
        {"ts": FAILED_AT, "host": "hung-server-00", "run_id": f"r{i}", "source": "nvml"}
        | {"status": "failed", "rows": 0, "error": e}
        for i, e in enumerate(ERRORS)
    ]
    BucketWriter(out, "hung-server-00").write("collector_runs", failures)
    return out


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """``threads(n)``: every DuckDB connection made from here on runs ``n`` threads."""
    real = duckdb.connect

    def force(n: int) -> None:
        def connect(*args: Any, **kwargs: Any) -> duckdb.DuckDBPyConnection:
            kwargs["config"] = {**kwargs.get("config", {}), "threads": n}
            return real(*args, **kwargs)

        monkeypatch.setattr(duckdb, "connect", connect)

    yield force


def _doc(bucket: Path) -> str:
    d = analyze(bucket, load_packs(), now=NOW).to_dict()
    d["run"].pop("generated_at")
    for r in d["run"]["rules"]:
        r.pop("duration_s")
    return json.dumps(d, sort_keys=True, indent=1)


def test_a_line_read_twice_is_one_row_stamped_at_its_first_read(fleet, threads) -> None:
    key = 'host, file, inode, "offset", line_id'
    on = " AND ".join(f"v.{c} IS NOT DISTINCT FROM r.{c}" for c in key.split(", "))
    for n in THREADS:
        threads(n)
        con = open_checked(fleet, now=NOW).con
        try:
            assert con.execute("SELECT current_setting('threads')").fetchall() == [(n,)]
            raw = f"read_parquet('{fleet}/log_lines/*/*/*.parquet')"
            dup = con.execute(
                f"SELECT count(*) FROM (SELECT {key} FROM {raw} GROUP BY ALL HAVING count(*) > 1)"
            ).fetchall()[0][0]
            assert dup > 100  # the re-read hosts' lines, each twice
            # one row per line, and it is the earliest read (the later copy for one host)
            rows = con.execute(
                f"SELECT v.host, count(*), count(*) FILTER (WHERE v.ts = r.first), "
                f"count(DISTINCT v.ts = r.first) FROM log_lines v JOIN "
                f"(SELECT {key}, min(ts) AS first, count(*) AS n FROM {raw} GROUP BY ALL) r "
                f"ON {on} WHERE r.n > 1 GROUP BY ALL "
                "ORDER BY ALL"
            ).fetchall()
            assert [(h, c, c, 1) for h, c, *_ in rows] == rows
            assert sorted(h for h, *_ in rows) == sorted(REREAD)
            lines = con.execute(f"SELECT count(DISTINCT ({key})) FROM {raw}").fetchall()
            assert con.execute("SELECT count(*) FROM log_lines").fetchall() == lines
        finally:
            con.close()


def _same_document(bucket: Path, threads: Callable[[int], None]) -> dict[str, Any]:
    docs: dict[str, list[int]] = {}
    for _ in range(2):
        for n in THREADS:
            threads(n)
            docs.setdefault(_doc(bucket), []).append(n)
    assert len(docs) == 1, f"documents differ between runs at threads {list(docs.values())}"
    doc: dict[str, Any] = json.loads(next(iter(docs)))
    assert doc["findings"], "the bucket must find something to compare"
    return doc


def test_the_same_bucket_gives_the_same_document_at_any_thread_count(fleet, threads) -> None:
    doc = _same_document(fleet, threads)
    # two failures at one instant: the last error is one of them, the same every time
    said = [g for g in doc["run"]["gaps"] if g.startswith("hung-server-00: source nvml failed")]
    assert len(said) == 1 and said[0].endswith(f"(last: {max(ERRORS)})"), said


def test_a_reused_pid_gives_the_same_document_at_any_thread_count(two_weeks, threads) -> None:
    """A PID back a week later is another server lifetime; when it was one, the idle
    windows' longest lifetime tied between them and the findings changed run to run."""
    _same_document(two_weeks, threads)


def test_of_server_args_read_at_one_instant_the_later_line_is_the_latest() -> None:
    """A collector run stamps every line it reads with one ts: the configuration a server
    logged last is the one later in its file, not whichever row the aggregate meets first."""
    import polars as pl

    from analyzer import logevents
    from analyzer.rollup import ROLLUP_DIR
    from collector.schema import TABLES

    con = duckdb.connect()
    con.register("none", pa.Table.from_pylist([], schema=TABLES["processes"].schema))
    con.execute("CREATE TABLE processes AS SELECT * FROM none")
    t = dt.datetime(2026, 11, 23, 1, tzinfo=dt.UTC)
    rows = [  # the earlier line first: the order an aggregate meets rows in is no order
        {"host": "h", "ts": t, "file": "f", "offset": off, "event": "server_args"}
        | {"engine": "sglang", "model_path": model, "tp_size": tp}
        for off, model, tp in ((100, "old-model", 1), (900, "new-model", 2))
    ]
    events = pl.DataFrame(rows).with_columns(
        *(
            pl.lit(None, dtype=d).alias(c)
            for c, d in logevents.polars_columns().items()
            if c not in rows[0]
        )
    )
    con.register("events", events.select(list(logevents.COLUMNS)).to_arrow())
    con.execute("CREATE TABLE log_events AS SELECT * FROM events")
    con.execute(logevents._SERVER_INFO)
    con.execute((ROLLUP_DIR / "05_server_info.sql").read_text())
    got = con.execute("SELECT model, tp_size FROM server_info").fetchall()
    assert got == [("new-model", 2)]


def test_findings_are_in_one_order_whatever_order_a_rule_returns_them() -> None:
    from analyzer.findings import Finding

    def finding(end: str, summary: str) -> Finding:  # alike up to the pid, as a rule's rows
        start = "2026-11-23T00:00:00Z"
        return Finding("GM001", "leak.gpu", "warning", "h", 0, 7, start, end, summary, {}, "")

    rows = [finding("2026-11-23T02:00:00Z", "b"), finding("2026-11-23T01:00:00Z", "c")]
    rows.append(finding("2026-11-23T02:00:00Z", "a"))
    want = [rows[1], rows[2], rows[0]]
    assert sorted(rows, key=Finding.sort_key) == want
    assert sorted(reversed(rows), key=Finding.sort_key) == want


@pytest.mark.parametrize("threads", THREADS)
def test_a_gpu_swapped_at_one_index_has_one_name(threads: int) -> None:
    """Two cards seen at one index (a swap): gpu_info names the least name and UUID, at
    any thread count, over raw samples and through the tier's combine step alike. The
    least name is the one seen last, so keeping the first seen (any_value on one thread)
    fails."""
    from analyzer import rollup

    stmt = next(
        s
        for s in rollup._statements((rollup.ROLLUP_DIR / "00_gpu_info.sql").read_text())
        if "gpu_info AS" in s
    )
    combine = (rollup.ROLLUP_DIR / "tier" / "gpu_info.sql").read_text()
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    n = 200_000
    con.execute(
        f"""CREATE TABLE gpu_samples AS
        SELECT 'h' AS host, 0 AS gpu_index,
               TIMESTAMPTZ '2026-11-23 00:00:00+00' + to_seconds(i) AS ts,
               CASE WHEN i < {n} / 2 THEN 'NVIDIA H200' ELSE 'NVIDIA A100' END AS gpu_name,
               CASE WHEN i < {n} / 2 THEN 'GPU-b' ELSE 'GPU-a' END AS gpu_uuid,
               1 AS memory_used_bytes, 2 AS memory_total_bytes,
               CAST(NULL AS FLOAT) AS utilization_gpu_pct
        FROM range({n}) t(i)"""
    )
    con.execute(stmt)
    assert con.execute("SELECT gpu_name, gpu_uuid FROM gpu_info").fetchall() == [
        ("NVIDIA A100", "GPU-a")
    ]
    # the tier: one row per day stored (the later day's first), combined with the rest
    con.execute("CREATE TABLE tier_gpu_info AS SELECT * FROM gpu_info")
    con.execute("UPDATE tier_gpu_info SET gpu_name = 'NVIDIA H200', gpu_uuid = 'GPU-b'")
    con.execute("CREATE TABLE gpu_info_rest AS SELECT * FROM gpu_info")
    for s in rollup._statements(combine):
        con.execute(s)
    assert con.execute("SELECT gpu_name, gpu_uuid FROM gpu_info").fetchall() == [
        ("NVIDIA A100", "GPU-a")
    ]
