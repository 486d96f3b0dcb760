"""Bad input reaches the analyzer: bad files, bad times, hostile SQL, runaway rules.

Each case runs the real command (``python -m leakreport``) over a simulated bucket
and checks the outcome where the defence must act and that the rest of the
analysis is untouched.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer.bucket import Scope, open_checked
from analyzer.memory import parse_memory_limit
from analyzer.ruleexec import RuleOutputError, check_select
from collector import layout
from collector.writer import BucketWriter, to_arrow
from simulator.generate import simulate

SCENARIO = "vision-oom-hourly"  # MT001 says "restart now" (critical) on its GPU
HOST = f"{SCENARIO}-00"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("faults") / "bucket"
    simulate(SCENARIO, out, hosts=1, hours=6, seed=3)
    return out


@pytest.fixture
def bucket(base: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(base, tmp_path / "bucket"))


def _cli(
    *args: str, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leakreport", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def _analyze(bucket: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    r = _cli("analyze", str(bucket), "--format", "json", "--fail-on", "never", "-q", *extra)
    assert "Traceback" not in r.stderr, r.stderr
    return r, (json.loads(r.stdout) if r.stdout.strip() else {})


def _findings(doc: dict) -> list[tuple[str, str, str]]:
    return [(f["rule_id"], f["severity"], f["summary"]) for f in doc["findings"]]


@pytest.fixture(scope="module")
def baseline(base: Path) -> dict:
    r, doc = _analyze(base)
    assert r.returncode == 0, r.stderr
    return doc


def _gpu_folder(bucket: Path) -> Path:
    return next((bucket / "gpu_samples").glob("date=*/host=*"))


def _good_table() -> pa.Table:
    ts = dt.datetime(2026, 11, 23, 1, tzinfo=dt.UTC)
    return to_arrow("gpu_samples", [{"ts": ts, "host": HOST, "gpu_index": 0}])


def _write(path: Path, table: pa.Table, meta: bool = True) -> None:
    md = {layout.SCHEMA_KEY: b"1", layout.TABLE_KEY: b"gpu_samples"} if meta else None
    pq.write_table(table.replace_schema_metadata(md), path)


def _truncated(p: Path) -> None:
    _write(p, _good_table())
    p.write_bytes(p.read_bytes()[:-30])


def damage_pages(p: Path) -> None:
    """Zero the bytes between the magic number and the footer: the footer (schema, row
    count) still reads, the rows do not."""
    raw = bytearray(p.read_bytes())
    footer = int.from_bytes(raw[-8:-4], "little")
    end = len(raw) - 8 - footer
    raw[4:end] = bytes(end - 4)
    p.write_bytes(bytes(raw))


def _float_mib(p: Path) -> None:
    t = _good_table()
    i = t.schema.get_field_index("memory_used_bytes")
    _write(p, t.set_column(i, "memory_used_bytes", pa.array([70000.5], pa.float64())))


def _text_ts(p: Path) -> None:
    t = _good_table()
    _write(p, t.set_column(0, "ts", pa.array(["2026-11-23 01:00:00"])))


BAD_FILES = {
    "truncated": (_truncated, "unreadable Parquet"),
    "empty": (lambda p: p.write_bytes(b""), "unreadable Parquet"),
    "foreign": (lambda p: _write(p, _good_table(), meta=False), "not a leakreport trace file"),
    "float-mib": (_float_mib, "column 'memory_used_bytes' is double"),
    "missing-column": (
        lambda p: _write(p, _good_table().drop_columns(["gpu_uuid"])),
        "column 'gpu_uuid' is missing",
    ),
    "ts-as-text": (_text_ts, "column 'ts' is string"),
    # rows of another host in this host's folder: --host and batches go by the folder
    "other-host": (
        lambda p: _write(
            p, to_arrow("gpu_samples", [{**_good_table().to_pylist()[0], "host": "elsewhere"}])
        ),
        "its rows are of host 'elsewhere', its folder says",
    ),
    "dangling-link": (lambda p: p.symlink_to(p.parent / "gone.parquet"), "unreadable Parquet"),
    "fifo": (os.mkfifo, "not a regular file"),  # its footer read would block for good
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_file_is_left_out_named_and_the_rest_analysed(bucket, baseline, case) -> None:
    make, reason = BAD_FILES[case]
    bad = _gpu_folder(bucket) / f"gpu_samples-bad-{case}.parquet"
    make(bad)
    r, doc = _analyze(bucket)
    assert r.returncode == 3, r.stderr  # incomplete: something could not be read
    assert bad.name in r.stderr and reason in r.stderr
    (line,) = [x for x in doc["run"]["incomplete"] if bad.name in x]
    assert reason in line
    assert _findings(doc) == _findings(baseline)  # the rest of the fleet is analysed


def test_compact_leaves_a_bad_file_and_goes_on(bucket) -> None:
    folder = _gpu_folder(bucket)
    _truncated(folder / "gpu_samples-bad.parquet")
    n_good = len(list(folder.glob("gpu_samples-2*.parquet")))
    assert n_good > 1
    r = _cli("compact", str(bucket), "--before", "2030-01-01")
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert "gpu_samples-bad.parquet" in r.stderr and "unreadable Parquet" in r.stderr
    names = sorted(p.name for p in folder.glob("*.parquet"))
    assert "gpu_samples-bad.parquet" in names and len(names) == 2  # the bad one + the merge


def test_a_sample_from_2030_is_quarantined_not_used(bucket, baseline) -> None:
    def mt001(doc: dict) -> list[dict]:
        return [f for f in doc["findings"] if f["rule_id"] == "MT001"]

    (before,) = mt001(baseline)
    assert before["severity"] == "critical" and "restart" in before["summary"]
    stray = {
        "ts": dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
        "host": HOST,
        "gpu_index": 0,
        "memory_total_bytes": 16 * 2**30,
        "memory_used_bytes": 2**30,
        "utilization_gpu_pct": 0.0,
    }
    BucketWriter(bucket, HOST).write("gpu_samples", [stray])
    r, doc = _analyze(bucket)
    assert r.returncode == 0, r.stderr
    (after,) = mt001(doc)
    assert (after["severity"], after["summary"]) == (before["severity"], before["summary"])
    assert _findings(doc) == _findings(baseline)
    (gap,) = [g for g in doc["run"]["gaps"] if "quarantined" in g]
    assert gap.startswith(f"{HOST}: 1 gpu_samples row(s) quarantined, stamped 2030-01-01")
    assert f"leakreport: left out: {gap}" in r.stderr  # said on stderr, even under -q


def test_samples_before_the_first_collector_run_are_quarantined(tmp_path) -> None:
    t0 = dt.datetime(2026, 11, 23, 12, tzinfo=dt.UTC)
    w = BucketWriter(tmp_path, "h")
    run = {"ts": t0, "run_id": "r1", "source": "nvml", "status": "ok", "finished": t0}
    w.write("collector_runs", [run])
    rows = [
        {"ts": t0 + dt.timedelta(seconds=10 * i), "host": "h", "gpu_index": 0} for i in range(3)
    ]
    w.write(
        "gpu_samples", [*rows, {"ts": t0 - dt.timedelta(days=300), "host": "h", "gpu_index": 0}]
    )
    log = {"ts": t0 - dt.timedelta(days=3), "file": "/l", "inode": 1, "offset": 0, "text": "x"}
    w.write("log_lines", [log])  # a log can be older than the collector: kept
    o = open_checked(tmp_path, Scope(), now=t0 + dt.timedelta(hours=1))
    assert o.con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (3,)
    assert o.con.execute("SELECT count(*) FROM log_lines").fetchone() == (1,)
    (line,) = o.quarantined
    assert line.startswith("h: 1 gpu_samples row(s) quarantined")
    assert not o.unread  # some of its samples are left: checked


def test_a_host_whose_every_sample_is_quarantined_makes_the_run_incomplete(tmp_path) -> None:
    """Found by a user's pass: samples imported with a wrong --tz (8 h ahead) were all
    quarantined, and the analysis said "0 findings over 0 hosts", exit 0."""
    ahead = dt.datetime.now(dt.UTC) + dt.timedelta(hours=8)
    rows = [
        {"ts": ahead + dt.timedelta(seconds=10 * i), "host": "h", "gpu_index": 0,
         "memory_used_bytes": 2**30, "memory_total_bytes": 16 * 2**30, "utilization_gpu_pct": 0.0}
        for i in range(30)
    ]  # fmt: skip
    BucketWriter(tmp_path, "h").write("gpu_samples", rows)
    run = {"ts": ahead, "run_id": "import", "source": "import:nvidia-smi-csv", "status": "ok"}
    BucketWriter(tmp_path, "h").write("collector_runs", [run])  # its import's, as far ahead
    BucketWriter(tmp_path, "ok").write(
        "gpu_samples", [{**rows[0], "host": "ok", "ts": ahead - dt.timedelta(hours=9)}]
    )
    r, doc = _analyze(tmp_path)
    assert r.returncode == 3, r.stderr
    (reason,) = doc["run"]["incomplete"]
    assert reason.startswith("host h: all 30 of its gpu_samples rows in scope are quarantined")
    assert "--tz" in reason and reason in r.stderr


HEAD = """/*---
id = "{id}"
name = "t.{id}"
title = "t"
category = "leak.gpu"
severity = "warning"
requires = ["gpu_samples"]
evidence = ["n"]
description = "d"
remediation = "r"
---*/
"""


def _pack(root: Path, rules: dict[str, str]) -> Path:
    (root / "rules").mkdir(parents=True)
    (root / "pack.toml").write_text('name = "hostile"\nversion = "1"\n')
    for rid, sql in rules.items():
        (root / "rules" / f"{rid}.sql").write_text(HEAD.format(id=rid) + sql)
    return root


def test_pack_sql_cannot_write_read_outside_or_change_shared_tables(bucket, tmp_path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("a,b\n1,2\n")
    dropped = tmp_path / "copied.csv"
    evil_db = tmp_path / "evil.db"
    pack = _pack(
        tmp_path / "pack",
        {
            "XA001": f"COPY (SELECT 1) TO '{dropped}'",
            "XB001": f"ATTACH '{evil_db}' AS evil",
            "XC001": f"SELECT 'h' AS host, 's' AS summary, count(*) AS n FROM read_csv('{secret}')",
            "XD001": "DROP TABLE gpu_buckets",
            "XE001": "SELECT 1 AS host, 's' AS summary, 1 AS n; DROP TABLE gpu_buckets",
            "XF001": "SELECT host, 'rows' AS summary, count(*) AS n FROM gpu_buckets GROUP BY host",
        },
    )
    r, doc = _analyze(bucket, "--pack", str(pack))
    assert r.returncode == 3, r.stderr  # errored rules: incomplete
    status = {x["rule_id"]: x for x in doc["run"]["rules"]}
    for rid in ("XA001", "XB001", "XC001", "XD001", "XE001"):
        assert status[rid]["status"] == "errored", status[rid]
    assert "COPY" in status["XA001"]["reason"] and "ATTACH" in status["XB001"]["reason"]
    assert "disabled" in status["XC001"]["reason"]  # DuckDB: file system operations disabled
    assert "has 2" in status["XE001"]["reason"]
    assert not dropped.exists() and not evil_db.exists()
    # the table the DROP aimed at is still there for the next rule
    assert status["XF001"]["status"] == "fired"
    assert [f["summary"] for f in doc["findings"] if f["rule_id"] == "XF001"] == ["rows"]


def test_memory_limit_never_reaches_sql_unchecked(bucket, tmp_path) -> None:
    target = tmp_path / "pwned.csv"
    crafted = f"1GB'; COPY (SELECT 42) TO '{target}'; SET memory_limit='1GB"
    r = _cli("analyze", str(bucket), "--memory-limit", crafted, "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("Error")]  # one line says why
    assert "--memory-limit" in line and "is not a size" in line
    assert not target.exists()
    r = _cli("analyze", str(bucket), "--memory-limit", "abc", "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    with pytest.raises(ValueError, match="expected a size"):
        parse_memory_limit(crafted)
    with pytest.raises(ValueError):
        open_checked(bucket, memory_limit=crafted)
    assert not target.exists()
    assert parse_memory_limit(" 1.5 gib ") == 3 * 2**29
    assert parse_memory_limit("1GB") == 10**9
    with pytest.raises(ValueError, match="too small"):  # 0 would have meant no limit at all
        parse_memory_limit("0MB")
    r = _cli("analyze", str(bucket), "--memory-limit", "300MB", "-q")
    assert (
        r.returncode == 2 and "'300MB' is too small: an analysis needs at least 512MB" in r.stderr
    )


def test_memory_limit_is_the_process_budget_not_duckdbs_alone(bucket) -> None:
    """DuckDB gets --memory-limit less what the process holds and the Python reserve
    (a process given all of it to DuckDB went 20 % over), and the run says how much."""
    from analyzer import memory

    held = memory.resident_bytes()
    assert held > 0  # /proc/self/status read
    got = open_checked(bucket, memory_limit="1GB")
    want = 10**9 - held - memory.PYTHON_RESERVE
    assert got.duckdb_memory is not None and abs(got.duckdb_memory - want) < 32 * 2**20
    (setting,) = got.con.execute("SELECT current_setting('memory_limit')").fetchone()
    value, unit = setting.split()  # what DuckDB was told, as it shows it (one decimal)
    assert unit == "MiB" and abs(float(value) - got.duckdb_memory / 2**20) <= 0.1
    # a budget under what the process holds still leaves DuckDB a quarter of it
    assert memory.duckdb_share(2**30, held=2**30) == 2**28
    r = _cli("analyze", str(bucket), "--memory-limit", "700MB", "--fail-on", "never")
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if "memory: DuckDB may use" in x]
    share = int(line.split("may use ")[1].split(" MiB")[0])
    assert 100 < share < (700 * 10**6 - memory.PYTHON_RESERVE) / 2**20, line


@pytest.mark.parametrize(
    "sql,ok",
    [
        ("SELECT 1", True),
        ("WITH a AS (SELECT 1 AS x) SELECT x FROM a", True),
        ("SELECT 1; SELECT 2", False),
        ("DROP TABLE t", False),
        ("CREATE TABLE t AS SELECT 1", False),
        ("SET threads = 1", False),
        ("INSERT INTO t VALUES (1)", False),
    ],
)
def test_a_rule_is_one_select(sql: str, ok: bool) -> None:
    if ok:
        check_select(sql)
    else:
        with pytest.raises(RuleOutputError):
            check_select(sql)


RUNAWAY = (
    "SELECT host, 'x' AS summary, count(*) AS n "
    "FROM gpu_samples, range(1000000000000) GROUP BY host"
)


def test_a_runaway_rule_is_stopped_and_recorded(bucket, tmp_path) -> None:
    pack = _pack(tmp_path / "pack", {"XR001": RUNAWAY})
    t0 = time.monotonic()
    r, doc = _analyze(bucket, "--pack", str(pack), "--rule-timeout", "1")
    took = time.monotonic() - t0
    assert r.returncode == 3, r.stderr
    (st,) = [x for x in doc["run"]["rules"] if x["rule_id"] == "XR001"]
    assert st["status"] == "errored" and "time limit of 1 s" in st["reason"]
    assert st["duration_s"] < 5
    assert took < 120
    assert [x["status"] for x in doc["run"]["rules"] if x["rule_id"] == "MT001"] == ["fired"]


def test_ctrl_c_stops_a_runaway_rule_within_two_seconds(bucket, tmp_path) -> None:
    pack = _pack(tmp_path / "pack", {"XR001": RUNAWAY})
    args = ["analyze", str(bucket), "--pack", str(pack), "-v", "--format", "json"]
    p = subprocess.Popen(
        [sys.executable, "-m", "leakreport", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert p.stderr is not None
        deadline = time.monotonic() + 240
        for line in p.stderr:  # the built-in pack runs first; the runaway rule last
            if "SK001" in line or time.monotonic() > deadline:
                break
        time.sleep(1.0)
        assert p.poll() is None, "the run ended before the runaway rule"
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
        took = time.monotonic() - t0
        rest = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert took <= 2.0, f"Ctrl-C took {took:.1f}s"
    assert p.returncode == 130 and "Traceback" not in rest, rest[-2000:]
    assert "leakreport: interrupted (Ctrl-C)" in rest


def test_ctrl_c_anywhere_ends_in_130_and_writes_nothing(bucket, tmp_path) -> None:
    """Ctrl-C while the rollups are built or the rules run: exit 130, the shell's code for
    it, and no --out file. It used to be exit 1 ("findings"), 2 ("usage error") or an
    abort (SIGABRT) in the interpreter's teardown, depending on where it landed."""
    out = tmp_path / "f.json"
    landed = []
    for wait, after in [(0.3, ""), (0.0, "rollups built"), (0.1, "rollups built")] * 2:
        p = subprocess.Popen(
            [sys.executable, "-m", "leakreport", "analyze", str(bucket), "--out", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert p.stderr is not None
        said = b""
        while after and after.encode() not in said and (chunk := p.stderr.read1(4096)):
            said += chunk
        time.sleep(wait)
        if p.poll() is not None:  # done before the signal: nothing to learn from this try
            p.wait()
            out.unlink(missing_ok=True)
            continue
        p.send_signal(signal.SIGINT)
        rest = p.communicate(timeout=60)[1].decode()
        landed.append(after or "start")
        assert p.returncode == 130, (after, wait, p.returncode, rest[-1500:])
        assert "interrupted (Ctrl-C)" in rest and "Traceback" not in rest
        assert not out.exists()
    assert len(landed) >= 3, landed


def test_duckdb_out_of_memory_is_one_line_naming_the_option(bucket, monkeypatch) -> None:
    """DuckDB running out of its share ends the run with exit 2 and one line that says
    to raise --memory-limit, not a traceback or DuckDB's advice to SQL users."""
    from click.testing import CliRunner

    from analyzer import memory
    from leakreport.cli import cli

    monkeypatch.setattr(memory, "PYTHON_RESERVE", 2**40)  # DuckDB gets its least share ...
    monkeypatch.setattr(memory, "MIN_SHARE", 0.01)  # ... of 5 MiB
    r = CliRunner().invoke(cli, ["analyze", str(bucket), "--memory-limit", "512MiB", "-q"])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    (line,) = [x for x in r.output.splitlines() if x.startswith("leakreport:")]
    assert "ran out of memory: raise --memory-limit" in line and "Out of Memory" in line
    assert "SET memory_limit" not in r.output


def test_a_host_whose_collector_wrote_only_run_records_is_named(bucket, baseline) -> None:
    """NVML broken on one host: its collector runs, records that nvml failed, and writes
    no sample. The analysis names that host with what failed and is incomplete (exit 3),
    where the host went unmentioned and the run exited 0; the other host's findings stay."""
    t0 = dt.datetime.fromisoformat(baseline["run"]["data_start"].replace("Z", "+00:00"))
    runs = [
        {
            "ts": t0 + dt.timedelta(minutes=i),
            "host": "gpu-broken",
            "run_id": f"r{i}",
            "source": source,
            "status": "failed" if source == "nvml" else "ok",
            "rows": 0,
            "error": "NVML unavailable: NVML Shared Library Not Found"
            if source == "nvml"
            else None,
        }
        for i in range(3)
        for source in ("nvml", "procfs")
    ]
    BucketWriter(bucket, "gpu-broken").write("collector_runs", runs)
    r, doc = _analyze(bucket)
    assert r.returncode == 3, r.stderr
    said = (
        "leakreport: incomplete: host gpu-broken: 3 collector runs in scope wrote no samples "
        "(nvml failed in 3 of 3 runs (last: NVML unavailable: NVML Shared Library Not Found))"
    )
    assert said in r.stderr
    assert _findings(doc) == _findings(baseline)
    for t in bucket.iterdir():  # the broken host alone: no data in scope, and why
        if t.is_dir() and t.name != "collector_runs":
            shutil.rmtree(t)
    r, doc = _analyze(bucket)
    assert r.returncode == 3 and said in r.stderr, r.stderr
    assert "incomplete: no data in scope" in r.stderr


@pytest.mark.parametrize("level", ["table", "host"])
def test_a_folder_that_is_a_file_is_named_not_taken_for_no_data(bucket, level) -> None:
    """A table or host folder replaced by a file (a bad sync, a stray copy) took that
    table's rows out of the analysis without a word, exit 0."""
    target = bucket / "processes"
    if level == "host":
        target = next(target.glob("date=*/host=*"))
    shutil.rmtree(target)
    target.write_text("x")
    r, doc = _analyze(bucket)
    assert r.returncode == 3, r.stderr
    (line,) = [x for x in doc["run"]["incomplete"] if str(target) in x]
    assert "a folder of the bucket's layout that is a file or cannot be listed" in line
    if level == "host":  # out of a --host scope, it is none of that analysis' business
        other = target.parent / "host=other"
        shutil.copytree(next((bucket / "gpu_samples").glob("date=*/host=*")), other)
        r, doc = _analyze(bucket, "--host", "other")
        assert not [x for x in doc["run"]["incomplete"] if str(target) in x], doc["run"]
    r = _cli("rollup", str(bucket), "--before", "2100-01-01")  # no day of year 1 is made of it
    assert not list(bucket.rglob("*0001-01-01*")), r.stderr


def test_parquet_data_outside_the_layout_is_named_not_skipped(bucket) -> None:
    """A date folder that is not a date, a table copied without its date= level, a file
    loose in a date folder: their rows were skipped without a word, exit 0. Hidden names
    (_x, .x, as Hive readers pass them over) and folders with no Parquet file stay quiet."""
    src = next((bucket / "processes").glob("date=*/host=*/*.parquet"))
    day = src.parent.parent
    wrong = {
        bucket / "processes" / "date=20261124" / src.parent.name / src.name: True,
        bucket / "processes" / day.name.removeprefix("date=") / "x" / src.name: True,
        day / "loose.parquet": True,
        src.parent / "nested" / src.name: True,
        bucket / "processes" / "_staging" / src.name: False,
        day / ".trash" / src.name: False,
    }
    for path in wrong:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, path)
    (bucket / "processes" / "notes").mkdir()  # no data in it
    (bucket / "processes" / "notes" / "README.txt").write_text("x")
    r, doc = _analyze(bucket)
    assert r.returncode == 3, r.stderr
    named = {x.rsplit(": ", 1)[0] for x in doc["run"]["incomplete"] if "outside the bucket" in x}
    want = {
        "file left out: " + str(bucket / "processes" / "date=20261124"),
        "file left out: " + str(bucket / "processes" / day.name.removeprefix("date=")),
        "file left out: " + str(day / "loose.parquet"),
        "file left out: " + str(src.parent / "nested"),
    }
    assert named == want, doc["run"]["incomplete"]
    r = _cli("compact", str(bucket), "--before", "2100-01-01")
    assert r.returncode == 3 and "date=20261124" in r.stderr, r.stderr
    assert (bucket / "processes" / "date=20261124").exists()  # left as it is


def test_data_in_a_table_this_version_does_not_read_is_named(bucket, baseline) -> None:
    """A misspelt table folder (or a newer collector's table) was read by nobody and
    mentioned nowhere, exit 0: now it is named and the analysis exits 3, with the same
    findings; a --since past its days leaves it out of scope, as any table's."""
    src = next((bucket / "gpu_samples").glob("date=*/host=*/*.parquet"))
    rel = src.relative_to(bucket / "gpu_samples")
    typo = bucket / "gpu-samples" / rel
    typo.parent.mkdir(parents=True)
    shutil.copy(src, typo)
    r, doc = _analyze(bucket)
    assert r.returncode == 3, r.stderr
    assert doc["run"]["incomplete"] == [
        f"file left out: {bucket / 'gpu-samples'}: a table this version does not read "
        "(a misspelt folder, or a newer collector's table): its Parquet data is not checked"
    ]
    assert _findings(doc) == _findings(baseline)
    later = dt.date.fromisoformat(rel.parts[0].removeprefix("date=")) + dt.timedelta(days=1)
    r, doc = _analyze(bucket, "--since", str(later))
    assert "gpu-samples" not in str(doc["run"]["incomplete"]), doc["run"]["incomplete"]


def test_a_file_in_another_days_folder_is_named(bucket) -> None:
    """Writers split rows by UTC day; a file moved by hand into another date= folder put
    its rows in the wrong day's scope and tier, without a word."""
    src = next((bucket / "processes").glob("date=*/host=*/*.parquet"))
    day = dt.date.fromisoformat(src.parent.parent.name.removeprefix("date="))
    other = src.parent.parent.parent / f"date={day + dt.timedelta(days=3)}" / src.parent.name
    other.mkdir(parents=True)
    shutil.move(src, other / src.name)
    r, doc = _analyze(bucket)
    assert r.returncode == 3, r.stderr
    (line,) = [x for x in doc["run"]["incomplete"] if src.name in x]
    assert line.endswith(
        f"its rows are of {day} (UTC), its folder says date={day + dt.timedelta(days=3)}; "
        f"move it into processes/date={day}/{src.parent.name}/"
    )
    # done as it says, the analysis is whole again
    shutil.move(other / src.name, bucket / f"processes/date={day}/{src.parent.name}/{src.name}")
    r, doc = _analyze(bucket)
    assert r.returncode == 0 and not doc["run"]["incomplete"], r.stderr


SWALLOWED = """
import os, signal, sys, weakref
import leakreport.cli as cli

class X:
    pass

x = X()
r = weakref.ref(x, lambda _: os.kill(os.getpid(), signal.SIGINT))
del x  # the KeyboardInterrupt is raised in the callback: Python prints it and goes on
sys.argv = ["leakreport", "analyze", sys.argv[1], "--out", sys.argv[2], "-q"]
cli.main()
"""


def test_a_ctrl_c_whose_exception_python_swallowed_still_ends_in_130(bucket, tmp_path) -> None:
    """Ctrl-C during an import landed in its module-lock cleanup, where Python drops the
    KeyboardInterrupt ("Exception ignored in ..."): the analysis ran on, wrote --out and
    exited 1. The signal is remembered, and checked before anything is written."""
    out = tmp_path / "f.json"
    r = subprocess.run(
        [sys.executable, "-c", SWALLOWED, str(bucket), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Exception ignored" in r.stderr  # the case itself: Python swallowed it
    assert r.returncode == 130 and not out.exists(), r.stderr[-1500:]
    assert "interrupted (Ctrl-C): nothing written at --out" in r.stderr


def test_a_ctrl_c_a_caller_handled_does_not_stop_later_commands(tmp_path) -> None:
    """The remembered Ctrl-C must not outlive its handling: a program (or test) that caught
    the KeyboardInterrupt and runs another command in the same process got "Aborted!"."""
    from click.testing import CliRunner

    from leakreport.cli import cli

    log = tmp_path / "server.log"
    log.write_text("[2026-12-07 10:00:01] Decode batch. #running-req: 1, #token: 12, "
                   "token usage: 0.71, gen throughput (token/s): 10.0, #queue-req: 0\n")  # fmt: skip
    out = tmp_path / "events.jsonl"
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    except KeyboardInterrupt:
        pass  # handled by the caller
    r = CliRunner().invoke(cli, ["logs", "parse", str(log), "--out", str(out)])
    assert r.exit_code == 0 and out.exists(), r.output
