"""The allocator probe: its sampling loop with an injected stats source, and for
real from there on: a child Python process started with the environment that
`leakcollect probe env` prints, a collector run that moves the spool into the
bucket, and the analyzer reading it."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.bucket import open_bucket
from collector.cli import cli
from collector.probe_hook import leakprobe
from collector.run import Config, collect
from collector.spool import drain

MIB = 1 << 20


class FakeStats:
    """Stands in for torch.cuda: allocated grows by 1 MiB per sample."""

    def __init__(self, devices: int = 1) -> None:
        self.n = 0
        self.devices = devices

    def __call__(self) -> list[dict[str, int | str | None]]:
        self.n += 1
        return [
            {
                "device": d,
                "gpu_uuid": f"GPU-{d}",
                "allocated": self.n * MIB,
                "reserved": 64 * MIB,
                "max_allocated": self.n * MIB,
                "alloc_retries": 0,
                "ooms": 0,
                "inactive_split": 0,
            }
            for d in range(self.devices)
        ]


def _records(spool: Path) -> list[dict[str, object]]:
    out = []
    for f in sorted(spool.glob("alloc-*")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line]
    return out


def test_sampling_writes_rotates_and_renames(tmp_path: Path) -> None:
    clock = [1000.0]
    p = leakprobe.Probe(
        str(tmp_path / "spool"), stats=FakeStats(2), rotate_s=10, clock=lambda: clock[0]
    )
    for _ in range(5):
        assert p.sample_once() == 2
        clock[0] += 4
    p.close()
    files = sorted((tmp_path / "spool").iterdir())
    assert len(files) == 2  # rotated after 10 s, both closed
    assert all(f.name.endswith(".jsonl") for f in files)
    recs = _records(tmp_path / "spool")
    assert len(recs) == 10
    assert {r["device"] for r in recs} == {0, 1}
    assert recs[0]["pid"] == os.getpid() and "gc_collections" in recs[0]
    assert [r["allocated"] for r in recs if r["device"] == 0] == [n * MIB for n in range(1, 6)]


def test_nothing_until_cuda_is_initialised(tmp_path: Path) -> None:
    p = leakprobe.Probe(str(tmp_path / "spool"), stats=lambda: None)
    assert p.sample_once() == 0
    assert not (tmp_path / "spool").exists()  # not even the folder


def test_spool_cap_drops_and_counts(tmp_path: Path) -> None:
    clock = [0.0]
    p = leakprobe.Probe(
        str(tmp_path), stats=FakeStats(), rotate_s=1, max_spool_bytes=600, clock=lambda: clock[0]
    )
    written = 0
    for _ in range(20):
        written += p.sample_once()
        clock[0] += 1
    assert 0 < written == len(_records(tmp_path)) < 20
    assert p.dropped == 20 - written  # counted, to be reported when there is room again
    size = sum(f.stat().st_size for f in tmp_path.iterdir())
    assert size < 600 + 400  # one record past
    # the process exits with the spool still full: the count went with it, unseen. Now the
    # last dropped sample is written past the cap (one line), carrying the others' count
    p.close()
    recs = _records(tmp_path)
    (last,) = [r for r in recs if "dropped" in r]
    assert len(recs) == written + 1 and last["ts"] == 19.0 == max(r["ts"] for r in recs)
    assert last["dropped"] == 20 - written - 1 and p.dropped == 0
    assert sum(f.stat().st_size for f in tmp_path.iterdir()) - size < 400
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(leakprobe.PART)]
    assert p.disabled is None


@pytest.mark.parametrize("where", ["a_file", "read_only_fs"])
def test_broken_spool_disables_with_one_warning(tmp_path: Path, where: str) -> None:
    if where == "a_file":
        spool = tmp_path / "not-a-dir"
        spool.write_text("x")
    else:
        spool = Path("/sys/leakprobe-test-spool")  # sysfs: no new folders, even for root
    warnings: list[str] = []
    p = leakprobe.Probe(str(spool), stats=FakeStats(), warn=warnings.append)
    for _ in range(3):
        assert p.sample_once() == 0
    assert p.disabled and len(warnings) == 1 and str(spool) in warnings[0]


def test_full_disk_disables_the_probe(tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        warnings: list[str] = []
        p = leakprobe.Probe(
            str(mnt), stats=FakeStats(8), max_file_bytes=1 << 30, warn=warnings.append
        )
        for _ in range(200):
            p.sample_once()
        assert p.disabled and "No space left" in p.disabled and len(warnings) == 1
        assert p.written > 0
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_failing_stats_source_never_raises(tmp_path: Path) -> None:
    def boom() -> None:
        raise RuntimeError("CUDA error: an illegal memory access")

    warnings: list[str] = []
    p = leakprobe.Probe(str(tmp_path), stats=boom, warn=warnings.append)  # type: ignore[arg-type]
    assert p.sample_once() == 0 and p.sample_once() == 0
    assert len(warnings) == 1 and "illegal memory access" in warnings[0]
    assert p.disabled is None  # a transient failure does not end the probe...
    for _ in range(leakprobe.STATS_FAILURES):
        p.sample_once()
    assert p.disabled and len(warnings) == 2  # ...a lasting one does, said once more


def test_the_probe_goes_on_after_a_transient_stats_failure(tmp_path: Path) -> None:
    """One exception from memory_stats turned the probe off for the process's life."""
    ok = FakeStats()
    calls = [0]

    def flaky() -> list[dict[str, int | str | None]]:
        calls[0] += 1
        if calls[0] == 2:
            raise RuntimeError("transient")
        return ok()

    p = leakprobe.Probe(str(tmp_path), stats=flaky, warn=lambda m: None)
    assert [p.sample_once() for _ in range(4)] == [1, 0, 1, 1]


