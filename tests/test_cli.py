"""The leakreport command as cron and CI use it: exit codes, stdout vs stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer import exitcodes


def leakreport(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leakreport", *args], capture_output=True, text=True, timeout=600
    )


def test_a_reader_of_stderr_that_leaves_does_not_stop_the_work(sim_bucket, tmp_path) -> None:
    """`... 2>&1 | head -2`: progress lines then meet a closed pipe; the document is still
    written and the exit code is the analysis's, not a broken pipe's."""
    out = tmp_path / "doc.json"
    args = ["analyze", str(sim_bucket[0]), "--format", "json", "--fail-on", "never"]
    p = subprocess.Popen(
        [sys.executable, "-m", "leakreport", *args, "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert p.stderr is not None
    p.stderr.close()  # before the first progress line
    assert p.wait(timeout=600) == exitcodes.OK
    assert json.loads(out.read_text())["findings"]


def test_json_to_stdout_progress_to_stderr(sim_bucket) -> None:
    r = leakreport("analyze", str(sim_bucket[0]), "--format", "json", "--fail-on", "never")
    assert r.returncode == exitcodes.OK, r.stderr
    doc = json.loads(r.stdout)  # nothing but the document on stdout
    assert doc["schema_version"] == 1 and doc["findings"]
    for key in (
        "rule_id",
        "category",
        "severity",
        "host",
        "gpu",
        "pid",
        "start",
        "end",
        "summary",
        "evidence",
        "remediation",
    ):
        assert key in doc["findings"][0]
    assert "rollups built" in r.stderr


@pytest.mark.parametrize(
    "fail_on,code",
    [("critical", exitcodes.FINDINGS), ("info", exitcodes.FINDINGS), ("never", exitcodes.OK)],
)
def test_fail_on(sim_bucket, fail_on: str, code: int) -> None:
    assert leakreport("analyze", str(sim_bucket[0]), "-q", "--fail-on", fail_on).returncode == code


def test_host_filter_prunes(sim_bucket) -> None:
    r = leakreport(
        "analyze", str(sim_bucket[0]), "-q", "--format", "json", "--host", "healthy-static-00"
    )
    assert r.returncode == exitcodes.OK, r.stderr
    doc = json.loads(r.stdout)
    assert doc["findings"] == [] and [h["host"] for h in doc["hosts"]] == ["healthy-static-00"]


def test_date_filter_outside_data_gives_nothing(sim_bucket) -> None:
    r = leakreport("analyze", str(sim_bucket[0]), "-q", "--format", "json", "--since", "2030-01-01")
    assert r.returncode == exitcodes.INCOMPLETE
    doc = json.loads(r.stdout)
    assert doc["findings"] == [] and all(v == 0 for v in doc["run"]["tables"].values())
    assert {s["status"] for s in doc["run"]["rules"]} == {"skipped"}
    assert any("--since 2030-01-01" in x for x in doc["run"]["incomplete"])
    assert "no data in scope" in r.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["analyze", "/nonexistent/bucket"], "no such bucket"),
        (["analyze", "{bucket}", "--param", "GM001.nope=1"], "has no parameter 'nope'"),
        (["analyze", "{bucket}", "--param", "ZZ9.x=1"], "no rule 'ZZ9'"),
        (["analyze", "{bucket}", "--param", "garbage"], "RULE.key=value"),
        # a rule comparing numbers given text would fail and its findings go missing
        (["analyze", "{bucket}", "--param", "GM001.min_growth_mib=abc"], "expected a number"),
        (["analyze", "{bucket}", "--param", "GM001.min_growth_mib=true"], "expected a number"),
        (["analyze", "{bucket}", "--param", "GM001.min_growth_mib="], "expected a number"),
        (["analyze", "{bucket}", "--param", "rollup.bucket_s=fine"], "expected a number"),
        (["analyze", "{bucket}", "--param", "rollup.nope=1"], "rollup has no parameter 'nope'"),
        # a zero width failed in DuckDB's words, a negative one ran and gave nonsense
        (
            ["analyze", "{bucket}", "--param", "rollup.alloc_bin_s=0"],
            "alloc_bin_s=0: must be above 0 (a width)",
        ),
        (["analyze", "{bucket}", "--param", "rollup.proc_bin_s=-5"], "must be above 0"),
        (["analyze", "{bucket}", "--param", "rollup.min_idle_s=-1"], "must be 0 or more"),
        (["analyze", "{bucket}", "--param", "rollup.loaded_fraction=2"], "must be a share, 0 to 1"),
        (
            ["analyze", "{bucket}", "--since", "2026-11-26", "--until", "2026-11-23"],
            "--since 2026-11-26 is after --until 2026-11-23",
        ),
        (["analyze", "{bucket}", "--pack", "/nonexistent/pack"], "no such pack"),
        (["analyze", "{bucket}", "--since", "yesterday"], "not a date"),
        # Python's fromisoformat takes these; a date= folder never has them
        (["analyze", "{bucket}", "--since", "20261124"], "not a date"),
        (["analyze", "{bucket}", "--until", "2026-W48-1"], "not a date"),
        (["compact", "{bucket}", "--before", "2026-W48"], "not a date"),
        (["simulate", "--scenario", "nope", "--out", "{tmp}"], "no scenario 'nope'"),
        # each was a traceback, exit 1 (--labels after the whole fleet was written)
        (["simulate", "--out", "/proc/x"], "--out /proc/x: cannot make the folder"),
        (["simulate", "--out", "{tmp}", "--hours", "nan"], "--hours nan: not a number"),
        (["simulate", "--out", "{tmp}", "--seed", "99999999999999999999"], "--seed"),
        (["simulate", "--out", "{tmp}", "--labels", "/proc/x/l.json"], "--labels /proc/x: cannot"),
        (["eval", "--out", "/proc/x"], "--out /proc/x: cannot make the folder"),
        (["eval", "--out", "{tmp}", "--hours", "nan"], "--hours nan: not a number"),
    ],
)
def test_errors_exit_2_with_a_message(sim_bucket, tmp_path, args: list[str], message: str) -> None:
    args = [a.format(bucket=sim_bucket[0], tmp=tmp_path / "o") for a in args]
    r = leakreport(*args)
    assert r.returncode == exitcodes.ERROR
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_simulating_a_host_into_a_bucket_that_has_it_is_refused(tmp_path) -> None:
    """Two simulations of one host (another seed) went into one bucket, and the analysis
    read both traces as one. Another scenario's hosts beside them are fine."""
    out = str(tmp_path / "b")
    sim = ("simulate", "--hours", "0.5", "--out", out, "-q", "--scenario")
    assert leakreport(*sim, "cache-warmup").returncode == 0
    before = sorted(p.name for p in (tmp_path / "b").rglob("*.parquet"))
    r = leakreport(*sim, "cache-warmup", "--seed", "9")
    assert r.returncode == exitcodes.ERROR and "Traceback" not in r.stderr
    assert f"{out} already has data of host cache-warmup-00: simulating it again" in r.stderr
    assert sorted(p.name for p in (tmp_path / "b").rglob("*.parquet")) == before
    assert leakreport(*sim, "healthy-static").returncode == 0


