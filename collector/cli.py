"""``leakcollect``: the cron collector and the importers. A thin click layer.

Exit codes: 0 every source written, 1 some sources failed (recorded in
collector_runs), 2 nothing written (usage, lock held, bucket unwritable).
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import tomllib
from pathlib import Path
from typing import Any, NoReturn

import click

from collector import __version__, exitcodes
from collector.cli_import import import_
from collector.clikit import verbosity_level, verbosity_options
from collector.probecli import probe
from collector.promcli import prometheus

DEFAULT_STATE = (
    Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "leakcollect"
)


def _die(msg: str) -> NoReturn:
    click.echo(f"leakcollect: {msg}", err=True)
    sys.exit(exitcodes.NOTHING)


def _config(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Options from a TOML file become defaults; the command line still wins.

    Keys are the long option names (``metrics-url``) or their underscore forms
    (``metrics_url``); repeatable options take a list. An unknown key is an error.
    """
    if value is None:
        return None
    try:
        data = tomllib.loads(Path(value).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise click.BadParameter(f"{value}: {e}") from None
    by_key: dict[str, click.Parameter] = {}
    for p in ctx.command.params:
        for opt in getattr(p, "opts", []):
            if opt.startswith("--") and p.name not in ("config", "help", "quiet", "verbose"):
                by_key[opt[2:]] = p
                by_key[opt[2:].replace("-", "_")] = p
    defaults: dict[str, Any] = {}
    for key, v in data.items():
        param = by_key.get(key)
        if param is None or not param.name:
            known = ", ".join(sorted(k for k in by_key if "_" not in k))
            raise click.BadParameter(f"{value}: unknown key {key!r} (known keys: {known})")
        if getattr(param, "multiple", False) and isinstance(v, str):
            v = [v]
        defaults[param.name] = v
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


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
      1  some sources failed (each reason on stderr and in collector_runs)
      2  nothing written (usage error, unknown config key, lock held, bucket unwritable)
    """


_TIMEOUT_FIELDS = {"nvml": "nvml_timeout", "procfs": "procfs_timeout", "logs": "log_timeout",
                   "spool": "spool_timeout"}  # fmt: skip


def _source_timeouts(values: tuple[str, ...]) -> dict[str, float]:
    """``--source-timeout logs=60`` as Config fields; a bad kind or number is a usage error."""
    out: dict[str, float] = {}
    for v in values:
        kind, _, secs = v.partition("=")
        try:
            seconds = float(secs)
        except ValueError:
            seconds = -1.0
        if kind not in _TIMEOUT_FIELDS or not 0.1 <= seconds <= 3600:
            raise click.BadParameter(
                f"{v!r}: want KIND=SECONDS with KIND one of {', '.join(_TIMEOUT_FIELDS)} "
                "and 0.1 to 3600 seconds"
            )
        out[_TIMEOUT_FIELDS[kind]] = seconds
    return out


def _check_source_timeouts(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[str, ...]:
    """Checked when the command line is read; kept as typed, so cron-line repeats them."""
    _source_timeouts(values)
    return values


# The collection options, declared once: run, cron-line and systemd-units share them.
COLLECT_OPTIONS = [
    click.option(
        "--config",
        callback=_config,
        is_eager=True,
        type=click.Path(dir_okay=False, exists=True),
        help="TOML file with any of these options, keyed by long name: "
        'bucket = "/data/traces", log = ["/var/log/sglang.log"], metrics-url = [...].',
    ),
    click.option(
        "--bucket",
        required=True,
        help="Bucket to write traces into: a folder or s3://bucket/prefix.",
    ),
    click.option(
        "--host",
        default=lambda: socket.gethostname(),
        show_default="this host's name",
        help="Host name (the bucket's host= partition).",
    ),
    click.option(
        "--interval",
        default=10.0,
        show_default=True,
        type=click.FloatRange(0.1, 3600),
        help="Seconds between samples.",
    ),
    click.option(
        "--duration",
        default=55.0,
        show_default=True,
        type=click.FloatRange(0, 86400),
        help="Seconds to sample before writing (55: one run per minute from cron).",
    ),
    click.option(
        "--log",
        "logs",
        multiple=True,
        type=click.Path(dir_okay=False),
        help="Server log to tail from a saved cursor (repeatable; survives rotation).",
    ),
    click.option(
        "--metrics-url",
        "metrics_urls",
        multiple=True,
        help="Prometheus /metrics URL of the server (repeatable).",
    ),
    click.option(
        "--metrics-timeout",
        default=2.0,
        show_default=True,
        type=click.FloatRange(0.1, 60),
        help="Seconds a /metrics scrape may take in all.",
    ),
    click.option(
        "--proc-root",
        default="/proc",
        show_default=True,
        type=click.Path(file_okay=False),
        help="procfs to read (a container's host /proc mounted elsewhere).",
    ),
    click.option("--no-gpu", is_flag=True, help="Skip NVML on purpose (no GPU on this host)."),
    click.option(
        "--probe-spool",
        type=click.Path(file_okay=False),
        help="The allocator probe's spool folder (see `leakcollect probe env`): move its records in.",
    ),
    click.option(
        "--probe-url",
        "probe_urls",
        multiple=True,
        help="Send one tiny request per run and record its latency: /health, /v1/models, "
        "or .../chat/completions for a 1-token completion (repeatable).",
    ),
    click.option(
        "--probe-timeout",
        default=10.0,
        show_default=True,
        type=click.FloatRange(0.1, 300),
        help="Seconds the --probe-url request may take.",
    ),
    click.option("--probe-model", help="Model name for a completion --probe-url."),
    click.option(
        "--source-timeout",
        "source_timeouts",
        multiple=True,
        callback=_check_source_timeouts,
        help="KIND=SECONDS: how long the nvml (5), procfs (5), logs (20, all logs together) or "
        "spool (10) source may take before it is abandoned and recorded as failed (repeatable).",
    ),
    click.option(
        "--state-dir",
        default=str(DEFAULT_STATE),
        show_default=True,
        type=click.Path(file_okay=False),
        help="Lock file, log cursors and (from cron) the collector's own log; "
        "$XDG_STATE_HOME/leakcollect, no root needed.",
    ),
]


def collect_options(f: Any) -> Any:
    for opt in reversed(COLLECT_OPTIONS):
        f = opt(f)
    return f


@cli.command(
    epilog="Exit codes: 0 every source written, 1 some failed (reasons on stderr), "
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
      leakcollect run --bucket /data/traces --log /var/log/sglang.log \
          --metrics-url http://127.0.0.1:30000/metrics
      leakcollect run --config /etc/leakcollect.toml
    """
    from collector.run import Config, LockHeld, acquire_lock, collect

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
        for name, seconds in _source_timeouts(source_timeouts).items():
            setattr(cfg, name, seconds)
        sys.exit(collect(cfg, say=say))
    finally:
        lock.close()


def _run_args(ctx: click.Context) -> list[str]:
    """The options given to this command, as arguments for `leakcollect run`."""
    out: list[str] = []
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name in (None, "help", "quiet", "verbose"):
            continue
        source = ctx.get_parameter_source(p.name)
        if source not in (
            click.core.ParameterSource.COMMANDLINE,
            click.core.ParameterSource.ENVIRONMENT,
        ):
            continue
        value = ctx.params.get(p.name)
        flag = p.opts[-1] if p.opts[-1].startswith("--") else p.opts[0]
        if p.is_flag:
            if value:
                out.append(flag)
        elif p.multiple:
            out += [f"{flag} {shlex.quote(str(v))}" for v in value or ()]
        elif value is not None:
            v = str(Path(value).absolute()) if p.name in ("config", "state_dir") else str(value)
            out.append(f"{flag} {shlex.quote(v)}")
    return out


def _exe() -> str:
    return str(Path(sys.argv[0]).resolve()) if sys.argv and sys.argv[0] else "leakcollect"


@cli.command("cron-line")
@collect_options
@verbosity
@click.pass_context
def cron_line(ctx: click.Context, **_: Any) -> None:
    """Print a crontab line: every minute, sampling for 55 s, with these options.

    Takes the same options as `run` (or --config). The collector's own output goes
    to leakcollect.log in --state-dir, which needs no root. Install it with the
    command printed on stderr.

    \b
    Example:
      leakcollect cron-line --bucket /data/traces --log /var/log/sglang.log
    """
    state = Path(ctx.params["state_dir"]).absolute()
    args = " ".join(_run_args(ctx))
    log = shlex.quote(str(state / "leakcollect.log"))
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
    args = " ".join(_run_args(ctx))
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


cli.add_command(probe)
cli.add_command(import_)
import_.add_command(prometheus)


def main() -> None:
    cli(prog_name="leakcollect")


if __name__ == "__main__":
    main()
