"""What a new user meets in the first hour: exit codes that do not read "healthy" when
nothing was checked, words that say what happened, help that explains, config files
that refuse what they do not know."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pyarrow.parquet as pq
import pytest

from analyzer import exitcodes


def run(module: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def leakreport(*args: str) -> subprocess.CompletedProcess[str]:
    return run("leakreport", *args)


def leakcollect(*args: str) -> subprocess.CompletedProcess[str]:
    return run("collector.cli", *args)


@pytest.fixture(scope="module")
def small_bucket(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from simulator.generate import simulate

    b = tmp_path_factory.mktemp("first") / "bucket"
    simulate("healthy-static", b, hosts=1, hours=1, seed=3)
    return b


@pytest.mark.parametrize(
    "case,args,reason",
    [
        ("empty bucket", ["{empty}"], "the bucket holds no trace files"),
        ("unmatched host", ["{bucket}", "--host", "nope"], "--host nope matches no host"),
        ("since past data", ["{bucket}", "--since", "2031-01-01"], "--since 2031-01-01"),
        (
            "errored rule",
            ["{bucket}", "--pack", "{broken_pack}"],
            "rule ZZ001 errored",
        ),
    ],
)
def test_incomplete_analyses_exit_3_and_say_why(
    small_bucket: Path, tmp_path: Path, case: str, args: list[str], reason: str
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    pack = tmp_path / "pack"
    (pack / "rules").mkdir(parents=True)
    (pack / "pack.toml").write_text('name = "broken"\nversion = "1"\n')
    (pack / "rules" / "ZZ001.sql").write_text(
        '/*---\nid = "ZZ001"\nname = "x.y"\ntitle = "t"\ncategory = "leak.gpu"\n'
        'severity = "warning"\nrequires = ["gpu_samples"]\nevidence = []\n'
        'description = "d"\nremediation = "r"\n---*/\nSELECT host, summary FROM no_such_table\n'
    )
    argv = [
        a.format(bucket=small_bucket, empty=empty, broken_pack=pack) for a in ["analyze", *args]
    ]
    r = leakreport(*argv, "--format", "json", "-q")
    assert r.returncode == exitcodes.INCOMPLETE, (case, r.stderr)
    assert "Traceback" not in r.stderr
    assert reason in r.stderr, r.stderr
    doc = json.loads(r.stdout)  # the reasons are in the document too
    assert any(reason in x for x in doc["run"]["incomplete"]), doc["run"]["incomplete"]


def test_not_a_bucket_is_a_usage_error() -> None:
    r = leakreport("analyze", "/etc")
    assert r.returncode == exitcodes.ERROR
    assert "not a trace bucket" in r.stderr and "Traceback" not in r.stderr


def test_a_complete_clean_analysis_exits_0_and_the_table_has_a_header(small_bucket) -> None:
    r = leakreport("analyze", str(small_bucket), "-q")
    assert r.returncode == exitcodes.OK, r.stderr
    first, *rest = r.stdout.splitlines()
    assert first.startswith("0 findings over 1 host ")  # pluralised
    assert any(line.startswith("rules: 0 fired, ") and "clean" in line for line in rest)
    assert "failed" not in r.stdout and "passed" not in r.stdout
    assert r.stderr == ""  # -q: nothing but errors


def test_hosts_with_only_logs_and_probe_samples_are_counted(tmp_path) -> None:
    """No device samples, no process table, no start-up lines: the findings' host is
    still a host of the analysis, and the header says there were no GPU samples."""
    import shutil

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from simulator.generate import simulate

    b = tmp_path / "bucket"
    simulate("probe-tensor-leak", b, hosts=1, hours=2, seed=3)
    for table in b.iterdir():
        if table.is_dir() and table.name not in ("allocator_samples", "log_lines"):
            shutil.rmtree(table)
    starts = r"ServerArgs\(|API server version|LLM engine|Started server|fired up|startup complete"
    dropped = 0
    for f in (b / "log_lines").rglob("*.parquet"):  # no line that names the server either
        t = pq.read_table(f)
        kept = t.filter(pc.invert(pc.match_substring_regex(t["text"], starts)))
        dropped += t.num_rows - kept.num_rows
        pq.write_table(kept.replace_schema_metadata(t.schema.metadata), f)
    assert dropped
    r = leakreport("analyze", str(b), "-q")
    head = r.stdout.splitlines()[0]
    assert head.startswith("1 finding over 1 host (no GPU memory samples)"), r.stdout
    assert r.returncode == exitcodes.FINDINGS, r.stderr
    r = leakreport("analyze", str(b), "-q", "--format", "markdown")
    assert "over 1 host (no GPU memory samples)" in r.stdout.splitlines()[0], r.stdout
    doc = tmp_path / "doc.json"
    leakreport("analyze", str(b), "-q", "--format", "json", "--out", str(doc))
    assert json.loads(doc.read_text())["hosts"][0]["host"] == "probe-tensor-leak-00"
    r = leakreport("report", str(doc), "--out", str(tmp_path / "r.html"))
    assert r.returncode == exitcodes.OK, r.stderr
    assert "Data — (no GPU memory samples) · 1 host, 0 GPUs" in (tmp_path / "r.html").read_text()


def test_progress_goes_to_stderr_in_plain_lines_when_not_a_terminal(small_bucket) -> None:
    r = leakreport("analyze", str(small_bucket), "--format", "json")
    json.loads(r.stdout)
    assert "rules 17/17 done" in r.stderr or "rules " in r.stderr
    v = leakreport("analyze", str(small_bucket), "--format", "json", "-v")
    assert "GM001 clean" in v.stderr  # -v names every rule and its status


def test_empty_week_writes_a_page_that_says_so_and_exits_3(small_bucket, tmp_path) -> None:
    out = tmp_path / "fleet.html"
    r = leakreport("fleet", str(small_bucket), "--week", "2030-W01", "--out", str(out), "-q")
    assert r.returncode == exitcodes.INCOMPLETE, r.stderr
    assert "no data for week 2030-W01" in r.stderr
    assert out.exists()


def test_memory_limit_is_validated_before_it_reaches_sql(small_bucket) -> None:
    r = leakreport(
        "analyze", str(small_bucket), "--memory-limit", "1GB'; COPY (SELECT 1) TO '/tmp/x"
    )
    assert r.returncode == exitcodes.ERROR and "not a size" in r.stderr


def test_report_refuses_a_json_array_and_a_full_disk_in_one_line(small_bucket, tmp_path) -> None:
    arr = tmp_path / "a.json"
    arr.write_text("[1, 2]")
    r = leakreport("report", str(arr), "--out", str(tmp_path / "r.html"))
    assert r.returncode == exitcodes.ERROR and "not a findings document" in r.stderr
    assert "Traceback" not in r.stderr
    if Path("/dev/full").exists():
        r = leakreport("analyze", str(small_bucket), "-q", "--out", "/dev/full/x.json")
        assert r.returncode == exitcodes.ERROR and "cannot write" in r.stderr
        assert "Traceback" not in r.stderr


def test_simulate_list_needs_no_out_and_hosts_means_hosts(tmp_path) -> None:
    r = leakreport("simulate", "--list")
    assert r.returncode == 0 and "healthy-static" in r.stdout
    r = leakreport("simulate", "--hosts", "2", "--out", str(tmp_path / "b"))
    assert r.returncode == exitcodes.ERROR and "fewer than the" in r.stderr
    r = leakreport(
        "simulate", "--scenario", "healthy-static", "--hosts", "2", "--hours", "0.2",
        "--out", str(tmp_path / "b2"), "-q",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    hosts = {p.name for p in (tmp_path / "b2" / "gpu_samples").glob("date=*/host=*")}
    assert len(hosts) == 2


@pytest.mark.parametrize(
    "cmd",
    [
        ("leakreport", "simulate", "--out", "{tmp}/b"),
        ("leakreport", "logs", "parse", "{readme}"),
        ("collector.cli", "import", "server-log", "{readme}", "--host", "h", "--bucket", "{tmp}/b"),
    ],
    ids=["simulate", "logs-parse", "import-server-log"],
)
def test_an_unknown_time_zone_is_a_usage_error_naming_it(cmd, tmp_path) -> None:
    readme = str(Path(__file__).parent.parent / "README.md")
    args = [a.format(tmp=tmp_path, readme=readme) for a in cmd[1:]]
    r = run(cmd[0], *args, "--tz", "Mars/Olympus")
    assert r.returncode == exitcodes.ERROR, r.stderr
    assert "unknown time zone 'Mars/Olympus'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "b").exists()  # nothing written before the check


@pytest.mark.parametrize("tz", ["Z", "utc"])
def test_utc_spellings_the_importers_take_work_for_logs_parse_too(tz) -> None:
    readme = str(Path(__file__).parent.parent / "README.md")
    r = leakreport("logs", "parse", readme, "--tz", tz)
    assert r.returncode == 0, r.stderr


def test_a_fixed_offset_zone_works_as_the_help_says(tmp_path) -> None:
    """--tz +02:00 (the help's own example) reads naive stamps two hours ahead of UTC, in
    logs parse and in both importers that take it."""
    log = tmp_path / "server.log"
    log.write_text(
        '[2026-12-01 12:00:00] INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n'
        "[2026-12-01 12:00:01] Decode batch. #running-req: 1, #token: 90, token usage: 0.01\n"
    )
    r = leakreport("logs", "parse", str(log), "--tz", "+02:00", "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["ts"] for x in r.stdout.splitlines()] == ["2026-12-01T10:00:01"]
    csv = tmp_path / "smi.csv"
    csv.write_text("timestamp, index, memory.used [MiB]\n2026/12/01 12:00:00, 0, 100\n")
    b = tmp_path / "b"
    for cmd in (("nvidia-smi-csv", str(csv)), ("server-log", str(log))):
        r = leakcollect("import", *cmd, "--host", "h", "--bucket", str(b), "--tz", "UTC+2")
        assert r.returncode == 0, r.stderr
    (f,) = (b / "gpu_samples").rglob("*.parquet")
    assert pq.read_table(f).column("ts").to_pylist() == [
        dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC)
    ]
    (f,) = (b / "log_lines").rglob("*.parquet")
    (line,) = pq.read_table(f).to_pylist()
    assert line["ts"] == dt.datetime(2026, 12, 1, 10, 0, 1, tzinfo=dt.UTC)


def test_memory_alone_is_not_called_clean(tmp_path) -> None:
    """A memory log with no utilisation and no server log cannot tell idle minutes from
    busy ones: the analysis says which rules could not judge the host and exits 3, where
    it used to call a steady 300 MiB/h rise clean (exit 0). With the server log's batch
    lines beside it the same memory is judged, and the leak is found."""
    t0 = dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC)
    mem = tmp_path / "mem.log"
    mem.write_text(
        "".join(
            f"{t0 + dt.timedelta(seconds=10 * i):%Y-%m-%dT%H:%M:%S} {20000 + i // 12}\n"
            for i in range(12 * 360)
        )
    )
    b = tmp_path / "b"
    common = ["--host", "h", "--bucket", str(b)]
    r = leakcollect("import", "gpu-memory-log", str(mem), *common, "--total-mib", "81559")
    assert r.returncode == 0, r.stderr
    r = leakreport("analyze", str(b), "--format", "json")
    assert r.returncode == exitcodes.INCOMPLETE, r.stderr
    assert "host h: idle windows cannot be told on GPU 0" in r.stderr
    doc = json.loads(r.stdout)
    (cov,) = doc["coverage"]
    assert not cov["complete"] and "GM001" not in cov["checked"]
    lacked = {m["rule_id"]: m["lacked"] for m in cov["not_checked"]}
    assert {"GM001", "GM002", "OF001"} <= set(lacked)
    assert "request activity" in lacked["GM001"][0]
    # the server log: busy 40 minutes of each hour (a batch line every 10 s), then idle
    log = tmp_path / "server.log"
    lines = []
    for k in range(12 * 360):
        m = k // 6
        stamp = f"{t0 + dt.timedelta(seconds=10 * k):%Y-%m-%d %H:%M:%S}"
        if m % 60 < 40:
            lines.append(
                f"[{stamp} TP0] Decode batch. #running-req: 4, #token: 900, token usage: 0.05, "
                "gen throughput (token/s): 100.00, #queue-req: 0"
            )
        elif m % 60 == 40 and k % 6 == 0:
            lines.append(
                f"[{stamp} TP0] Decode batch. #running-req: 0, #token: 0, token usage: 0.00, "
                "gen throughput (token/s): 0.00, #queue-req: 0"
            )
    log.write_text("\n".join(lines) + "\n")
    r = leakcollect("import", "server-log", str(log), *common)
    assert r.returncode == 0, r.stderr
    r = leakreport("analyze", str(b), "--format", "json")
    assert "idle windows cannot be told" not in r.stderr
    doc = json.loads(r.stdout)
    assert doc["coverage"][0]["complete"] or "GM001" in doc["coverage"][0]["checked"]
    assert "GM001" in {f["rule_id"] for f in doc["findings"]}, r.stderr
    assert r.returncode == exitcodes.FINDINGS


def test_source_timeouts_are_options_and_a_stuck_source_says_its_limit(tmp_path) -> None:
    """--source-timeout procfs=0.5 abandons a procfs whose files never answer (FIFOs
    with no writer) after half a second, and says so; a bad value is a usage error."""
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    os.mkfifo(proc / "stat")
    os.mkfifo(proc / "4242" / "cmdline")
    common = ["run", "--once", "--no-gpu", "--bucket", str(tmp_path / "b")]
    common += ["--state-dir", str(tmp_path / "s"), "--proc-root", str(proc)]
    r = leakcollect(*common, "--source-timeout", "procfs=0.5")
    assert r.returncode == 1, r.stderr
    assert "procfs failed: procfs: abandoned after 0.5 s" in r.stderr
    r = leakcollect(*common, "--source-timeout", "gpu=3")
    assert r.returncode == 2 and "KIND one of nvml, procfs, logs, spool" in r.stderr


def test_markdown_carries_the_first_remedy() -> None:
    from analyzer.findings import Finding, FindingsDocument, RunInfo
    from analyzer.outputs import first_remedy, markdown

    text = "A. Restart with --disable-fast-image-processor: slower.\nB. Lower it.\nC. Upgrade."
    assert first_remedy(text) == "A. Restart with --disable-fast-image-processor: slower."
    doc = FindingsDocument(run=RunInfo("b", None, None, [], "2026-01-01T00:00:00Z", "0"))
    doc.findings.append(
        Finding("GM001", "leak.gpu", "warning", "h", 0, None, None, None, "s", {}, text)
    )
    assert "what to do: A. Restart" in markdown(doc)


def test_textfile_has_a_timestamp_and_a_success_gauge() -> None:
    import datetime as dt

    from prometheus_client.parser import text_string_to_metric_families

    from analyzer.findings import FindingsDocument, HostInfo, RunInfo
    from analyzer.outputs import textfile

    doc = FindingsDocument(run=RunInfo("b", None, None, [], "2026-01-01T00:00:00Z", "0"))
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    fams = {f.name: f for f in text_string_to_metric_families(textfile(doc, now))}
    assert fams["leakreport_last_run_timestamp_seconds"].samples[0].value == now.timestamp()
    assert fams["leakreport_last_run_success"].samples[0].value == 0  # no host: incomplete
    doc.hosts.append(HostInfo("h"))
    fams = {f.name: f for f in text_string_to_metric_families(textfile(doc, now))}
    assert fams["leakreport_last_run_success"].samples[0].value == 1


def _walk(cmd: click.Command, path: str):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _walk(sub, f"{path} {name}")


@pytest.mark.parametrize("prog", ["leakreport", "leakcollect"])
def test_every_option_has_help_and_every_command_an_example(prog: str) -> None:
    if prog == "leakreport":
        from leakreport.cli import cli
    else:
        from collector.cli import cli
    missing, no_example = [], []
    for path, cmd in _walk(cli, prog):
        for p in cmd.params:
            if isinstance(p, click.Option) and not (p.help or "").strip():
                missing.append(f"{path} {p.opts[-1]}")
        if "Example" not in (cmd.help or ""):  # groups too: `leakreport logs --help`
            no_example.append(path)
    assert not missing, f"options without help: {missing}"
    assert not no_example, f"commands without an example: {no_example}"


def test_help_shows_the_exit_code_table() -> None:
    r = leakreport("--help")
    assert "3  analysis incomplete" in r.stdout
    r = leakreport("analyze", "--help")
    assert "Exit codes" in r.stdout and "Example" in r.stdout


def test_collector_config_takes_long_names_and_refuses_unknown_keys(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text("[2026-11-23 00:00:01] Prefill batch. #new-seq: 1, token usage: 0.10\n")
    good = tmp_path / "good.toml"
    good.write_text(
        f'bucket = "{tmp_path / "b"}"\nlog = ["{log}"]\nno-gpu = true\n'
        f'state_dir = "{tmp_path / "st"}"\nmetrics-url = "http://127.0.0.1:9/metrics"\n'
    )
    r = leakcollect("run", "--once", "--config", str(good))
    assert r.returncode == 1, r.stderr  # the metrics URL refuses: some sources failed
    assert list((tmp_path / "b" / "log_lines").rglob("*.parquet")), "log = [...] was ignored"
    # the reason of the failed source is on stderr, not only in collector_runs
    assert "metrics failed: " in r.stderr and "127.0.0.1:9" in r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text(f'bucket = "{tmp_path / "b"}"\nlogs = ["{log}"]\n')
    r = leakcollect("run", "--once", "--config", str(bad))
    assert r.returncode == 2
    assert "unknown key 'logs'" in r.stderr and str(bad.name) in r.stderr


def test_cron_line_and_units_take_the_run_options(tmp_path) -> None:
    import shlex

    line = leakcollect(
        "cron-line", "--bucket", "/data/t", "--log", "/var/log/s.log", "--no-gpu",
        "--state-dir", str(tmp_path / "st"),
    ).stdout.strip()  # fmt: skip
    argv = shlex.split(line[len("* * * * * ") :])
    i = argv.index("run")
    assert argv[i + 1 :].count("--log") == 1 and "--no-gpu" in argv
    assert f"{tmp_path / 'st'}/leakcollect.log" in line
    units = leakcollect("systemd-units", "--bucket", "/data/t", "--metrics-url", "http://h/m")
    assert "--metrics-url http://h/m" in units.stdout and "systemctl" in units.stderr


def test_the_cron_line_names_the_state_folder_its_own_log_goes_to(tmp_path) -> None:
    """Left at its default, the state folder comes from $XDG_STATE_HOME in this shell;
    cron's environment has none, so the line must say it, or the run keeps its cursors
    elsewhere and never rotates the log the line appends to."""
    import shlex

    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "xdg")}
    r = subprocess.run(
        [sys.executable, "-m", "collector.cli", "cron-line", "--bucket", "/b", "--no-gpu"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    cmd = r.stdout.strip()[len("* * * * * ") :]
    argv = shlex.split(cmd.split(" >>")[0])
    state = argv[argv.index("--state-dir") + 1]
    assert state == str(tmp_path / "xdg" / "leakcollect")
    assert shlex.split(cmd.split(" >>")[1].split(" 2>&1")[0]) == [f"{state}/leakcollect.log"]
    # a systemd service logs to the journal and runs as its own user: no folder of this shell's
    units = subprocess.run(
        [sys.executable, "-m", "collector.cli", "systemd-units", "--bucket", "/b", "--no-gpu"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout  # fmt: skip
    assert "--state-dir" not in units and str(tmp_path) not in units


def test_paths_in_a_cron_line_and_a_config_file_hold_from_anywhere(tmp_path) -> None:
    """cron and systemd start elsewhere than the shell that printed the line: every path
    option in it is absolute, and a relative path in a config file is read from the
    file's folder, so the run writes where it was meant to and reads the log."""
    import shlex

    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir(), elsewhere.mkdir()
    (here / "server.log").write_text(
        "[2026-12-07 07:00:00 TP0] Decode batch. #running-req: 1, #token: 9, token usage: 0.01\n"
    )
    given = ["--bucket", "traces", "--log", "server.log", "--state-dir", "st", "--no-gpu"]
    line = run("collector.cli", "cron-line", *given, cwd=here).stdout.strip()
    argv = shlex.split(line[len("* * * * * ") :].split(" >>")[0])
    args = argv[argv.index("run") + 1 :]
    for opt, rel in [("--bucket", "traces"), ("--log", "server.log"), ("--state-dir", "st")]:
        assert args[args.index(opt) + 1] == str(here / rel), line
    r = run("collector.cli", "run", "--once", *args, cwd=elsewhere)  # as cron would
    assert r.returncode == 0, r.stderr
    assert list((here / "traces" / "log_lines").rglob("*.parquet")) and not list(
        elsewhere.iterdir()
    )
    cfg = here / "c.toml"
    cfg.write_text(
        'bucket = "from-config"\nlog = ["server.log"]\nstate-dir = "st2"\nno-gpu = true\n'
    )
    r = run("collector.cli", "run", "--once", "--config", str(cfg), cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    assert list((here / "from-config" / "log_lines").rglob("*.parquet"))
    assert not list(elsewhere.iterdir())
    cfg.write_text("bucket = 5\n")
    r = run("collector.cli", "run", "--once", "--config", str(cfg), cwd=elsewhere)
    assert r.returncode == 2 and "c.toml: bucket must be a path, in quotes: got 5" in r.stderr
    line = run("collector.cli", "cron-line", "--bucket", "/b", "--state-dir", "~/lc").stdout
    home = os.path.expanduser("~/lc")
    assert f"mkdir -p {home} " in line and f"--state-dir {home} " in line and "~" not in line
    url = "http://127.0.0.1:1/metrics?x=a%2Fb"
    units = run("collector.cli", "systemd-units", "--bucket", "/b", "--metrics-url", url).stdout
    (exec_start,) = [x for x in units.splitlines() if x.startswith("ExecStart=")]
    assert "x=a%%2Fb" in exec_start and "%2F" not in exec_start.replace("%%", "")
    r = run("collector.cli", "cron-line", "--bucket", "s3://traces/fleet", "--no-gpu")
    assert "--bucket s3://traces/fleet" in r.stdout
    assert "the bucket is on S3: cron and systemd do not see this shell's AWS_*" in r.stderr


def test_report_of_a_findings_file_refuses_options_it_cannot_honour(small_bucket, tmp_path):
    """--host, --since and the like choose what an analysis reads; a findings file is an
    analysis already made, so they were ignored in silence. A missing source is named as
    neither a findings file nor a bucket."""
    doc = tmp_path / "f.json"
    r = leakreport("analyze", str(small_bucket), "--format", "json", "--out", str(doc), "-q")
    assert doc.exists(), r.stderr
    for opt in (["--host", "x"], ["--since", "2026-01-01"], ["--rule-timeout", "5"]):
        r = leakreport("report", str(doc), "--out", str(tmp_path / "r.html"), *opt)
        assert r.returncode == 2 and f"{opt[0]}: only for a bucket" in r.stderr
    assert not (tmp_path / "r.html").exists()
    r = leakreport("report", str(tmp_path / "nope.json"), "--out", str(tmp_path / "r.html"))
    assert r.returncode == 2 and "nope.json: no such findings file or bucket folder" in r.stderr
    r = leakreport("report", str(doc), "--out", str(tmp_path / "r.html"))
    assert r.returncode == 0 and (tmp_path / "r.html").exists(), r.stderr


def test_a_terminal_gets_a_progress_bar_and_q_silences_it(small_bucket) -> None:
    """stderr on a pseudo-terminal: a bar with position and ETA, not one line per rule."""
    import os
    import pty

    def on_tty(*args: str) -> str:
        pid, fd = pty.fork()
        if pid == 0:  # child: stdout and stderr are the terminal
            os.execv(sys.executable, [sys.executable, "-m", "leakreport", *args])
        chunks = []
        while True:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        os.waitpid(pid, 0)
        return b"".join(chunks).decode(errors="replace")

    out = on_tty("analyze", str(small_bucket), "--fail-on", "never")
    assert "rules  [" in out and "/17" in out  # a bar with the position
    assert "GM001 clean" not in out and "rules 17/17 done" not in out  # no per-rule lines
    quiet = on_tty("analyze", str(small_bucket), "--fail-on", "never", "-q")
    assert "/17" not in quiet and "0 findings over 1 host" in quiet
