"""leakcollect end to end: real HTTP servers on 127.0.0.1, real logs, lock, exit codes, SIGKILL."""

from __future__ import annotations

import http.server
import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from collector import exitcodes
from collector.run import Config, collect

CORPUS = Path(__file__).resolve().parent / "corpus"
BATCH = "[2025-11-11 04:28:{s:02d}] Decode batch, #running-req: {n}, #token: 1, token usage: 0.04, gen throughput (token/s): 1.0, #queue-req: 0\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/hang":
            time.sleep(3)
            return
        if self.path == "/garbage":
            body = b"\x00\xff<html>not metrics</html>\n{{{ 1 2 3\n"
        else:
            f = CORPUS / self.path.lstrip("/")
            if not f.is_file():
                self.send_error(404)
                return
            body = f.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _rows(bucket: Path, table: str) -> list[dict]:
    return [
        r
        for f in sorted(bucket.glob(f"{table}/*/*/*.parquet"))
        for r in pq.read_table(f).to_pylist()
    ]


def _cfg(tmp_path, **kw) -> Config:
    return Config(
        bucket=str(tmp_path / "b"),
        host="gpu-01",
        state_dir=tmp_path / "state",
        no_gpu=True,
        metrics_timeout=0.5,
        **kw,
    )


def test_every_source_and_its_failures(tmp_path, server) -> None:
    log = tmp_path / "s.log"
    log.write_text(BATCH.format(s=1, n=3))
    urls = [
        f"{server}/metrics_sglang.prom",
        f"{server}/metrics_vllm.prom",
        f"{server}/hang",
        f"{server}/garbage",
    ]
    code = collect(
        _cfg(tmp_path, logs=[str(log), str(tmp_path / "missing.log")], metrics_urls=urls),
        say=lambda m: None,
    )
    assert code == exitcodes.PARTIAL
    b = tmp_path / "b"
    names = {r["name"] for r in _rows(b, "metric_samples")}
    assert {"sglang:token_usage", "sglang_cache_hit_rate", "vllm:kv_cache_usage_perc"} <= names
    assert all(n.startswith(("sglang:", "sglang_", "vllm:", "process_")) for n in names)
    tp = [
        r
        for r in _rows(b, "metric_samples")
        if r["name"] == "sglang:num_running_reqs" and r["labels"]
    ]
    assert {"tp_rank", "model_name"} <= {k for r in tp for k, _ in r["labels"]}
    assert [r["signature"] for r in _rows(b, "log_lines")] == ["batch_stats"]
    runs = {r["source"]: r for r in _rows(b, "collector_runs")}
    assert runs["nvml"]["status"] == "skipped" and runs["procfs"]["status"] == "ok"
    assert runs["metrics"]["status"] == "failed" and "hang" in runs["metrics"]["error"]
    assert runs["logs"]["status"] == "failed" and "missing.log" in runs["logs"]["error"]


def test_no_driver_records_nvml_failure_and_goes_on(tmp_path) -> None:
    from test_collector_nvml import FakeNvml

    cfg = _cfg(tmp_path)
    cfg.no_gpu = False
    assert collect(cfg, nvml_lib=FakeNvml(no_driver=True), say=lambda m: None) == exitcodes.PARTIAL
    runs = {r["source"]: r for r in _rows(tmp_path / "b", "collector_runs")}
    assert runs["nvml"]["status"] == "failed" and "NVML unavailable" in runs["nvml"]["error"]


def test_fake_gpus_reach_the_bucket(tmp_path) -> None:
    from test_collector_nvml import FakeNvml

    cfg = _cfg(tmp_path, duration=0.5, interval=0.2)
    cfg.no_gpu = False
    assert collect(cfg, nvml_lib=FakeNvml(gpus=2), say=lambda m: None) == exitcodes.OK
    gpus = _rows(tmp_path / "b", "gpu_samples")
    assert len(gpus) >= 4 and {g["gpu_index"] for g in gpus} == {0, 1}
    procs = _rows(tmp_path / "b", "gpu_processes")
    assert {p["pid"] for p in procs} == {1000, 1001}  # fake pids: no /proc entry, NVML view kept
    assert (
        len(list((tmp_path / "b" / "gpu_samples").rglob("*.parquet"))) == 1
    )  # one file per table per run