def test_snapshot_on_trigger(tmp_path: Path) -> None:
    clock = [100.0]
    calls: list[object] = []
    p = leakprobe.Probe(
        str(tmp_path),
        stats=FakeStats(),
        snapshot_start=lambda n: calls.append(("start", n)),
        snapshot_dump=lambda path: Path(path).write_bytes(b"snapshot"),
        clock=lambda: clock[0],
    )
    p.sample_once()
    r = CliRunner().invoke(
        cli,
        [
            "probe",
            "snapshot",
            "--pid",
            str(os.getpid()),
            "--spool",
            str(tmp_path),
            "--seconds",
            "5",
        ],
    )
    assert r.exit_code == 0, r.output
    p.sample_once()
    assert calls == [("start", 100_000)]
    assert not list(tmp_path.glob("*.trigger"))
    clock[0] += 6
    p.sample_once()
    snaps = list(tmp_path.glob(f"snapshot-*-{os.getpid()}-*.pickle"))
    assert len(snaps) == 1 and snaps[0].read_bytes() == b"snapshot"


def test_the_probe_reads_its_start_as_the_process_table_does() -> None:
    """The probe's start time and the collector's for the same process are one value, so
    the analyzer can match them; a PID reused later has another."""
    from collector.procfs import ProcFS

    mine = ProcFS().start_time(os.getpid())
    assert mine is not None
    probe_says = leakprobe.Probe("unused").started
    assert probe_says is not None
    assert dt.datetime.fromtimestamp(probe_says, dt.UTC) == mine  # as the spool converts it


def test_role_hints() -> None:
    assert leakprobe.role_hint([], "sglang::scheduler_TP0") == "scheduler"
    assert leakprobe.role_hint([], "sglang::detokenizer") == "detokenizer"
    assert leakprobe.role_hint(["python3"], "VLLM::EngineCore") == "engine_core"
    assert leakprobe.role_hint(["vllm", "serve", "m"], "python3") == "server"
    assert leakprobe.role_hint(["python3", "train.py"], "python3") == "other"
    assert leakprobe.role_hint(["-m", "sglang.launch_server"], "python3") == "server"


CHILD = textwrap.dedent(
    """
    import os, sys, time
    import leakprobe  # already imported and started by sitecustomize
    probe = leakprobe._started["probe"]
    n = [0]
    def stats():  # the injected stats source (no GPU here)
        n[0] += 1
        return [{"device": 0, "gpu_uuid": None, "allocated": n[0] << 20,
                 "reserved": 64 << 20, "max_allocated": n[0] << 20,
                 "alloc_retries": 0, "ooms": 0, "inactive_split": 0}]
    probe.stats = stats
    pid = os.fork()  # a forked worker gets a probe of its own
    if pid == 0:
        leakprobe._started["probe"].stats = stats
        time.sleep(0.6)
        os._exit(0)
    time.sleep(0.6)
    os.waitpid(pid, 0)
    print(os.getpid(), pid)
    """
)


def _probe_env(spool: Path) -> dict[str, str]:
    r = CliRunner().invoke(
        cli, ["probe", "env", "--spool", str(spool), "--interval", "0.05", "--format", "env"]
    )
    assert r.exit_code == 0, r.output
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    for line in r.output.splitlines():
        k, _, v = line.partition("=")
        env[k] = v
    return env


