"""Buckets on a real S3-compatible server (moto in server mode) on 127.0.0.1."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest
from motoserver import MOTO, free_port, s3_environ

from analyzer.bucket import Scope
from analyzer.packs import load_packs
from analyzer.runner import analyze
from simulator.generate import simulate

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
pytestmark = pytest.mark.skipif(MOTO is None, reason="moto[server] missing")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_environ("leaktraces") as env:
        yield env


def _comparable(doc, files: bool = True) -> str:
    d = doc.to_dict()
    d["run"].pop("bucket")
    if not files:
        d["run"].pop("tables")  # files read per table: fewer once compacted
    for r in d["run"]["rules"]:
        r.pop("duration_s")
    return json.dumps(d, sort_keys=True)


def test_same_findings_as_a_local_folder(s3, tmp_path) -> None:
    for out in (tmp_path / "local", "s3://leaktraces/fleet"):
        simulate("fast-image-processor-leak", out, hosts=1, hours=2, seed=9)
        simulate("healthy-static", out, hosts=1, hours=2, seed=9)
    packs = load_packs()
    local = analyze(tmp_path / "local", packs, now=NOW)
    remote = analyze("s3://leaktraces/fleet", packs, now=NOW)
    assert remote.findings and _comparable(remote) == _comparable(local)
    one = analyze("s3://leaktraces/fleet", packs, scope=Scope(hosts=["healthy-static-00"]), now=NOW)
    assert (
        one.run.tables["gpu_samples"] < remote.run.tables["gpu_samples"]
    )  # host pruning lists fewer files
    assert [h.host for h in one.hosts] == ["healthy-static-00"]


def test_collector_writes_and_cli_reads(s3, tmp_path) -> None:
    log = tmp_path / "s.log"
    log.write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 38.00 MiB. GPU 0 has a total capacity of 15.92 GiB of which 39.44 MiB is free.\n"
    )
    env = {**os.environ, **s3}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "collector.cli",
            "run",
            "--once",
            "--no-gpu",
            "--host",
            "edge-1",
            "--bucket",
            "s3://leaktraces/cron",
            "--log",
            str(log),
            "--state-dir",
            str(tmp_path / "st"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "leakreport",
            "analyze",
            "s3://leaktraces/cron",
            "--format",
            "json",
            "-q",
            "--fail-on",
            "never",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [f["category"] for f in doc["findings"]] == ["oom.event"]
    assert doc["run"]["tables"]["collector_runs"] == 1


def test_unreachable_store_is_a_clear_error(tmp_path) -> None:
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_REGION": "us-east-1",
    }
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "analyze", "s3://nowhere/x", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert (
        r.returncode == 2
        and "cannot open the S3 bucket" in r.stderr
        and "Traceback" not in r.stderr
    )


def test_a_mistyped_s3_bucket_or_prefix_is_named_as_missing(s3, tmp_path) -> None:
    """As a missing folder is: exit 2 naming it, for every command that takes a bucket;
    they said 'holds no trace files' (exit 3), as if an empty bucket had been found. The
    level above the trace bucket is 'not a trace bucket', as it is for a folder."""
    simulate("healthy-static", "s3://leaktraces/typo-check", hosts=1, hours=0.2, seed=3)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "leakreport", *args, "-q"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    for cmd in (["analyze"], ["compact"], ["rollup"], ["fleet", "--week", "2026-W48"]):
        for bucket, says in [
            ("s3://leaktracez/typo-check", "no such S3 bucket 'leaktracez'"),
            ("s3://leaktraces/typo-chek", "nothing is stored under this prefix"),
        ]:
            args = [*cmd[:1], bucket, *cmd[1:]]
            if cmd[0] == "fleet":
                args += ["--out", str(tmp_path / "f.html")]
            r = cli(*args)
            assert r.returncode == 2 and says in r.stderr, (cmd, bucket, r.stderr)
            assert "Traceback" not in r.stderr
    r = cli("analyze", "s3://leaktraces")
    assert r.returncode == 2 and "not a trace bucket" in r.stderr, r.stderr


def test_ctrl_c_on_an_s3_analysis_leaves_no_staged_objects(s3, tmp_path) -> None:
    """The objects staged from S3 live in temporary folders; Ctrl-C ends the run with exit
    130 and none is left behind. (The interrupt path skips the interpreter's teardown, so
    the folders that only atexit removed are now removed on that path by name.)"""
    import signal
    import time

    bucket = "s3://leaktraces/ctrl-c"
    simulate("fast-image-processor-leak", bucket, hosts=2, hours=6, seed=3)
    temp = tmp_path / "t"
    temp.mkdir()
    landed: list[int] = []
    for wait, sig in ((0.5, signal.SIGINT), (1.5, signal.SIGTERM), (3.0, signal.SIGINT), (1.0, signal.SIGTERM)):  # fmt: skip
        p = subprocess.Popen(
            [sys.executable, "-m", "leakreport", "analyze", bucket, "-v"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "TMPDIR": str(temp), "PYTHONUNBUFFERED": "1"},
        )
        time.sleep(wait)
        if p.poll() is None:
            p.send_signal(sig)
            landed.append(sig)
        err = p.communicate(timeout=120)[1].decode()
        # 130 for Ctrl-C, 143 for SIGTERM (a timeout, systemd); 1: done first, with findings
        assert p.returncode in (130 if sig == signal.SIGINT else 143, 1), err[-1500:]
        assert "Traceback" not in err
        # found by a user's pass: SIGTERM left the whole staged copy behind
        assert not list(temp.glob("leakreport-*")), err[-1500:]
    assert len(landed) >= 3 and signal.SIGTERM in landed


def _objects(prefix: str) -> list[str]:
    from pyarrow.fs import FileSelector

    from collector.store import s3_filesystem

    infos = s3_filesystem().get_file_info(FileSelector(prefix, recursive=True))
    return sorted(i.path for i in infos if i.path.endswith(".parquet"))


def test_compaction_on_s3_keeps_every_answer(s3, tmp_path, monkeypatch) -> None:
    from analyzer import compact as compact_mod

    bucket = "s3://leaktraces/compact"
    simulate("restart-masked-leak", bucket, hosts=1, hours=3, seed=4)
    packs = load_packs()
    before = _comparable(analyze(bucket, packs, now=NOW), files=False)
    n0 = len(_objects("leaktraces/compact"))
    # a crash after the new objects are written, before any original is deleted
    deleted: list[str] = []

    def crash(key, fs=None, **_k):
        deleted.append(key)
        raise OSError("simulated crash")

    monkeypatch.setattr(compact_mod, "remove", crash)
    with pytest.raises(OSError, match="simulated crash"):
        compact_mod.compact(bucket, dt.date(2027, 1, 1))
    assert deleted  # it got as far as deleting: new objects exist beside the originals
    assert _comparable(analyze(bucket, packs, now=NOW), files=False) == before  # counted once
    monkeypatch.undo()
    res = compact_mod.compact(bucket, dt.date(2027, 1, 1))
    objs = _objects("leaktraces/compact")
    assert res.files_after < n0 and len(objs) < n0
    assert all("-compact-" in o for o in objs if "/gpu_samples/" in o)
    assert _comparable(analyze(bucket, packs, now=NOW), files=False) == before
    # nothing left to do the second time
    again = compact_mod.compact(bucket, dt.date(2027, 1, 1))
    assert again.rows == 0 and len(_objects("leaktraces/compact")) == len(objs)


def test_objects_compacted_before_they_are_staged_are_read_again(s3, monkeypatch) -> None:
    """A compact between the analysis listing the bucket and copying its objects (the
    listed ones deleted): the analysis lists the bucket again and gives the same answer."""
    from analyzer import bucket as bucket_mod
    from analyzer import compact as compact_mod

    bucket = "s3://leaktraces/staged"
    simulate("fast-image-processor-leak", bucket, hosts=1, hours=3, seed=6)
    packs = load_packs()
    before = _comparable(analyze(bucket, packs, now=NOW), files=False)
    n0 = len(_objects("leaktraces/staged"))
    real, calls = bucket_mod._stage, [0]

    def compact_first(*a, **k):
        calls[0] += 1
        if calls[0] == 1:
            compact_mod.compact(bucket, dt.date(2027, 1, 1))
        return real(*a, **k)

    monkeypatch.setattr(bucket_mod, "_stage", compact_first)
    said: list[str] = []
    doc = analyze(bucket, packs, now=NOW, progress=said.append)
    assert len(_objects("leaktraces/staged")) < n0  # the compact did replace objects
    again = [s for s in said if "reading the bucket again" in s]
    assert len(again) == 1 and again[0].startswith("s3://leaktraces/staged/"), said
    assert _comparable(doc, files=False) == before


def test_dask_over_s3_matches_local(s3, tmp_path) -> None:
    from analyzer.daskpool import dask_executor
    from analyzer.fanout import analyze_fanout

    bucket = "s3://leaktraces/dask"
    for out in (tmp_path / "local", bucket):
        simulate("rank-skew", out, hosts=1, hours=2, seed=2)
        simulate("healthy-static", out, hosts=1, hours=2, seed=2)
    packs = load_packs()
    local = analyze(tmp_path / "local", packs, now=NOW)
    pool, closer = dask_executor(None, 2)
    try:
        remote = analyze_fanout(bucket, packs, pool, now=NOW)
    finally:
        closer.close()
    assert remote.findings and _comparable(remote) == _comparable(local)


def test_tier_hosts_and_bad_objects_on_s3(s3, tmp_path) -> None:
    """The layout on S3: hosts that differ only by an accent stay two hosts, an object
    that is not a trace is named and left out, and the rollup tier gives the same answer."""
    from analyzer import tier
    from collector.store import s3_filesystem
    from collector.writer import BucketWriter

    bucket = "s3://leaktraces/layout"
    simulate("fast-image-processor-leak", bucket, hosts=1, hours=30, seed=3)
    t0 = dt.datetime(2026, 11, 23, 1, tzinfo=dt.UTC)
    for host in ("gpu-nodé-1", "gpu-nodè-1"):
        rows = [{"ts": t0, "host": host, "gpu_index": 0, "memory_used_bytes": 1}]
        BucketWriter(bucket, host).write("gpu_samples", rows)
    packs = load_packs()
    before = analyze(bucket, packs, now=NOW)
    hosts = {h.host for h in before.hosts}
    assert {"gpu-nodé-1", "gpu-nodè-1"} <= hosts
    key = "leaktraces/layout/gpu_samples/date=2026-11-23/host=x/gpu_samples-junk.parquet"
    with s3_filesystem().open_output_stream(key) as f:
        f.write(b"not parquet")
    bad = analyze(bucket, packs, now=NOW)
    assert bad.run.incomplete[: len(before.run.incomplete)] == before.run.incomplete
    (line,) = bad.run.incomplete[len(before.run.incomplete) :]  # and the object, named
    assert f"s3://{key}: unreadable Parquet" in line
    assert [(f.rule_id, f.host, f.summary) for f in bad.findings] == [
        (f.rule_id, f.host, f.summary) for f in before.findings
    ]
    res = tier.build(bucket, before=dt.date(2026, 11, 24))
    assert res.built == 3 and res.skipped and "gpu_samples-junk" in res.skipped[0]
    assert res.weeks == len(tier.ALL_TIERS)  # the week files, written to S3
    assert _comparable(analyze(bucket, packs, now=NOW)) == _comparable(bad)


def test_an_s3_analysis_says_what_it_is_copying(s3) -> None:
    """Found by a user's pass: `-v` printed nothing for the first ~14 s of an S3 run while
    footers were read and objects copied."""
    bucket = "s3://leaktraces/progress"
    simulate("healthy-static", bucket, hosts=1, hours=1, seed=2)
    said: list[str] = []
    analyze(bucket, load_packs(), now=NOW, progress=said.append)
    assert said[0] == f"{bucket}: listing the trace objects in scope and reading their footers"
    assert any(
        s.startswith("gpu_samples: copying ") and s.endswith(" objects from S3") for s in said
    )
