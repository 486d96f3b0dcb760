"""``leakcollect``: the cron collector and the importers. A thin click layer.

Exit codes: 0 every source written, 1 some sources failed (recorded in
collector_runs), 2 nothing written (usage, lock held, bucket unwritable).
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import socket
import sys
import tomllib
from pathlib import Path
from typing import Any, NoReturn

import click

from collector import __version__, exitcodes
from collector.probecli import probe

DEFAULT_STATE = (
    Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "leakcollect"
)


def _die(msg: str) -> NoReturn:
    click.echo(f"leakcollect: {msg}", err=True)
    sys.exit(exitcodes.NOTHING)


def _config(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Options from a TOML file become defaults; the command line still wins."""
    if value is None:
        return None
    try:
        data = tomllib.loads(Path(value).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise click.BadParameter(f"{value}: {e}") from None
    ctx.default_map = {k.replace("-", "_"): v for k, v in data.items()}
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="leakcollect")
def cli() -> None:
    """Sample GPU hosts (NVML, /proc, server logs, /metrics) into a trace bucket.

    Run from cron every minute: `leakcollect cron-line` prints the line.
    """


@cli.command()
@click.option(
    "--config",
    callback=_config,
    is_eager=True,
    expose_value=False,
    type=click.Path(dir_okay=False),
    help="TOML file with any of these options (bucket = ..., log = [...]).",
)
@click.option("--bucket", required=True, help="Bucket folder to write traces into.")
@click.option(
    "--host",
    default=lambda: socket.gethostname(),
    show_default="this host's name",
    help="Host name.",
)
@click.option(
    "--interval",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    help="Seconds between samples.",
)
@click.option(
    "--duration",
    default=55.0,
    show_default=True,
    type=click.FloatRange(0, 86400),
    help="Seconds to sample.",
)
@click.option("--once", is_flag=True, help="Take one sample and stop.")
@click.option(
    "--log",
    "logs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Server log to tail (repeatable).",
)
@click.option(
    "--metrics-url", "metrics_urls", multiple=True, help="Prometheus /metrics URL (repeatable)."
)
@click.option("--metrics-timeout", default=2.0, show_default=True, type=click.FloatRange(0.1, 60))
@click.option("--proc-root", default="/proc", show_default=True, type=click.Path(file_okay=False))
@click.option("--no-gpu", is_flag=True, help="Skip NVML on purpose.")
@click.option(
    "--probe-spool",
    type=click.Path(file_okay=False),
    help="The allocator probe's spool folder (see `leakcollect probe env`): move its records in.",
)
@click.option(
    "--probe-url",
    "probe_urls",
    multiple=True,
    help="Send one tiny request per run and record its latency: /health, /v1/models, "
    "or .../chat/completions for a 1-token completion (repeatable).",
)
@click.option("--probe-timeout", default=10.0, show_default=True, type=click.FloatRange(0.1, 300))
@click.option("--probe-model", help="Model name for a completion --probe-url.")
@click.option(
    "--state-dir",
    default=str(DEFAULT_STATE),
    show_default=True,
    type=click.Path(file_okay=False),
    help="Lock file and log cursors.",
)
def run(
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
    state_dir: str,
) -> None:
    """Sample for --duration seconds, then write one file per table."""
    from collector.run import Config, LockHeld, acquire_lock, collect

    state = Path(state_dir)
    try:
        lock = acquire_lock(state)
    except LockHeld as e:
        _die(str(e))
    except OSError as e:
        _die(f"state dir {state}: {e}")
    try:
        cfg = Config(
            bucket=bucket,
            host=host,
            state_dir=state,
            interval=interval,
            duration=0 if once else duration,
            logs=list(logs),
            metrics_urls=list(metrics_urls),
            proc_root=Path(proc_root),
            no_gpu=no_gpu,
            metrics_timeout=metrics_timeout,
            probe_spool=probe_spool,
            probe_urls=list(probe_urls),
            probe_timeout=probe_timeout,
            probe_model=probe_model,
        )
        sys.exit(collect(cfg))
    finally:
        lock.close()


