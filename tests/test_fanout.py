"""Per-host fan-out gives the same document as one connection."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from analyzer.bucket import Scope
from analyzer.fanout import analyze_fanout, analyze_local, list_hosts
from analyzer.packs import load_packs
from analyzer.progress import plural
from analyzer.runner import analyze

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _comparable(doc) -> dict:
    d = json.loads(doc.to_json())
    d["run"].pop("bucket")
    for r in d["run"]["rules"]:
        r.pop("duration_s")
    return d


def test_thread_fanout_is_identical(sim_bucket) -> None:
    packs = load_packs()
    local = analyze(sim_bucket[0], packs, now=NOW)
    with ThreadPoolExecutor(2) as ex:
        fanned = analyze_fanout(sim_bucket[0], packs, ex, now=NOW, hosts_per_task=3)
    assert _comparable(fanned) == _comparable(local)
    assert [f.rule_id for f in fanned.findings] == [f.rule_id for f in local.findings]


def test_local_batches_are_identical_and_say_so(sim_bucket) -> None:
    packs = load_packs()
    one = analyze(sim_bucket[0], packs, now=NOW)
    said: list[str] = []
    batched = analyze_local(sim_bucket[0], packs, now=NOW, batch_hosts=4, progress=said.append)
    assert _comparable(batched) == _comparable(one)
    n = -(-len(one.hosts) // 4)
    assert f"in {n} batches of " in said[0] and " hosts (--batch-hosts 4: " in said[0]
    # each batch, as it ends: what its analysis said (not its rule-by-rule steps), then done
    done = [i for i, line in enumerate(said) if line.startswith("batch ") and " done (" in line]
    assert [said[i] for i in done] == [
        f"batch {b}/{n} done ({plural(min(4, len(one.hosts) - 4 * (b - 1)), 'host')})"
        for b in range(1, n + 1)
    ]
    for b, (lo, hi) in enumerate(zip([0, *done], done, strict=False), 1):
        own = said[lo + 1 : hi]
        assert own and all(line.startswith(f"batch {b}/{n}: ") for line in own), own
        assert any("rollups built in" in line for line in own)
        assert not any(": rules " in line for line in own)


def test_a_failing_batch_stops_the_run(sim_bucket, monkeypatch) -> None:
    from analyzer import fanout

    calls: list[object] = []

    def boom(*a, **kw):
        calls.append(a)
        raise RuntimeError("disk full")

    monkeypatch.setattr(fanout, "_task", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        analyze_local(sim_bucket[0], load_packs(), now=NOW, batch_hosts=2)
    assert len(calls) == 1  # the later batches never ran


def test_a_task_lost_on_a_cluster_names_its_hosts_and_keeps_the_rest(sim_bucket) -> None:
    """A worker dies (out of memory, a node lost): that task's hosts are not analysed,
    said in run.incomplete (exit 3); the other tasks' findings stand."""
    from concurrent.futures import Future

    packs = load_packs()
    hosts = list_hosts(sim_bucket[0], Scope())
    doomed = hosts[0]

    class Flaky(ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            if doomed in args[2].hosts:
                f: Future = Future()
                f.set_exception(RuntimeError("Attempted to run task on a killed worker"))
                return f
            return super().submit(fn, *args, **kwargs)

    said: list[str] = []
    with Flaky(2) as ex:
        doc = analyze_fanout(
            sim_bucket[0], packs, ex, now=NOW, hosts_per_task=3, progress=said.append
        )
    (why,) = [r for r in doc.run.incomplete if "not analysed" in r]
    lost = set(why.split(": ", 1)[0].removeprefix("hosts ").split(", "))
    assert doomed in lost and len(lost) == 3 and "killed worker" in why
    assert {h.host for h in doc.hosts} == set(hosts) - lost
    assert any("failed: RuntimeError" in line for line in said)


def test_dask_missing_is_a_usage_error_naming_the_extra(monkeypatch) -> None:
    import builtins

    from analyzer.daskpool import dask_executor

    real = builtins.__import__

    def no_distributed(name, *a, **kw):  # type: ignore[no-untyped-def]
        if name == "distributed":
            raise ImportError("No module named 'distributed'")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_distributed)
    with pytest.raises(ValueError, match=r"leakreport\[dask\]"):
        dask_executor()


def test_list_hosts_respects_scope(sim_bucket) -> None:
    all_hosts = list_hosts(sim_bucket[0], Scope())
    assert "healthy-static-00" in all_hosts and len(all_hosts) == len(sim_bucket[1]["hosts"])
    assert list_hosts(sim_bucket[0], Scope(hosts=["rank-skew-00"])) == ["rank-skew-00"]
    assert list_hosts(sim_bucket[0], Scope(since=dt.date(2030, 1, 1))) == []