def test_child_process_records_reach_the_bucket(tmp_path: Path) -> None:
    spool, bucket = tmp_path / "spool", tmp_path / "bucket"
    before = time.time()
    r = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=_probe_env(spool),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    parent, child = (int(x) for x in r.stdout.split())
    assert "leakprobe" not in r.stderr  # no warnings
    # the parent closed its file at exit; the forked child left by os._exit (as
    # multiprocessing children do), so its file is taken once nobody writes it
    assert [int(f.name.rsplit("-", 2)[1]) for f in spool.glob("*.jsonl")] == [parent]
    (part,) = spool.glob("*.jsonl.part")
    assert int(part.name.rsplit("-", 2)[1]) == child
    old = time.time() - 600
    os.utime(part, (old, old))
    cfg = Config(bucket=str(bucket), host="gpu-1", state_dir=tmp_path / "st", no_gpu=True)
    cfg.probe_spool = str(spool)
    assert collect(cfg, say=lambda m: None) == 0
    assert not list(spool.iterdir())  # moved, not copied
    con, counts = open_bucket(bucket)
    assert counts["allocator_samples"] == 1
    rows = con.execute(
        "SELECT pid, count(*), max(allocated_bytes) > min(allocated_bytes) "
        "FROM allocator_samples GROUP BY pid ORDER BY pid"
    ).fetchall()
    assert sorted(p for p, _, _ in rows) == sorted([parent, child])
    assert all(n >= 3 and grew for _, n, grew in rows)
    # each process's records carry its own start, as /proc gave it: the forked child's
    # is its fork, after the parent's
    starts = dict(
        con.execute(
            "SELECT pid, epoch(min(process_start)) FROM allocator_samples GROUP BY pid "
            "HAVING count(DISTINCT process_start) = 1 AND count(process_start) = count(*)"
        ).fetchall()
    )
    assert set(starts) == {parent, child}
    # /proc gives a start as boot time (whole seconds) plus clock ticks: up to a second and
    # a tick early, more where the wall clock was stepped since boot
    assert before - 2 <= starts[parent] <= starts[child] <= time.time()
    status = con.execute(
        "SELECT status, rows FROM collector_runs WHERE source = 'allocator'"
    ).fetchall()
    assert status == [("ok", sum(n for _, n, _ in rows))]


