"""``leakcollect probe``: enable the allocator probe in a server, ask it for a snapshot."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import click

from collector import exitcodes
from collector.atomic import write_atomic
from collector.probe_hook import leakprobe
from collector.procfs import ProcFS

HOOK_DIR = Path(leakprobe.__file__).resolve().parent
DEFAULT_SPOOL = "/var/tmp/leakreport-probe"


@click.group()
def probe() -> None:
    """The PyTorch allocator probe that runs inside the server's processes.

    \b
    Examples:
      eval "$(leakcollect probe env --spool /var/tmp/leakreport-probe)"
      leakcollect probe snapshot --pid 4242 --seconds 30
    """


@probe.command("env")
@click.option(
    "--spool",
    default=DEFAULT_SPOOL,
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder the probe writes to (give the same to `leakcollect run --probe-spool`).",
)
@click.option(
    "--interval",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0.05, 3600),
    help="Seconds between the probe's records.",
)
@click.option(
    "--max-mb",
    default=64,
    show_default=True,
    type=click.IntRange(1, 1 << 20),
    help="Most MiB the spool may hold; records past it are dropped and counted.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["shell", "env"]),
    default="shell",
    show_default=True,
    help="shell: export lines to eval or source; env: KEY=VALUE lines "
    "(systemd EnvironmentFile=, docker --env-file).",
)
def env(spool: str, interval: float, max_mb: int, fmt: str) -> None:
    """Print the environment that loads the probe into every Python process of a server.

    \b
    Example:
    eval "$(leakcollect probe env)"   # then start the server in this shell
    python -m sglang.launch_server ...

    The probe needs no package but the standard library, idles until torch has
    initialised CUDA, then writes a few hundred bytes per device every --interval
    seconds into --spool (at most --max-mb in all).
    """
    path = str(HOOK_DIR)
    values = {
        leakprobe.ENV_SPOOL: str(Path(spool).absolute()),
        leakprobe.ENV_INTERVAL: f"{interval:g}",
        leakprobe.ENV_MAX_MB: str(max_mb),
    }
    if fmt == "shell":
        click.echo(f"export PYTHONPATH={shlex.quote(path)}${{PYTHONPATH:+:$PYTHONPATH}}")
        for k, v in values.items():
            click.echo(f"export {k}={shlex.quote(v)}")
    else:
        old = os.environ.get("PYTHONPATH")
        click.echo(f"PYTHONPATH={path}{':' + old if old else ''}")
        for k, v in values.items():
            click.echo(f"{k}={v}")


@probe.command("snapshot")
@click.option("--pid", required=True, type=click.IntRange(1), help="The server process.")
@click.option(
    "--spool",
    default=DEFAULT_SPOOL,
    show_default=True,
    type=click.Path(file_okay=False),
    help="The probe's spool folder (as given to `probe env`).",
)
@click.option(
    "--seconds",
    default=30.0,
    show_default=True,
    type=click.FloatRange(1, 3600),
    help="How long to record allocation history before writing the snapshot.",
)
@click.option(
    "--max-entries",
    default=100_000,
    show_default=True,
    type=click.IntRange(1000),
    help="Most allocation-history entries the snapshot keeps.",
)
@click.option("--wait", is_flag=True, help="Wait until the snapshot file is there.")
def snapshot(pid: int, spool: str, seconds: float, max_entries: int, wait: bool) -> None:
    """Ask the probe in process PID for a PyTorch memory snapshot.

    The probe records allocation history for --seconds, then writes
    snapshot-<host>-<pid>-<time>[.ns<pidns>].pickle into the spool folder; the next
    `leakcollect run --probe-spool` moves it into the bucket. Open it at
    https://pytorch.org/memory_viz.

    \b
    Example:
      leakcollect probe snapshot --pid 12345 --seconds 30 --wait
    """
    folder = Path(spool)
    if not folder.is_dir():
        click.echo(f"leakcollect: {folder}: no spool folder (is the probe enabled?)", err=True)
        sys.exit(exitcodes.NOTHING)
    if not Path("/proc", str(pid)).is_dir():
        click.echo(f"leakcollect: no process {pid} here", err=True)
        sys.exit(exitcodes.NOTHING)
    try:
        ns, inner = _in_its_namespace(pid)
    except OSError as e:  # in a container, and its namespace not ours to read
        click.echo(f"leakcollect: pid {pid} is in a container: {e} (run as root)", err=True)
        sys.exit(exitcodes.NOTHING)
    trigger = folder / (
        f"snapshot-{pid}.trigger" if ns is None else f"snapshot-{ns}-{inner}.trigger"
    )
    asked = time.time()
    try:
        req = json.dumps({"seconds": seconds, "max_entries": max_entries})
        write_atomic(trigger, req, mode=0o644)  # the server may be another user; umask 077
    except OSError as e:
        click.echo(f"leakcollect: cannot write {trigger}: {e}", err=True)
        sys.exit(exitcodes.NOTHING)
    click.echo(f"requested a {seconds:g} s memory snapshot from pid {pid} ({trigger})")
    if not wait:
        return
    deadline = time.monotonic() + seconds + 120
    while time.monotonic() < deadline:
        done = [
            f
            for f in sorted(folder.glob(f"snapshot-*-{inner}-*.pickle"))
            if f.stat().st_mtime >= asked - 1
        ]
        if done and not trigger.exists():
            click.echo(str(done[-1]))
            return
        time.sleep(0.5)
    click.echo(f"leakcollect: no snapshot from pid {pid} (is its probe running?)", err=True)
    sys.exit(exitcodes.PARTIAL)


def _in_its_namespace(pid: int) -> tuple[int | None, int]:
    """(PID namespace, PID in it) of a process in a container (whose probe knows only the
    inner PID), else (None, pid). OSError: in a container, but its namespace unreadable."""
    proc = ProcFS()
    try:
        nspid = proc.nspid(pid)
    except OSError:
        return None, pid
    if len(nspid) < 2:
        return None, pid
    return proc.pid_namespace(pid), nspid[-1]