def test_dask_and_batches_via_cli(sim_bucket) -> None:
    pytest.importorskip("distributed")
    args = [
        sys.executable,
        "-m",
        "leakreport",
        "analyze",
        str(sim_bucket[0]),
        "--format",
        "json",
        "--fail-on",
        "never",
    ]
    local = subprocess.run([*args, "-q"], capture_output=True, text=True, timeout=300)
    dask = subprocess.run(
        [*args, "--executor", "dask", "--workers", "2"], capture_output=True, text=True, timeout=300
    )
    assert dask.returncode == 0, dask.stderr[-3000:]
    assert "fanning out per host on Dask" in dask.stderr
    batched = subprocess.run(
        [*args, "--batch-hosts", "5", "--memory-limit", "600MB"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert batched.returncode == 0, batched.stderr[-3000:]
    assert "hosts (--batch-hosts 5: a batch holds at most 5 hosts' weeks" in batched.stderr
    assert "memory: --memory-limit 600MB per process" in batched.stderr  # said once, up front
    a, b, c = json.loads(local.stdout), json.loads(dask.stdout), json.loads(batched.stdout)
    for d in (a, b, c):
        d["run"].pop("generated_at")
        for r in d["run"]["rules"]:
            r.pop("duration_s")
    assert a == b == c


def test_fanout_sees_hosts_that_stopped_reporting(tmp_path) -> None:
    from simulator.generate import simulate

    simulate("healthy-static", tmp_path, hosts=1, hours=1, seed=1)
    simulate("cache-warmup", tmp_path, hosts=1, hours=0.5, seed=1)
    packs = load_packs()
    local = analyze(tmp_path, packs, now=NOW)
    with ThreadPoolExecutor(2) as ex:
        fanned = analyze_fanout(tmp_path, packs, ex, now=NOW)
    assert local.run.gaps and fanned.run.gaps == local.run.gaps


def test_a_worker_that_sees_no_bucket_or_runs_another_version_is_said(sim_bucket, tmp_path) -> None:
    """Found by a user's pass on a real cluster: a worker whose bucket path held an empty
    folder (a share not mounted there) dropped its hosts, and a worker on another version
    changed the findings, both with nothing incomplete; a relative bucket path was read
    in each worker's own working folder."""
    packs = load_packs()
    hosts = list_hosts(sim_bucket[0], Scope())
    blind, old = hosts[0], hosts[1]
    (tmp_path / "empty").mkdir()
    paths: list[str] = []

    def elsewhere(fn, bucket, *rest):  # type: ignore[no-untyped-def]
        paths.append(bucket)
        if blind in rest[1].hosts:
            bucket = str(tmp_path / "empty")  # what that worker finds at the path
        out = fn(bucket, *rest)
        if old in rest[1].hosts:
            out["doc"]["run"]["analyzer_version"] = "0.0.9"
        return out

    class Cluster(ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            return super().submit(elsewhere, fn, *args, **kwargs)

    with Cluster(2) as ex:
        doc = analyze_fanout(sim_bucket[0], packs, ex, now=NOW)
    assert f"host {blind}: not analysed: its task found no file of it" in " ".join(
        doc.run.incomplete
    )
    assert any(
        r.startswith(f"hosts {old}: analysed by leakreport 0.0.9") for r in doc.run.incomplete
    )
    assert blind not in {h.host for h in doc.hosts}
    assert all(p == str(sim_bucket[0].resolve()) for p in paths)


def test_a_cluster_without_workers_ends_the_wait(sim_bucket, monkeypatch) -> None:
    """Found by a user's pass: with every worker gone (killed, or unable to load this
    package) the analysis waited for ever, saying nothing."""
    from concurrent.futures import Executor, Future

    from analyzer import daskpool

    monkeypatch.setattr(daskpool, "NO_WORKERS_S", 0.2)

    class Deserted(Executor):
        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            return Future()  # never runs

        def alive(self) -> bool:
            return False

    with pytest.raises(RuntimeError, match="no worker for 0 s"):
        analyze_fanout(sim_bucket[0], load_packs(), Deserted(), now=NOW)


def test_a_scheduler_address_that_is_no_scheduler_is_an_error(tmp_path) -> None:
    """An HTTP server where the scheduler should be (its dashboard's port): a clear error,
    not a wait for ever."""
    pytest.importorskip("distributed")
    import http.server
    import threading

    from analyzer.daskpool import dask_executor

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *_a: object) -> None:  # the handshake it refuses: no noise
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ValueError, match="no Dask scheduler answered there"):
            dask_executor(f"tcp://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()


def test_a_scheduler_without_the_dask_executor_is_a_usage_error(sim_bucket) -> None:
    """Found by a user's pass: --scheduler without --executor dask was passed over, and the
    run went local without a word."""
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "analyze", str(sim_bucket[0]), "--scheduler",
         "tcp://127.0.0.1:8786"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 2 and "is for --executor dask" in r.stderr, r.stderr