@cli.command("cron-line")
@click.option("--bucket", required=True)
@click.option("--log", "logs", multiple=True)
@click.option("--metrics-url", "metrics_urls", multiple=True)
@click.option("--probe-spool", help="The allocator probe's spool folder.")
@click.option("--probe-url", "probe_urls", multiple=True)
def cron_line(
    bucket: str,
    logs: tuple[str, ...],
    metrics_urls: tuple[str, ...],
    probe_spool: str | None,
    probe_urls: tuple[str, ...],
) -> None:
    """Print a crontab line: every minute, sampling for 55 s."""
    exe = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else "leakcollect"
    args = [
        f"--bucket {shlex.quote(bucket)}",
        *[f"--log {shlex.quote(x)}" for x in logs],
        *[f"--metrics-url {shlex.quote(x)}" for x in metrics_urls],
        *([f"--probe-spool {shlex.quote(probe_spool)}"] if probe_spool else []),
        *[f"--probe-url {shlex.quote(x)}" for x in probe_urls],
    ]
    cmd = f"{exe} run --duration 55 {' '.join(args)} >>/var/log/leakcollect.log 2>&1"
    click.echo("* * * * * " + cmd.replace("%", "\\%"))  # cron turns a bare % into a newline


@cli.command("systemd-units")
@click.option("--bucket", required=True)
def systemd_units(bucket: str) -> None:
    """Print a leakcollect.service and leakcollect.timer pair (every minute)."""
    exe = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else "leakcollect"
    click.echo(f"""# /etc/systemd/system/leakcollect.service
[Unit]
Description=leakcollect: sample GPU memory into the trace bucket

[Service]
Type=oneshot
ExecStart={exe} run --duration 55 --bucket {bucket}

# /etc/systemd/system/leakcollect.timer
[Unit]
Description=Run leakcollect every minute

[Timer]
OnCalendar=*-*-* *:*:00
AccuracySec=1s

[Install]
WantedBy=timers.target""")


@cli.group("import")
def import_() -> None:
    """Load data you already have into a bucket."""


def _write(bucket: str, host: str, table: str, rows: list[dict[str, Any]]) -> None:
    from collector.writer import BucketWriter

    try:
        files = BucketWriter(bucket, host).write(table, rows)
    except (OSError, ValueError) as e:
        _die(f"cannot write {table} to {bucket}: {e}")
    click.echo(f"{len(rows)} rows into {len(files)} files of {table}", err=True)


@import_.command("nvidia-smi-csv")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--host", required=True)
@click.option("--bucket", required=True)
@click.option(
    "--start", help="ISO time of the first sample (when the file has no timestamp column)."
)
@click.option(
    "--interval", default=1.0, show_default=True, type=float, help="Seconds between samples (-l N)."
)
@click.option("--columns", help="Header for noheader output, e.g. 'index,memory.used [MiB]'.")
def import_smi(
    file: str, host: str, bucket: str, start: str | None, interval: float, columns: str | None
) -> None:
    """nvidia-smi --query-gpu=... --format=csv [-l N] output."""
    from collector.importers import ImportError_, nvidia_smi_csv

    try:
        t0 = dt.datetime.fromisoformat(start.replace("Z", "+00:00")) if start else None
        if t0 and t0.tzinfo is None:
            t0 = t0.replace(tzinfo=dt.UTC)
        rows = nvidia_smi_csv(file, host, start=t0, interval=interval, columns=columns)
    except (ImportError_, ValueError) as e:
        _die(str(e))
    _write(bucket, host, "gpu_samples", rows)


@import_.command("gpu-memory-log")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--host", required=True)
@click.option("--bucket", required=True)
@click.option("--gpu", default=0, show_default=True, type=int)
@click.option("--total-mib", type=float, help="The GPU's memory, if known.")
def import_memlog(file: str, host: str, bucket: str, gpu: int, total_mib: float | None) -> None:
    """'<ISO-8601 time> <MiB>' lines."""
    from collector.importers import ImportError_, gpu_memory_log

    try:
        rows = gpu_memory_log(file, host, gpu=gpu, total_mib=total_mib)
    except ImportError_ as e:
        _die(str(e))
    _write(bucket, host, "gpu_samples", rows)


@import_.command("server-log")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--host", required=True)
@click.option("--bucket", required=True)
@click.option("--year", type=int, help="Year for timestamps without one (vLLM's MM-DD).")
def import_log(file: str, host: str, bucket: str, year: int | None) -> None:
    """A whole past SGLang / vLLM server log."""
    from collector.importers import server_log

    _write(bucket, host, "log_lines", server_log(file, host, year=year))


cli.add_command(probe)


def main() -> None:
    cli(prog_name="leakcollect")


if __name__ == "__main__":
    main()
