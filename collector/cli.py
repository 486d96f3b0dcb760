"""``leakcollect``: the cron collector and the importers. A thin click layer.

Exit codes: 0 every source written, 1 some sources failed (recorded in
collector_runs), 2 nothing written (usage, lock held, bucket unwritable).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from collector import __version__, exitcodes
from collector.cli_import import import_
from collector.clikit import verbosity_level, verbosity_options
from collector.collectopts import absolute, collect_options, run_args, timeouts_of
from collector.probecli import probe
from collector.promcli import prometheus
from collector.runlock import OWN_LOG


def _die(msg: str) -> NoReturn:
    click.echo(f"leakcollect: {msg}", err=True)
    sys.exit(exitcodes.NOTHING)


verbosity = verbosity_options(
    quiet_help="Only failures on stderr.", verbose_help="More detail on stderr."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="leakcollect")
def cli() -> None:
    """Sample GPU hosts (NVML, /proc, server logs, /metrics) into a trace bucket.

    \b
    Examples:
      leakcollect run --once --bucket /data/traces --log /var/log/sglang.log
      leakcollect cron-line --bucket /data/traces --log /var/log/sglang.log
      leakcollect import nvidia-smi-csv smi.csv --host gpu-7 --bucket /data/traces

    \b
    Exit codes:
      0  every source written
      1  some sources failed or are behind (each reason on stderr and in collector_runs)
      2  nothing written (usage error, unknown config key, lock held, bucket unwritable)
    """


@cli.command(
    epilog="Exit codes: 0 every source written, 1 some failed or are behind (reasons on "
    "stderr), "
    "2 nothing written."
)
@collect_options
@click.option("--once", is_flag=True, help="Take one sample and stop.")
@verbosity
def run(
    config: str | None,
    bucket: str,
    host: str,
    interval: float,
    duration: float,
    once: bool,
    logs: tuple[str, ...],
    metrics_urls: tuple[str, ...],
    metrics_timeout: float,
    proc_root: str,
    no_gpu: bool,
    probe_spool: str | None,
    probe_urls: tuple[str, ...],
    probe_timeout: float,
    probe_model: str | None,
    source_timeouts: tuple[str, ...],
    state_dir: str,
) -> None:
    """Sample for --duration seconds, then write one file per table.

    \b
    Examples:
      leakcollect run --once --no-gpu --bucket /tmp/traces      # try it anywhere
      leakcollect run --bucket /data/traces --log /var/log/sglang.log \\
          --metrics-url http://127.0.0.1:30000/metrics
      leakcollect run --config /etc/leakcollect.toml
    """
    from collector.run import Config, collect
    from collector.runlock import LockHeld, acquire_lock, rotate_own_log

    level = verbosity_level()

    def say(msg: str) -> None:
        if level >= 0 or " failed" in msg or "cannot" in msg:
            click.echo(msg, err=True)

    state = Path(state_dir)
    try:
        lock = acquire_lock(state)
    except LockHeld as e:
        _die(str(e))
    except OSError as e:
        _die(f"state dir {state}: {e}")
    rotate_own_log(state)
    try:
        cfg = Config(
            bucket=bucket,
            host=host,
            state_dir=state,
            interval=interval,
            duration=0 if once else duration,
            # one spelling per log: its cursor and its rows' ``file`` are keyed by the path
            logs=[absolute(p) for p in logs],
            metrics_urls=list(metrics_urls),
            proc_root=Path(proc_root),
            no_gpu=no_gpu,
            metrics_timeout=metrics_timeout,
            probe_spool=probe_spool,
            probe_urls=list(probe_urls),
            probe_timeout=probe_timeout,
            probe_model=probe_model,
        )
        for name, seconds in timeouts_of(source_timeouts).items():
            setattr(cfg, name, seconds)
        sys.exit(collect(cfg, say=say))
    finally:
        lock.close()


def _s3_note(ctx: click.Context, where: str) -> None:
    """An S3 bucket's settings live in this shell's environment, which cron and systemd
    do not see: say so (no secret is printed)."""
    if not str(ctx.params.get("bucket") or "").startswith("s3://") or verbosity_level() < 0:
        return
    have = [k for k in S3_VARIABLES if os.environ.get(k)]
    click.echo(
        "# the bucket is on S3: cron and systemd do not see this shell's AWS_* variables"
        + (f" (set here: {', '.join(have)})" if have else "")
        + f"; give them {where}",
        err=True,
    )


S3_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def _exe() -> str:
    return str(Path(sys.argv[0]).resolve()) if sys.argv and sys.argv[0] else "leakcollect"


@cli.command("cron-line")
@collect_options
@verbosity
@click.pass_context
def cron_line(ctx: click.Context, **_: Any) -> None:
    """Print a crontab line: every minute, sampling for 55 s, with these options.

    Takes the same options as `run` (or --config). The collector's own output goes
    to leakcollect.log in --state-dir, which needs no root (past 4 MiB a run moves it to
    leakcollect.log.1, so it never grows for good). Install it with the
    command printed on stderr.

    \b
    Example:
      leakcollect cron-line --bucket /data/traces --log /var/log/sglang.log
    """
    state = Path(absolute(str(ctx.params["state_dir"])))
    # the default state folder hangs on $XDG_STATE_HOME, which cron does not set: the run
    # must keep its cursors beside the log this line appends to (and rotates it there)
    args = " ".join(run_args(ctx, pinned=("state_dir",)))
    log = shlex.quote(str(state / OWN_LOG))
    cmd = f"mkdir -p {shlex.quote(str(state))} && {_exe()} run {args} >>{log} 2>&1"
    line = "* * * * * " + cmd.replace("%", "\\%")  # cron turns a bare % into a newline
    click.echo(line)
    if verbosity_level() >= 0:
        click.echo(
            "# install it for this user:\n#   (crontab -l 2>/dev/null; leakcollect cron-line "
            + args
            + ") | crontab -",
            err=True,
        )
    _s3_note(ctx, "as VAR=value lines above the entry in the crontab")


@cli.command("systemd-units")
@collect_options
@verbosity
@click.pass_context
def systemd_units(ctx: click.Context, **_: Any) -> None:
    """Print a leakcollect.service and leakcollect.timer pair (every minute) with these options.

    Takes the same options as `run` (or --config); output goes to the journal.
    The commands that install them are printed on stderr.

    \b
    Example:
      leakcollect systemd-units --config /etc/leakcollect.toml
    """
    # systemd reads % as a specifier in ExecStart=: %% is a literal one
    args = " ".join(run_args(ctx)).replace("%", "%%")
    click.echo(f"""# /etc/systemd/system/leakcollect.service
[Unit]
Description=leakcollect: sample GPU memory into the trace bucket

[Service]
Type=oneshot
ExecStart={_exe()} run {args}

# /etc/systemd/system/leakcollect.timer
[Unit]
Description=Run leakcollect every minute

[Timer]
OnCalendar=*-*-* *:*:00
AccuracySec=1s

[Install]
WantedBy=timers.target""")
    if verbosity_level() >= 0:
        click.echo(
            "# install: save the two units above under /etc/systemd/system/, then\n"
            "#   systemctl daemon-reload && systemctl enable --now leakcollect.timer",
            err=True,
        )
    _s3_note(ctx, "in an EnvironmentFile= (mode 0600) named in [Service]")


cli.add_command(probe)
cli.add_command(import_)
import_.add_command(prometheus)


def main() -> None:
    cli(prog_name="leakcollect")


if __name__ == "__main__":
    main()