def test_a_trace_past_now_is_said_when_simulated(tmp_path) -> None:
    """A long simulation ran past now without a word; every analysis then printed a line
    per quarantined file. (The fleet starts on a fixed day: whether 400 h runs past now
    depends on today, and so does what is expected.)"""
    import datetime as dt

    from simulator.generate import DEFAULT_START

    r = leakreport("simulate", "--scenario", "healthy-static", "--hours", "400", "--out",
                   str(tmp_path / "b"), "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    past = DEFAULT_START + dt.timedelta(hours=400) > dt.datetime.now(dt.UTC)
    assert ("past now" in r.stderr) == past, r.stderr
    r = leakreport("simulate", "--scenario", "healthy-static", "--hours", "1", "--out",
                   str(tmp_path / "c"), "-q")  # fmt: skip
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_eval_into_the_same_folder_scores_as_a_fresh_one(tmp_path) -> None:
    """eval emptied OUT/bucket but wrote OUT/<shape>/bucket: a second run with another
    seed scored both runs' traces together."""
    from analyzer.evaluate import run_eval

    def score(folder: Path, seed: int) -> dict:
        res = run_eval(folder, hours=1, seed=seed, shapes=("native",), scenario="cache-warmup")
        return res.to_dict()["shapes"]

    score(tmp_path / "again", 11)
    assert score(tmp_path / "again", 12) == score(tmp_path / "fresh", 12)
    assert len(list((tmp_path / "again").rglob("*.parquet"))) == len(
        list((tmp_path / "fresh").rglob("*.parquet"))
    )


def test_param_override_changes_the_verdict(sim_bucket) -> None:
    r = leakreport(
        "analyze",
        str(sim_bucket[0]),
        "-q",
        "--format",
        "json",
        "--param",
        "GM001.min_growth_mib=100000",
    )
    doc = json.loads(r.stdout)
    assert not [f for f in doc["findings"] if f["rule_id"] == "GM001"]


def test_rules_list_and_help() -> None:
    r = leakreport("rules", "list")
    assert r.returncode == 0 and "GM001" in r.stdout and "leak.gpu" in r.stdout
    h = leakreport("analyze", "--help")
    assert "--fail-on" in h.stdout and "--param" in h.stdout
    # fleet has no --fail-on: its exit codes say what it does (it showed analyze's)
    h = leakreport("fleet", "--help")
    assert "--fail-on" not in h.stdout and "page written" in h.stdout


def test_rules_test_command_runs_the_pack_cases() -> None:
    r = leakreport("rules", "test")
    assert r.returncode == 0, r.stdout
    assert " 0 failed" in r.stdout


def test_markdown_and_textfile_outputs(sim_bucket, tmp_path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    prom = tmp_path / "node" / "leakreport.prom"
    r = leakreport(
        "analyze",
        str(sim_bucket[0]),
        "-q",
        "--format",
        "markdown",
        "--textfile",
        str(prom),
        "--fail-on",
        "never",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("**leakreport**:") and "`GM001`" in r.stdout
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    rates = {s.labels["host"]: s.value for s in fams["leakreport_leak_rate_bytes_per_hour"].samples}
    assert rates["fast-image-processor-leak-00"] > 1e9  # ~2 GiB/h
    assert "healthy-static-00" not in rates
    ttl = fams["leakreport_time_to_oom_seconds"].samples
    assert any(
        s.labels["host"] == "fast-image-processor-leak-00" and s.value < 4 * 3600 for s in ttl
    )
    assert not list(prom.parent.glob(".*tmp"))
    bad = leakreport(
        "analyze",
        str(sim_bucket[0]),
        "-q",
        "--textfile",
        str(tmp_path / "x.txt"),
        "--fail-on",
        "never",
    )
    assert bad.returncode == exitcodes.ERROR and "*.prom" in bad.stderr


def test_an_out_that_cannot_be_written_is_refused_before_the_analysis(sim_bucket, tmp_path) -> None:
    """Found after minutes of analysis, it wasted them: refused first, exit 2, one line.
    Missing folders are made, as before (a dated folder in a cron job)."""
    bucket = str(sim_bucket[0])
    (tmp_path / "a-file").write_text("")
    under_a_file = str(tmp_path / "a-file" / "sub")
    for cmd in (
        ["report", bucket, "--out", f"{under_a_file}/r.html"],
        ["analyze", bucket, "--out", f"{under_a_file}/f.json"],
        ["analyze", bucket, "--textfile", str(tmp_path / "leak.txt")],
        ["fleet", bucket, "--week", "2026-W48", "--out", f"{under_a_file}/f.html"],
        ["report", bucket, "--out", str(tmp_path)],
    ):
        r = leakreport(*cmd)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (cmd, r.stderr)
        assert "rules" not in r.stderr and "rollups" not in r.stderr, r.stderr  # nothing ran
    out = tmp_path / "new" / "2026-12-07" / "f.json"
    r = leakreport("analyze", bucket, "--format", "json", "--out", str(out))
    assert r.returncode in (0, 1, 3) and out.is_file(), r.stderr


def test_a_week_typed_in_lower_case_is_the_stored_week(sim_bucket, tmp_path) -> None:
    out = tmp_path / "f.html"
    r = leakreport("fleet", str(sim_bucket[0]), "--week", "2026-w48", "--out", str(out))
    assert r.returncode in (0, 1, 3), r.stderr
    assert "<title>leakreport fleet — 2026-W48</title>" in out.read_text()


def test_one_host_of_several_that_matches_nothing_is_said(sim_bucket) -> None:
    bucket = str(sim_bucket[0])
    host = sorted(
        p.name[5:] for p in next((sim_bucket[0] / "gpu_samples").glob("date=*")).glob("host=*")
    )[0]
    r = leakreport(
        "analyze", bucket, "--host", host, "--host", "gpu-node-typo", "--fail-on", "never"
    )
    assert r.returncode == 3, r.stderr
    assert "--host gpu-node-typo: no data of this host in scope" in r.stderr