def leakcollect(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_once_no_gpu_writes_readable_tables(tmp_path, server) -> None:
    log = tmp_path / "s.log"
    log.write_text(BATCH.format(s=1, n=3))
    r = leakcollect(
        "run",
        "--once",
        "--no-gpu",
        "--bucket",
        str(tmp_path / "b"),
        "--host",
        "gpu/01",
        "--log",
        str(log),
        "--metrics-url",
        f"{server}/metrics_sglang.prom",
        "--state-dir",
        str(tmp_path / "st"),
    )
    assert r.returncode == exitcodes.OK, r.stderr
    assert (tmp_path / "b" / "log_lines").is_dir() and (tmp_path / "b" / "collector_runs").is_dir()
    assert {p.name for p in (tmp_path / "b" / "log_lines").glob("*/*")} == {"host=gpu_01"}
    for f in (tmp_path / "b").rglob("*.parquet"):
        pq.read_table(f)


def test_second_run_exits_at_once_while_the_lock_is_held(tmp_path) -> None:
    from collector.run import acquire_lock

    held = acquire_lock(tmp_path / "st")
    try:
        t0 = time.monotonic()
        r = leakcollect(
            "run",
            "--once",
            "--no-gpu",
            "--bucket",
            str(tmp_path / "b"),
            "--state-dir",
            str(tmp_path / "st"),
        )
        assert r.returncode == exitcodes.NOTHING and "another leakcollect run holds" in r.stderr
        assert time.monotonic() - t0 < 10
    finally:
        held.close()


def test_config_file_and_cron_line(tmp_path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'bucket = "{tmp_path / "b"}"\nno-gpu = true\nonce = true\nstate-dir = "{tmp_path / "st"}"\n'
    )
    r = leakcollect("run", "--config", str(cfg))
    assert r.returncode == exitcodes.OK, r.stderr
    line = leakcollect("cron-line", "--bucket", "/data/traces").stdout
    assert line.startswith("* * * * * ") and "--duration 55" in line
    units = leakcollect("systemd-units", "--bucket", "/data/traces").stdout
    assert "[Timer]" in units and "OnCalendar" in units
    url = "http://127.0.0.1:30000/v1/chat/completions?q=a%20b"
    line = leakcollect(
        "cron-line",
        "--bucket",
        "/data/my traces",
        "--probe-spool",
        "/var/tmp/sp",
        "--probe-url",
        url,
    ).stdout.strip()
    assert "%" not in line.replace("\\%", "")  # cron would cut the line at a bare %
    import shlex

    argv = shlex.split(line[len("* * * * * ") :].replace("\\%", "%"))
    assert argv[argv.index("--bucket") + 1] == "/data/my traces"
    assert argv[argv.index("--probe-url") + 1] == url
    assert argv[argv.index("--probe-spool") + 1] == "/var/tmp/sp"


def test_sigkill_at_random_points_loses_nothing(tmp_path) -> None:
    """Killed mid-run, the bucket holds only readable files and the log is read exactly once over all runs."""
    rnd = random.Random(4)
    log = tmp_path / "s.log"
    log.write_text("")
    args = [
        "run",
        "--duration",
        "1.2",
        "--interval",
        "0.2",
        "--no-gpu",
        "--bucket",
        str(tmp_path / "b"),
        "--log",
        str(log),
        "--state-dir",
        str(tmp_path / "st"),
    ]
    written = 0
    for k in range(8):
        with log.open("a") as f:
            for _ in range(50):
                f.write(BATCH.format(s=written % 60, n=written))
                written += 1
        p = subprocess.Popen(
            [sys.executable, "-m", "collector.cli", *args], stderr=subprocess.DEVNULL
        )
        time.sleep(rnd.uniform(0.2, 1.6))
        p.send_signal(signal.SIGKILL) if k % 2 == 0 else None
        p.wait(timeout=30)
    final = leakcollect(*args)
    assert final.returncode == exitcodes.OK, final.stderr
    for f in (tmp_path / "b").rglob("*.parquet"):
        pq.read_table(f)  # no partial file is visible
    rows = _rows(tmp_path / "b", "log_lines")
    keys = [(r["inode"], r["offset"]) for r in rows]
    seen = sorted({int(r["text"].split("#running-req: ")[1].split(",")[0]) for r in rows})
    assert seen == list(range(written)), "lines were skipped"
    # a kill between a run's write and its cursor save repeats that run's lines; readers dedupe by key
    assert len(keys) - len(set(keys)) <= written
    json.loads((tmp_path / "st" / "log-cursors.json").read_text())


def test_analyzer_reads_repeated_log_lines_once(tmp_path) -> None:
    import datetime as dt

    from analyzer.bucket import open_bucket
    from collector.writer import BucketWriter

    row = {
        "ts": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        "host": "h",
        "file": "/l",
        "inode": 7,
        "offset": 0,
        "text": "OutOfMemoryError",
        "signature": "oom",
    }
    w = BucketWriter(tmp_path, "h")
    w.write("log_lines", [row])
    w.write("log_lines", [row, {**row, "offset": 20}])  # the same line again, and a new one
    con, _ = open_bucket(tmp_path)
    assert con.execute("SELECT count(*) FROM log_lines").fetchall() == [(2,)]
