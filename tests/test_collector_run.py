"""leakcollect end to end: real HTTP servers on 127.0.0.1, real logs, lock, exit codes, SIGKILL."""

from __future__ import annotations

import http.server
import json
import os
import random
import shlex
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


TRICKLE_HIT = threading.Event()
NODE_PAGE = b"""# HELP node_load1 1m load average.
# TYPE node_load1 gauge
node_load1 0.42
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
"""


def _trickle(handler: http.server.BaseHTTPRequestHandler, head: bytes, data: bytes) -> None:
    """Send ``head`` at once, then ``data`` one byte per 0.1 s (30 s at most)."""
    try:
        handler.wfile.write(head)
        handler.wfile.flush()
        TRICKLE_HIT.set()
        for k in range(300):
            handler.wfile.write(data[k % len(data) : k % len(data) + 1])
            handler.wfile.flush()
            time.sleep(0.1)
    except OSError:
        pass  # the collector hung up: what it should do


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/trickle":  # a valid page, a byte at a time: each read is quick
            _trickle(self, b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n", b"sglang:x 1\n")
            return
        if self.path == "/trickle-head":
            _trickle(self, b"HTTP/1.0 200 OK\r\n", b"X-Slow: aaaa\r\n")
            return
        if self.path in ("/big", "/big-declared"):  # 10 MB of garbage
            self.send_response(200)
            if self.path == "/big-declared":
                self.send_header("Content-Length", str(10 << 20))
            self.end_headers()
            try:
                for _ in range(160):
                    self.wfile.write(b"\x00garbage{{{ not metrics\n" * 2600)
            except OSError:
                pass
            return
        if self.path == "/hang":
            time.sleep(3)
            return
        coding = None
        if self.path == "/garbage":
            body = b"\x00\xff<html>not metrics</html>\n{{{ 1 2 3\n"
        elif self.path == "/node":  # a node exporter's page: valid, but no engine's metrics
            body = NODE_PAGE
        elif self.path.startswith("/gz/"):  # what a compressing proxy in front sends
            import gzip

            body = gzip.compress((CORPUS / self.path[4:]).read_bytes())
            coding = "gzip"
        elif self.path.startswith("/gzcut/"):  # a connection cut halfway through the body
            import gzip

            body = gzip.compress((CORPUS / self.path[7:]).read_bytes())
            body, coding = body[: len(body) // 2], "gzip"
        elif self.path.startswith(("/zlib/", "/rawdeflate/")):  # "deflate", both ways sent
            import zlib

            raw = (CORPUS / self.path.split("/", 2)[2]).read_bytes()
            wbits = zlib.MAX_WBITS if self.path.startswith("/zlib/") else -zlib.MAX_WBITS
            z = zlib.compressobj(wbits=wbits)
            body, coding = z.compress(raw) + z.flush(), "deflate"
        else:
            f = CORPUS / self.path.lstrip("/")
            if not f.is_file():
                self.send_error(404)
                return
            body = f.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        if coding:
            self.send_header("Content-Encoding", coding)
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
    assert {p.name for p in (tmp_path / "b" / "log_lines").glob("*/*")} == {
        "host=gpu%2F01"
    }  # the host name "gpu/01", encoded
    for f in (tmp_path / "b").rglob("*.parquet"):
        pq.read_table(f)


def test_a_bucket_that_cannot_be_written_is_one_line_and_exit_2(tmp_path) -> None:
    """With no source rows to write (no GPU, no logs), the run's own record is the first
    write: an unusable bucket there is named, exit 2, not a traceback. The file count
    includes that record."""
    (tmp_path / "a-file").write_text("")
    args = ["run", "--once", "--no-gpu", "--state-dir", str(tmp_path / "st"), "--bucket"]
    r = leakcollect(*args, str(tmp_path / "a-file"))
    assert r.returncode == exitcodes.NOTHING and "Traceback" not in r.stderr, r.stderr
    assert f"cannot write to {tmp_path / 'a-file'}" in r.stderr
    r = leakcollect(*args, str(tmp_path / "b"))
    assert r.returncode == exitcodes.OK, r.stderr
    written = len(list((tmp_path / "b").rglob("*.parquet")))
    assert written == 1 and ": 1 files," in r.stderr, r.stderr


def test_a_table_the_bucket_refuses_fails_alone_and_its_lines_wait(tmp_path) -> None:
    """One table folder that cannot be made: the other tables and the run's record are
    written, the run exits 1 naming it, and the log cursor stays put, so the next run
    writes those lines, each once."""
    log = tmp_path / "s.log"
    log.write_text("".join(BATCH.format(s=k, n=k) for k in range(5)))
    bucket = tmp_path / "b"
    bucket.mkdir()
    (bucket / "log_lines").write_text("")  # a file where the table's folder goes
    args = ["run", "--once", "--no-gpu", "--host", "h1", "--bucket", str(bucket)]
    args += ["--state-dir", str(tmp_path / "st"), "--log", str(log)]
    r = leakcollect(*args)
    assert r.returncode == exitcodes.PARTIAL, r.stderr
    assert "logs failed: log_lines not written" in r.stderr, r.stderr

    def rows(table: str) -> list[dict]:
        return [
            r for f in (bucket / table).rglob("*.parquet") for r in pq.read_table(f).to_pylist()
        ]

    runs = rows("collector_runs")
    (logs,) = [x for x in runs if x["source"] == "logs"]
    assert logs["status"] == "failed" and "log_lines not written" in logs["error"]
    (bucket / "log_lines").unlink()
    r = leakcollect(*args)
    assert r.returncode == exitcodes.OK, r.stderr
    lines = [r["text"] for r in rows("log_lines")]
    assert sorted(lines) == sorted(BATCH.format(s=k, n=k).rstrip("\n") for k in range(5))


def test_a_log_named_relative_then_absolute_is_one_log(tmp_path) -> None:
    """Tried by hand as ``--log server.log``, then from cron with the absolute path
    (cron-line writes it so): one cursor, each line once, one ``file``."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "server.log").write_text(BATCH.format(s=1, n=1))
    args = ["run", "--once", "--no-gpu", "--host", "h1", "--bucket", str(tmp_path / "b")]
    args += ["--state-dir", str(tmp_path / "st")]
    cmd = [sys.executable, "-m", "collector.cli", *args]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r = subprocess.run([*cmd, "--log", "server.log"], cwd=logs, env=env, capture_output=True)
    assert r.returncode == exitcodes.OK, r.stderr
    with (logs / "server.log").open("a") as f:
        f.write(BATCH.format(s=2, n=2))
    r = leakcollect(*args, "--log", str(logs / "server.log"))
    assert r.returncode == exitcodes.OK, r.stderr
    files = list((tmp_path / "b").rglob("log_lines/**/*.parquet"))
    rows = [x for f in files for x in pq.read_table(f, columns=["file", "text"]).to_pylist()]
    assert sorted(x["text"] for x in rows) == [BATCH.format(s=s, n=s).rstrip("\n") for s in (1, 2)]
    assert {x["file"] for x in rows} == {str(logs / "server.log")}
    # state saved by a version that kept --log as typed: the cursor is found under it
    for name in ("log-cursors.json", "log-generations.json"):
        f = tmp_path / "st" / name
        f.write_text(
            json.dumps({"server.log": json.loads(f.read_text())[str(logs / "server.log")]})
        )
    with (logs / "server.log").open("a") as f:
        f.write(BATCH.format(s=3, n=3))
    r = subprocess.run([*cmd, "--log", "server.log"], cwd=logs, env=env, capture_output=True)
    assert r.returncode == exitcodes.OK, r.stderr
    files = list((tmp_path / "b").rglob("log_lines/**/*.parquet"))
    texts = [x["text"] for f in files for x in pq.read_table(f, columns=["text"]).to_pylist()]
    assert sorted(texts) == [BATCH.format(s=s, n=s).rstrip("\n") for s in (1, 2, 3)]


def test_a_log_the_permission_check_refuses_does_not_stop_the_run(tmp_path, monkeypatch) -> None:
    """A log logrotate recreated ``0640 root adm`` is a failed source at run time (exit 1,
    the other sources written), not a usage error that writes nothing. As root every
    file passes the permission check, so the check itself says no here."""
    from click.testing import CliRunner

    from collector.cli import cli

    log = tmp_path / "s.log"
    log.write_text(BATCH.format(s=1, n=1))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m, **kw: p != str(log) and real_access(p, m))
    args = ["run", "--once", "--no-gpu", "--host", "h1", "--bucket", str(tmp_path / "b")]
    args += ["--state-dir", str(tmp_path / "st"), "--log", str(log)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code in (exitcodes.OK, exitcodes.PARTIAL), r.output
    assert list((tmp_path / "b").rglob("collector_runs/**/*.parquet")), r.output


def test_second_run_exits_at_once_while_the_lock_is_held(tmp_path) -> None:
    from collector.runlock import acquire_lock

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
    assert line.startswith("* * * * * ") and " run --bucket /data/traces" in line
    assert "/var/log" not in line and "leakcollect.log" in line  # no root needed
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


# --- every source under a deadline (issue 16) -----------------------------------------------


def _in_thread(fn, limit: float):
    """Call ``fn`` in a thread; (result, seconds), or fail if it is still running after ``limit``."""
    box: dict = {}
    t0 = time.monotonic()
    t = threading.Thread(target=lambda: box.setdefault("r", fn()), daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"still running after {limit} s: wedged"
    return box["r"], time.monotonic() - t0


def test_a_trickling_endpoint_does_not_wedge_the_run_nor_delay_gpu_samples(
    tmp_path, server
) -> None:
    from test_collector_nvml import FakeNvml

    from collector.run import collect_run

    cfg = _cfg(
        tmp_path,
        duration=2.0,
        interval=0.5,
        metrics_urls=[
            f"{server}/trickle",
            f"{server}/trickle-head",
            f"{server}/metrics_sglang.prom",
        ],
    )
    cfg.no_gpu, cfg.metrics_timeout = False, 30.0  # the per-sample deadline still applies
    res, secs = _in_thread(
        lambda: collect_run(cfg, nvml_lib=FakeNvml(gpus=2), say=lambda m: None), 15
    )
    assert secs < 5 and res.code == exitcodes.PARTIAL
    gpus = _rows(tmp_path / "b", "gpu_samples")
    assert len({g["ts"] for g in gpus}) >= 4  # one sample every 0.5 s, as if nothing were stuck
    names = {r["name"] for r in _rows(tmp_path / "b", "metric_samples")}
    assert "sglang:token_usage" in names  # the good endpoint of the same run
    runs = {r["source"]: r for r in _rows(tmp_path / "b", "collector_runs")}
    err = runs["metrics"]["error"]
    assert runs["metrics"]["status"] == "failed" and "/trickle:" in err and "/trickle-head:" in err
    assert "timed out" in err or "abandoned" in err
    reasons = dict(res.failures)
    assert "/trickle" in reasons["metrics"] and "\n" not in reasons["metrics"]


def test_a_scrape_ends_by_its_deadline_whatever_the_server_sends(server) -> None:
    import datetime as dt

    from collector.scrape import scrape

    now = dt.datetime.now(dt.UTC)
    for path in ("/trickle", "/trickle-head", "/hang"):
        r, secs = _in_thread(lambda p=path: scrape(f"{server}{p}", now, "h", timeout=0.8), 10)
        assert secs < 1.5 and r.error and "timed out" in r.error and not r.rows, (path, r.error)


def test_a_compressed_page_is_read_and_a_page_of_no_engine_is_said(server) -> None:
    """A proxy that gzips the page anyway: read as the plain page. A node exporter's
    page (valid, only process_ and node_ metrics) is not a working engine scrape."""
    import datetime as dt

    from collector.scrape import scrape

    now = dt.datetime.now(dt.UTC)
    plain = scrape(f"{server}/metrics_sglang.prom", now, "h")
    packed = scrape(f"{server}/gz/metrics_sglang.prom", now, "h")
    assert plain.error is None and packed.error is None, packed.error
    assert [r["name"] for r in packed.rows] == [r["name"] for r in plain.rows] != []
    node = scrape(f"{server}/node", now, "h")
    assert node.error and "no SGLang or vLLM metrics" in node.error and "2 other" in node.error
    for way in ("zlib", "rawdeflate"):  # the standard's deflate, and the raw one some send
        got = scrape(f"{server}/{way}/metrics_sglang.prom", now, "h")
        assert got.error is None and [r["name"] for r in got.rows] == [
            r["name"] for r in plain.rows
        ]
    # half a page would read as metrics gone missing: refused, and said
    cut = scrape(f"{server}/gzcut/metrics_sglang.prom", now, "h")
    assert cut.error and "ends before its compressed stream" in cut.error and not cut.rows


def test_ten_megabytes_of_garbage_are_refused_without_filling_memory(server) -> None:
    import datetime as dt
    import tracemalloc

    from collector.scrape import MAX_BYTES, scrape

    now = dt.datetime.now(dt.UTC)
    for path in ("/big", "/big-declared"):
        tracemalloc.start()
        r = scrape(f"{server}{path}", now, "h", timeout=20)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert r.error and "too large" in r.error and not r.rows, r.error
        assert peak < 2 * MAX_BYTES + (1 << 20), f"{path}: peak {peak / 2**20:.1f} MiB"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_sigterm_ends_a_run_in_under_two_seconds_and_loses_no_log_line(
    tmp_path, server, sig
) -> None:
    """SIGTERM, and Ctrl-C alike (it used to drop what was sampled, with exit 1)."""
    log = tmp_path / "s.log"
    log.write_text(BATCH.format(s=1, n=1))
    args = [
        "run",
        "--duration",
        "30",
        "--interval",
        "10",
        "--metrics-timeout",
        "9",
        "--no-gpu",
        "--metrics-url",
        f"{server}/trickle",
        "--log",
        str(log),
        "--bucket",
        str(tmp_path / "b"),
        "--state-dir",
        str(tmp_path / "st"),
    ]
    TRICKLE_HIT.clear()
    p = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", *args], stderr=subprocess.PIPE, text=True
    )
    try:
        assert TRICKLE_HIT.wait(20), "the collector never scraped"
        time.sleep(0.3)
        t0 = time.monotonic()
        p.send_signal(sig)
        p.wait(timeout=10)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    print(f"{sig.name} to exit: {took:.2f} s")
    assert took < 2.0, f"{sig.name} took {took:.2f} s"
    err = p.stderr.read() if p.stderr else ""
    assert "stopped (SIGTERM or Ctrl-C)" in err and "Aborted" not in err, err
    assert p.returncode == 1  # some sources failed: the run was stopped
    runs = {r["source"]: r for r in _rows(tmp_path / "b", "collector_runs")}
    assert runs["logs"]["status"] == "failed" and "not read" in runs["logs"]["error"]
    assert "stopped" in runs["metrics"]["error"]
    r = leakcollect("run", "--once", "--no-gpu", *args[-6:])  # the next run reads the log
    assert [x["offset"] for x in _rows(tmp_path / "b", "log_lines")] == [0], r.stderr


def test_a_stale_lock_is_taken_over_and_a_live_one_is_not(tmp_path) -> None:
    from collector.runlock import LockHeld, acquire_lock, restamp

    st = tmp_path / "st"
    st.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            f"f = open({str(st / 'leakcollect.lock')!r}, 'a+')\n"
            "fcntl.flock(f, fcntl.LOCK_EX)\n"
            "f.write('pid 1 until=1000')\nf.flush()\nprint('held', flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "held"
        said: list[str] = []
        lock = acquire_lock(st, hold_s=60, say=said.append)  # its holder is decades late
        assert said and "taking over" in said[0] and "until=1000" in said[0]
        with pytest.raises(LockHeld, match="another leakcollect run holds"):
            acquire_lock(st, hold_s=60, say=said.append)  # ours is fresh: no takeover
        # a run writes its own limit over the default one (a --duration 3600 run is not stale)
        restamp(st, 7200)
        until = float((st / "leakcollect.lock").read_text().split("until=")[1])
        assert 7100 < until - time.time() < 7300
        lock.close()
    finally:
        holder.kill()
        holder.wait()


def test_a_run_never_outlives_its_limit(tmp_path) -> None:
    """A bucket write stuck for good (a hung network mount): the process exits, the lock goes."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from collector import run, writer\n"
        "run.run_limit = lambda *a, **k: 1.5\n"
        "writer.BucketWriter.write = lambda *a, **k: time.sleep(60)\n"
        f"cfg = run.Config(bucket={str(tmp_path / 'b')!r}, host='h', state_dir=Path({str(tmp_path / 'st')!r}), no_gpu=True)\n"
        "sys.exit(run.collect(cfg))\n"
    )
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == exitcodes.NOTHING and "still running after" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 10


def test_guarded_abandons_a_stuck_source_and_cancels_it() -> None:
    import datetime as dt

    from collector.sources import Outcome, Source, guarded

    class Stuck(Source):
        kind = "metrics"

        def __init__(self) -> None:
            super().__init__("stuck://x", dt.datetime.now(dt.UTC), "h")
            self.release = threading.Event()

        def collect(self, deadline: float) -> Outcome:
            self.release.wait(30)  # ignores its deadline, as a read stuck in the kernel would
            return Outcome(rows={"metric_samples": [{"late": True}]})

        def cancel(self) -> None:
            self.release.set()

    src = Stuck()
    stop = threading.Event()
    t0 = time.monotonic()
    ((out, secs),) = guarded([src], [t0 + 0.3], stop)
    assert out.abandoned and not out.rows and "abandoned after" in out.errors[0]
    assert 0.25 < secs < 1.0 and src.release.is_set()  # cancel() was called to unblock it


def test_a_source_that_stops_at_its_deadline_is_kept_not_abandoned() -> None:
    """A log or spool read checks its deadline between chunks and hands back what it
    read: it must be told a deadline early enough that one more chunk still lands
    before the guard gives up, or the rows and the cursor are thrown away every run."""
    import datetime as dt

    from collector.sources import Outcome, Source, guarded

    class Chunked(Source):
        kind = "logs"
        winds_down = True

        def collect(self, deadline: float) -> Outcome:
            n = 0
            while time.monotonic() < deadline:
                time.sleep(0.05)  # one chunk: finished even when the deadline passes meanwhile
                n += 1
            return Outcome(rows={"log_lines": [{"chunk": k} for k in range(n)]})

    src = Chunked("x.log", dt.datetime.now(dt.UTC), "h")
    ((out, _),) = guarded([src], [time.monotonic() + 0.4], threading.Event())
    assert not out.abandoned and not out.errors and out.count >= 3, out.errors


def test_a_log_backlog_longer_than_the_deadline_arrives_over_runs_each_line_once(
    tmp_path,
) -> None:
    """Each run reads what its deadline allows and moves the cursor; nothing read twice."""
    import pyarrow as pa

    log = tmp_path / "s.log"
    n = 250_000
    log.write_text("".join(BATCH.format(s=k % 60, n=k) for k in range(n)))
    cfg = _cfg(tmp_path)
    cfg.logs, cfg.log_timeout = [str(log)], 0.5
    runs = 0
    for _ in range(60):
        before = len(list((tmp_path / "b").rglob("log_lines/**/*.parquet")))
        said: list[str] = []
        code = collect(cfg, say=said.append)
        # a run that did not reach the end says the log is behind (exit 1): not abandoned
        behind = [m for m in said if ": behind: reading stopped at the deadline" in m]
        assert code == (exitcodes.PARTIAL if behind else exitcodes.OK), said
        assert not any("abandoned" in m for m in said), said
        runs += 1
        if len(list((tmp_path / "b").rglob("log_lines/**/*.parquet"))) == before:
            break  # this run found nothing new: the backlog is in
    files = list((tmp_path / "b").rglob("log_lines/**/*.parquet"))
    ids = pa.concat_tables([pq.read_table(f, columns=["offset"]) for f in files]).column(0)
    assert len(ids) == n and len(set(ids.to_pylist())) == n
    assert runs > 2  # the backlog did take several runs (else this tested no deadline)


def test_a_stuck_proc_read_is_abandoned_while_the_gpus_are_sampled(tmp_path) -> None:
    """A /proc read that never returns (here a FIFO nobody writes: open() blocks)."""
    from test_collector_nvml import FakeNvml

    from collector.run import collect_run

    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    fifo = proc / "4242" / "cmdline"
    os.mkfifo(fifo)
    cfg = _cfg(tmp_path, duration=1.5, interval=0.5)
    cfg.no_gpu, cfg.proc_root, cfg.procfs_timeout = False, proc, 0.3
    try:
        res, secs = _in_thread(
            lambda: collect_run(cfg, nvml_lib=FakeNvml(gpus=1), say=lambda m: None), 15
        )
    finally:  # let the abandoned thread go
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    assert secs < 4 and res.code == exitcodes.PARTIAL
    assert len({g["ts"] for g in _rows(tmp_path / "b", "gpu_samples")}) >= 3
    runs = {r["source"]: r for r in _rows(tmp_path / "b", "collector_runs")}
    assert runs["procfs"]["status"] == "failed" and "abandoned" in runs["procfs"]["error"]
    assert runs["nvml"]["status"] == "ok"


def test_the_cron_line_s_own_log_is_moved_aside_past_its_limit(tmp_path) -> None:
    """The cron line appends each run's output to leakcollect.log for good: past 4 MiB a
    run moves it to leakcollect.log.1 (its own output still lands there: the shell opened
    the file), and the next run starts a new one."""
    from collector.runlock import OWN_LOG, OWN_LOG_MAX

    st = tmp_path / "st"
    st.mkdir()
    (st / OWN_LOG).write_bytes(b"x" * OWN_LOG_MAX)
    args = [sys.executable, "-m", "collector.cli", "run", "--once", "--no-gpu"]
    args += ["--bucket", str(tmp_path / "b"), "--state-dir", str(st)]
    line = " ".join(shlex.quote(a) for a in args) + f" >>{shlex.quote(str(st / OWN_LOG))} 2>&1"
    for _ in range(2):
        subprocess.run(["sh", "-c", line], check=True, timeout=120)
    old, new = (st / f"{OWN_LOG}.1").read_bytes(), (st / OWN_LOG).read_bytes()
    assert old.startswith(b"x" * OWN_LOG_MAX) and b"leakcollect: run " in old[OWN_LOG_MAX:]
    assert new.startswith(b"leakcollect: run ") and len(new) < 10_000