def test_child_with_a_broken_spool_runs_normally(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    bad = tmp_path / "a-file" / "spool"
    code = CHILD.replace("print(os.getpid(), pid)", "print('fine', probe.disabled is not None)")
    r = subprocess.run(
        [sys.executable, "-c", code],
        env=_probe_env(bad),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0 and r.stdout.split() == ["fine", "True"]
    assert r.stderr.count("leakprobe: disabled") >= 1


def test_sitecustomize_chains_to_the_one_it_shadows(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE'] = 'ran'\n")
    env = _probe_env(tmp_path / "spool")
    env["PYTHONPATH"] += os.pathsep + str(other)
    r = subprocess.run(
        [sys.executable, "-c", "import os, leakprobe; print(os.environ.get('OTHER_SITE'))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert r.stdout.strip() == "ran"


def test_drain_names_bad_lines_and_tolerates_a_cut_last_line(tmp_path: Path) -> None:
    good = '{"ts": 1.5, "pid": 7, "device": 0, "allocated": 5}'
    (tmp_path / "alloc-h-7-1.jsonl").write_text(f"{good}\nnot json\n{good}\n{good[:20]}")
    stale = tmp_path / "alloc-h-8-1.jsonl.part"  # its process died mid-file
    stale.write_text(good.replace('"pid": 7', '"pid": 8') + "\n")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    (tmp_path / "alloc-h-9-1.jsonl.part").write_text(good + "\n")  # still being written
    d = drain(tmp_path, "h")
    assert [r["pid"] for r in d.rows] == [7, 7, 8]
    assert d.bad_lines == 1 and d.errors == [
        f"{tmp_path / 'alloc-h-7-1.jsonl'}:2: " + d.errors[0].split(":2: ")[1]
    ]
    assert len(d.files) == 2
    gone = drain(tmp_path / "missing", "h")
    assert gone.rows == [] and gone.errors == [
        f"{tmp_path / 'missing'}: no such folder: no process has run the allocator probe "
        "with it (check --probe-spool against the servers' LEAKREPORT_PROBE_SPOOL; create "
        "the folder if no server runs the probe yet)"
    ]
    # an empty folder (made by hand, or by a probe whose records were all moved) is fine
    (tmp_path / "empty").mkdir()
    assert drain(tmp_path / "empty", "h").errors == []


def test_probe_env_is_shell_that_works(tmp_path: Path) -> None:
    if not shutil.which("sh"):
        pytest.skip("no sh")
    r = CliRunner().invoke(cli, ["probe", "env", "--spool", str(tmp_path / "sp dir")])
    script = (
        r.output
        + f'{sys.executable} -c "import leakprobe, os; print(os.environ[leakprobe.ENV_SPOOL])"\n'
    )
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(tmp_path / "sp dir")


def test_probe_thread_is_a_daemon_and_stops(tmp_path: Path) -> None:
    p = leakprobe.Probe(str(tmp_path), interval_s=0.01, stats=FakeStats())
    stop = threading.Event()
    t = threading.Thread(target=p.loop, args=(stop,), daemon=True)
    t.start()
    time.sleep(0.2)
    stop.set()
    t.join(5)
    assert not t.is_alive() and p.written > 3
    assert list(tmp_path.glob("*.jsonl")) and not list(tmp_path.glob("*.part"))


def test_snapshot_file_reaches_the_bucket_and_the_report(tmp_path: Path) -> None:
    from analyzer.packs import load_packs
    from analyzer.runner import analyze

    spool, bucket = tmp_path / "spool", tmp_path / "bucket"
    spool.mkdir()
    snap = spool / "snapshot-gpu-node-7-4321-1796000000.pickle"
    snap.write_bytes(b"\x80\x04pickled snapshot")
    written = time.time() - 50  # by the probe, a while before the collector's run
    os.utime(snap, (written, written))
    cfg = Config(bucket=str(bucket), host="gpu-node-7", state_dir=tmp_path / "st", no_gpu=True)
    cfg.probe_spool = str(spool)
    assert collect(cfg, say=lambda m: None) == 0
    (copied,) = bucket.glob("snapshots/date=*/host=gpu-node-7/*.pickle")
    assert copied.read_bytes() == b"\x80\x04pickled snapshot" and not snap.exists()
    doc = analyze(bucket, load_packs())
    (event,) = [e for e in doc.events if e.kind == "memory_snapshot"]
    assert "pid 4321" in event.text and str(copied) in event.text and "memory_viz" in event.text
    when = dt.datetime.fromisoformat(event.ts.replace("Z", "+00:00")).timestamp()
    assert abs(when - written) < 1.5, (event.ts, written)  # the probe's time, not the copy's


@pytest.mark.parametrize("refused", ["allocator_samples", "allocator_snapshots"])
def test_a_refused_allocator_table_keeps_only_its_own_files_in_the_spool(
    tmp_path: Path, refused: str
) -> None:
    """The bucket refuses one of the two allocator tables (a file where its folder goes):
    that table's spool files wait and arrive next run; the other table's, written, leave
    the spool, so nothing is written twice (allocator_snapshots has no key to dedupe by)."""
    import json

    from analyzer.bucket import open_bucket

    spool, bucket = tmp_path / "spool", tmp_path / "bucket"
    spool.mkdir()
    bucket.mkdir()
    (spool / "snapshot-gpu-node-7-4321-1796000000.pickle").write_bytes(b"\x80\x04snap")
    rec = {"ts": time.time(), "pid": 4321, "device": 0, "allocated": 1 << 30, "reserved": 2 << 30}
    (spool / "alloc-gpu-node-7-4321-1.jsonl").write_text(json.dumps(rec) + "\n")
    (bucket / refused).write_text("")
    cfg = Config(bucket=str(bucket), host="gpu-node-7", state_dir=tmp_path / "st", no_gpu=True)
    cfg.probe_spool = str(spool)
    assert collect(cfg, say=lambda m: None) == 1
    (bucket / refused).unlink()
    assert collect(cfg, say=lambda m: None) == 0
    assert not list(spool.iterdir())
    con, counts = open_bucket(bucket)
    for table in ("allocator_snapshots", "allocator_samples"):
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone() == (1,), table
    assert len(list(bucket.glob("snapshots/*/*/*.pickle"))) == 1


FORKS = textwrap.dedent(
    """
    import os, threading
    import leakprobe  # started by sitecustomize
    for level in range(4):
        print(level, sum(t.name == "leakprobe" for t in threading.enumerate()), flush=True)
        if level == 3:
            break
        pid = os.fork()
        if pid:
            os.waitpid(pid, 0)
            break
    """
)


def test_each_fork_generation_has_one_probe_thread(tmp_path: Path) -> None:
    """start() in a child registered the fork hook again, so threads doubled with each
    generation (1, 1, 2, 4), and the extra ones wrote the same records again."""
    r = subprocess.run(
        [sys.executable, "-c", FORKS],
        env=_probe_env(tmp_path / "spool"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = sorted(tuple(int(x) for x in line.split()) for line in r.stdout.splitlines())
    assert got == [(0, 1), (1, 1), (2, 1), (3, 1)], r.stdout + r.stderr


def test_two_copies_of_the_hook_chain_to_the_servers_own_once(tmp_path: Path) -> None:
    """An old install's hook folder also on PYTHONPATH: each copy ran the other until
    RecursionError, and the server's own sitecustomize never ran."""
    from collector.probecli import HOOK_DIR

    old = tmp_path / "old-hook"
    shutil.copytree(HOOK_DIR, old)
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import sys\nsys.stderr.write('OWN ran\\n')\n")
    env = _probe_env(tmp_path / "spool")
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(old), str(own)])
    r = subprocess.run(
        [sys.executable, "-c", "pass"], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and r.stderr.count("OWN ran") == 1, r.stderr
    assert "Recursion" not in r.stderr


def test_dropped_records_are_counted_once_not_per_device(tmp_path: Path) -> None:
    clock = [0.0]
    p = leakprobe.Probe(
        str(tmp_path), stats=FakeStats(4), rotate_s=1, max_spool_bytes=1500, clock=lambda: clock[0]
    )
    for _ in range(10):
        p.sample_once()
        clock[0] += 1
    dropped = p.dropped
    assert dropped > 0
    for f in list(tmp_path.iterdir()):  # the collector drains the spool: room again
        f.unlink()
    p.sample_once()
    recs = _records(tmp_path)
    assert len(recs) == 4 and sum(int(r.get("dropped", 0)) for r in recs) == dropped


def test_a_file_drained_while_the_process_was_paused_is_not_written_on(tmp_path: Path) -> None:
    """A server stopped past the collector's stale_s (SIGSTOP, docker pause): its .part
    was drained and removed, and the probe went on writing to the removed file."""
    p = leakprobe.Probe(str(tmp_path), stats=FakeStats(), rotate_s=3600)
    p.sample_once()
    (part,) = tmp_path.glob("*.jsonl.part")
    part.unlink()  # what the collector does with a stale .part once it is in the bucket
    p.sample_once()
    p.sample_once()
    p.close()
    recs = _records(tmp_path)
    assert [r["allocated"] for r in recs] == [2 * MIB, 3 * MIB]


def test_a_bad_snapshot_request_is_said_once(tmp_path: Path) -> None:
    """A trigger the server cannot read (made 0600 by another user under umask 077) was
    warned about at every sample, for as long as it stayed."""
    said: list[str] = []
    p = leakprobe.Probe(str(tmp_path), stats=FakeStats(), warn=said.append)
    p.sample_once()
    (tmp_path / f"snapshot-{os.getpid()}.trigger").mkdir()  # unreadable, and not unlinkable
    for _ in range(5):
        p.sample_once()
    assert len(said) == 1 and "request ignored" in said[0], said
    bad = tmp_path / f"snapshot-{os.getpid()}.trigger"
    bad.rmdir()
    bad.write_text("{not json")
    p.sample_once()
    assert len(said) == 2 and not bad.exists()  # a new request is said again, and removed


def test_the_snapshot_request_is_readable_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        r = CliRunner().invoke(
            cli, ["probe", "snapshot", "--pid", str(os.getpid()), "--spool", str(tmp_path)]
        )
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    assert (tmp_path / f"snapshot-{os.getpid()}.trigger").stat().st_mode & 0o777 == 0o644


def test_a_part_renamed_during_a_drain_is_not_a_failure(tmp_path: Path, monkeypatch) -> None:
    good = '{"ts": 1.5, "pid": 7, "device": 0, "allocated": 5}'
    (tmp_path / "alloc-h-7-1.jsonl").write_text(good + "\n")
    ghost = tmp_path / "alloc-h-8-1.jsonl.part"  # listed, then renamed by its probe
    listed = [*tmp_path.iterdir(), ghost]
    monkeypatch.setattr(Path, "iterdir", lambda self: iter(listed))
    out = drain(tmp_path, "h", stale_s=0)
    assert not out.errors and len(out.rows) == 1


def test_the_role_of_a_module_launch_is_read_from_its_command_line(tmp_path: Path) -> None:
    """At sitecustomize time sys.argv of ``python -m launch_server`` is ['-m']: the role
    came out "other" for the README's own launch command."""
    (tmp_path / "launch_server.py").write_text(
        textwrap.dedent(
            """
            import time, leakprobe
            leakprobe._started["probe"].stats = lambda: [{"device": 0, "allocated": 1}]
            time.sleep(0.5)
            """
        )
    )
    spool = tmp_path / "spool"
    r = subprocess.run(
        [sys.executable, "-m", "launch_server"],
        env=_probe_env(spool),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    roles = {rec["role"] for rec in _records(spool)}
    assert roles == {"server"}, roles


def test_container_pids_become_the_hosts(tmp_path: Path) -> None:
    """A probe in a container knows its process as, say, PID 7; NVML and /proc name it
    4242. The drain gives it the host's PID by the namespace the probe recorded, and
    remembers it (with the process's start) for the rows drained after it ended; where
    neither tells, the row keeps pid_ns, which the analysis reports."""
    from collector.spool import host_pids

    tick = os.sysconf("SC_CLK_TCK")
    root = tmp_path / "proc"
    (root / "self" / "ns").mkdir(parents=True)
    (root / "self" / "ns" / "pid").write_text("")  # a file's inode stands for a namespace
    (root / "stat").write_text("cpu 1 2 3\nbtime 1796000000\n")

    def process(host_pid: int, inner: int, ticks: int) -> int:
        d = root / str(host_pid)
        (d / "ns").mkdir(parents=True, exist_ok=True)
        if not (d / "ns" / "pid").exists():
            (d / "ns" / "pid").write_text("")
        (d / "status").write_text(f"Name:\tpython3\nNSpid:\t{host_pid}\t{inner}\n")
        (d / "stat").write_text(f"{host_pid} (python3) " + " ".join(["S", *["0"] * 18, str(ticks)]))
        return (d / "ns" / "pid").stat().st_ino

    box = process(4242, 7, 100 * tick)
    (root / "99" / "ns").mkdir(parents=True)  # a process of ours: no NSpid chain
    own = (root / "self" / "ns" / "pid").stat().st_ino
    started = dt.datetime.fromtimestamp(1796000000 + 100, dt.UTC)
    rows = [
        {"pid": 7, "pid_ns": box, "process_start": started},  # the container's: mapped
        {"pid": 99, "pid_ns": own, "process_start": None},  # the collector's own namespace
        {"pid": 8, "pid_ns": box, "process_start": started},  # ended before the drain
        {"pid": 5, "pid_ns": None, "process_start": None},  # an older probe: as it was
    ]
    known: dict[str, int] = {}  # kept by the collector in its state folder
    host_pids(rows, root, known)
    assert [(r["pid"], r["pid_ns"]) for r in rows] == [
        (4242, None),
        (99, None),
        (8, box),
        (5, None),
    ]
    # the process ends; its last file is drained after: it is still the host's 4242
    shutil.rmtree(root / "4242")
    last = [{"pid": 7, "pid_ns": box, "process_start": started}]
    host_pids(last, root, known)
    assert (last[0]["pid"], last[0]["pid_ns"]) == (4242, None)
    # the namespace's inode and the inner PID are handed out again, to a later process:
    # /proc says so (its start differs), and the old process's late rows keep 4242
    again = process(500, 7, 900 * tick)  # (a fake inode: the start tells them apart)
    newer = dt.datetime.fromtimestamp(1796000000 + 900, dt.UTC)
    late = [
        {"pid": 7, "pid_ns": again, "process_start": started},
        {"pid": 7, "pid_ns": again, "process_start": newer},
    ]
    host_pids(
        late, root, {**known, **{k.replace(str(box), str(again)): v for k, v in known.items()}}
    )
    assert [r["pid"] for r in late] == [4242, 500]
    # without a start, nothing is remembered: a key could be another process's later
    blind = [{"pid": 7, "pid_ns": again, "process_start": None}]
    mem: dict[str, int] = {}
    host_pids(blind, root, mem)
    assert blind[0]["pid"] == 500 and mem == {}


def test_a_snapshot_of_a_container_process_gets_the_hosts_pid(tmp_path: Path) -> None:
    """A snapshot named with the probe's namespace: mapped while its process lives (/proc),
    and after it ended by the map its records left; an older probe's name (no namespace)
    keeps its PID. The real namespace test needs root; this one does not."""
    from collector.spool import drain

    root = tmp_path / "proc"
    (root / "self" / "ns").mkdir(parents=True)
    (root / "self" / "ns" / "pid").write_text("")
    d = root / "4242"
    (d / "ns").mkdir(parents=True)
    (d / "ns" / "pid").write_text("")
    (d / "status").write_text("Name:\tpython3\nNSpid:\t4242\t7\n")
    box = (d / "ns" / "pid").stat().st_ino
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / f"snapshot-gpu-1-7-1796000000.ns{box}.pickle").write_bytes(b"x")
    (spool / "snapshot-gpu-1-9-1796000001.pickle").write_bytes(b"x")
    got = drain(spool, "gpu-1", proc_root=root, pids={})
    assert got.snapshot_pids == {
        f"snapshot-gpu-1-7-1796000000.ns{box}.pickle": 4242,
        "snapshot-gpu-1-9-1796000001.pickle": 9,
    }
    shutil.rmtree(d)  # ended: its records' map (the collector keeps it) still tells
    got = drain(spool, "gpu-1", proc_root=root, pids={f"{box}/7/1796000100.0": 4242})
    assert got.snapshot_pids[f"snapshot-gpu-1-7-1796000000.ns{box}.pickle"] == 4242
    got = drain(spool, "gpu-1", proc_root=root, pids={})  # nothing tells: its own PID
    assert got.snapshot_pids[f"snapshot-gpu-1-7-1796000000.ns{box}.pickle"] == 7


BOXED = textwrap.dedent(
    """
    import signal, sys, time, leakprobe
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # its last file closed at exit
    probe = leakprobe._started["probe"]
    probe.rotate_s = 0.2  # closed files, for the drain
    probe.stats = lambda: [{"device": 0, "allocated": 1 << 20}]
    probe.snapshot_start = lambda n: None  # no torch here: a snapshot is a few bytes
    probe.snapshot_dump = lambda path: open(path, "wb").write(b"snapshot")
    print("ready", flush=True)
    time.sleep(float(sys.argv[1]))
    """
)


def test_a_server_in_its_own_pid_namespace_is_matched_to_its_host_pid(tmp_path: Path) -> None:
    """In a container (its own PID namespace, as Docker and Kubernetes give by default)
    the probe recorded PID 1, which no NVML process has: AP003 came out clean, exit 0."""
    box_ok = shutil.which("unshare") is not None and os.geteuid() == 0
    if box_ok:  # a container without CAP_SYS_ADMIN refuses it even to root
        try_box = ["unshare", "--pid", "--fork", "--mount-proc", "true"]
        box_ok = subprocess.run(try_box, capture_output=True, timeout=30).returncode == 0
    if not box_ok:
        pytest.skip("unshare --pid needs root (with CAP_SYS_ADMIN) and util-linux")
    spool, bucket = tmp_path / "spool", tmp_path / "bucket"
    marker = str(tmp_path / "boxed.py")
    Path(marker).write_text(BOXED)
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, marker, "30"]
    box = subprocess.Popen(cmd, env=_probe_env(spool), stdout=subprocess.PIPE, text=True)
    try:
        assert box.stdout is not None and box.stdout.readline().strip() == "ready"
        host_pid = next(
            int(d.name)
            for d in Path("/proc").iterdir()
            if d.name.isdigit()
            and d.name != str(box.pid)
            and marker.encode() in (d / "cmdline").read_bytes()
        )
        deadline = time.time() + 20
        while not list(spool.glob("*.jsonl")) and time.time() < deadline:
            time.sleep(0.1)
        cfg = Config(bucket=str(bucket), host="gpu-1", state_dir=tmp_path / "st", no_gpu=True)
        cfg.probe_spool = str(spool)
        assert collect(cfg, say=lambda m: None) == 0
        ns = os.stat(f"/proc/{host_pid}/ns/pid").st_ino
        r = CliRunner().invoke(
            cli,
            ["probe", "snapshot", "--pid", str(host_pid), "--spool", str(spool), "--seconds", "1"],
        )
        assert r.exit_code == 0, r.output
        assert (spool / f"snapshot-{ns}-1.trigger").exists()  # the name its probe looks for
        deadline = time.time() + 20
        while not list(spool.glob("snapshot-*.pickle")) and time.time() < deadline:
            time.sleep(0.1)
        (snap,) = spool.glob("snapshot-*.pickle")
        assert snap.name.endswith(f"-1-{snap.name.split('-')[-1].split('.')[0]}.ns{ns}.pickle")
        time.sleep(0.5)  # more records, in a file closed only when the process ends
        os.kill(host_pid, signal.SIGTERM)
        box.wait(timeout=20)
        assert list(spool.glob("*.jsonl"))  # drained after the process ended
        assert collect(cfg, say=lambda m: None) == 0
    finally:
        box.kill()
        box.wait()
    con, _ = open_bucket(bucket)
    got = con.execute("SELECT DISTINCT pid, pid_ns FROM allocator_samples").fetchall()
    assert got == [(host_pid, None)], (got, host_pid)
    # the snapshot's row names the host's PID too (it named the container's, 1)
    assert con.execute("SELECT pid FROM allocator_snapshots").fetchall() == [(host_pid,)]
    r = CliRunner().invoke(cli, ["probe", "snapshot", "--pid", "999999999", "--spool", str(spool)])
    assert r.exit_code == 2 and "no process 999999999" in r.output


def test_unmatched_container_pids_leave_the_analysis_incomplete(tmp_path: Path) -> None:
    from analyzer.packs import load_packs
    from analyzer.ruletest import generate_gpu
    from analyzer.runner import analyze
    from collector.writer import BucketWriter

    data = generate_gpu({"cycles": 2, "alloc_mib": 500.0})
    w = BucketWriter(tmp_path, "gpu-1")
    for table, rows in data.items():
        w.write(table, rows)
    doc = analyze(tmp_path, load_packs())
    assert not [r for r in doc.run.incomplete if "container" in r]
    # two containers, each with its server as PID 1: two processes
    alloc = [
        {**r, "pid": 1, "pid_ns": 4026532999 + (i % 2)}
        for i, r in enumerate(data["allocator_samples"])
    ]
    assert alloc
    other = tmp_path.parent / "boxed"
    w = BucketWriter(other, "gpu-1")
    for table, rows in {**data, "allocator_samples": alloc}.items():
        w.write(table, rows)
    doc = analyze(other, load_packs())
    (said,) = [r for r in doc.run.incomplete if "container" in r]
    assert said.startswith("host gpu-1: the allocator probe's records of 2 processes carry"), said


def test_records_dropped_for_a_full_spool_are_a_gap_in_the_analysis(tmp_path: Path) -> None:
    """The probe counted what it dropped, and nothing read the count: the allocator's
    series had a hole that no page or document mentioned."""
    from analyzer.packs import load_packs
    from analyzer.ruletest import generate_gpu
    from analyzer.runner import analyze
    from collector.writer import BucketWriter

    data = generate_gpu({"cycles": 2, "alloc_mib": 500.0})
    alloc = data["allocator_samples"]
    alloc[3] = {**alloc[3], "dropped": 1120}
    w = BucketWriter(tmp_path, "gpu-1")
    for table, rows in data.items():
        w.write(table, rows)
    doc = analyze(tmp_path, load_packs())
    said = [g for g in doc.run.gaps if "dropped" in g]
    assert said == [
        "gpu-1: the allocator probe dropped 1120 records of 1 process while its spool was "
        "full (is `leakcollect run --probe-spool` moving it into the bucket?)"
    ], doc.run.gaps


def test_torch_stats_reports_the_devices_the_process_uses(monkeypatch) -> None:
    """A rank on GPU 2: the probe thread's current_device() is 0 (it is per thread), so
    every rank also wrote device-0 rows of zeros. Now a device is reported once the process
    holds memory there, and from then on (emptied by empty_cache, it still reads 0)."""
    import types

    reserved = {0: 0, 1: 0, 2: 64 * MIB, 3: 0}
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        device_count=lambda: 4,
        current_device=lambda: 0,
        memory_reserved=lambda d: reserved[d],
        memory_allocated=lambda d: reserved[d] // 2,
        max_memory_allocated=lambda d: reserved[d],
        memory_stats=lambda d: {},
        get_device_properties=lambda d: types.SimpleNamespace(uuid=f"u{d}"),
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(leakprobe, "_USED", set())
    assert [d["device"] for d in leakprobe.torch_stats() or []] == [2]
    reserved[2] = 0
    got = leakprobe.torch_stats() or []
    assert [(d["device"], d["reserved"]) for d in got] == [(2, 0)]


def test_drops_an_older_probe_wrote_on_every_device_are_counted_once(tmp_path: Path) -> None:
    """Before the count went on one record, the probe wrote it on each device's record of
    the sample: 12 dropped on a 4-GPU process read as 48."""
    from analyzer.packs import load_packs
    from analyzer.ruletest import generate_gpu
    from analyzer.runner import analyze
    from collector.writer import BucketWriter

    w = BucketWriter(tmp_path, "gpu-1")
    for gpu in range(4):
        data = generate_gpu({"cycles": 2, "alloc_mib": 500.0, "gpu": gpu})
        alloc = data.pop("allocator_samples")
        alloc = [
            {**r, "device": gpu, "dropped": 12 if i == 3 else None} for i, r in enumerate(alloc)
        ]
        for table, rows in {**data, "allocator_samples": alloc}.items():
            w.write(table, rows)
    doc = analyze(tmp_path, load_packs())
    (said,) = [g for g in doc.run.gaps if "dropped" in g]
    assert "dropped 12 records of 1 process" in said, said
