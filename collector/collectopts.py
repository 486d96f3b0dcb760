"""The collection options of ``leakcollect``, declared once: ``run``, ``cron-line`` and
``systemd-units`` share them, and a TOML ``--config`` file gives their defaults."""

from __future__ import annotations

import os
import shlex
import socket
import tomllib
from pathlib import Path
from typing import Any

import click

DEFAULT_STATE = (
    Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "leakcollect"
)


# options that name a file or folder: made absolute wherever they are written down
PATH_OPTIONS = ("config", "bucket", "logs", "proc_root", "probe_spool", "state_dir")


def absolute(path: str, base: Path | None = None) -> str:
    """``path`` as an absolute one (``~`` expanded, then from ``base``, else the working
    folder), as cron and systemd, which start elsewhere, need it; an S3 URL as it is."""
    if path.startswith("s3://"):
        return path
    path = os.path.expanduser(path)
    return path if os.path.isabs(path) else str((base or Path.cwd()) / path)


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
    here = Path(value).absolute().parent
    for key, v in data.items():
        param = by_key.get(key)
        if param is None or not param.name:
            known = ", ".join(sorted(k for k in by_key if "_" not in k))
            raise click.BadParameter(f"{value}: unknown key {key!r} (known keys: {known})")
        if getattr(param, "multiple", False) and isinstance(v, str):
            v = [v]
        if param.name in PATH_OPTIONS:  # a path in the file is read from the file's folder
            items = v if isinstance(v, list) else [v]
            if not all(isinstance(x, str) and x for x in items):
                raise click.BadParameter(f"{value}: {key} must be a path, in quotes: got {v!r}")
            v = [absolute(x, here) for x in items] if isinstance(v, list) else absolute(v, here)
        defaults[param.name] = v
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


_TIMEOUT_FIELDS = {"nvml": "nvml_timeout", "procfs": "procfs_timeout", "logs": "log_timeout",
                   "spool": "spool_timeout"}  # fmt: skip


def timeouts_of(values: tuple[str, ...]) -> dict[str, float]:
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
    timeouts_of(values)
    return values


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
        # readable=False: an unreadable log fails alone at run time, the other sources still run
        type=click.Path(dir_okay=False, readable=False),
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
        type=click.Path(file_okay=False, readable=False),
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
        "spool (10) source may take (repeatable). procfs, logs and spool stop a little before "
        "and keep what they read (a log left behind goes on next run); a source still busy at "
        "its time is abandoned and recorded as failed.",
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


def run_args(ctx: click.Context, pinned: tuple[str, ...] = ()) -> list[str]:
    """The options given to this command, as arguments for `leakcollect run`; those named
    in ``pinned`` also where left at their built-in default (not where a config file
    gives them: the file stays the one place to change them)."""
    out: list[str] = []
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name in (None, "help", "quiet", "verbose"):
            continue
        source = ctx.get_parameter_source(p.name)
        given = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
        if source not in given and not (
            p.name in pinned and source == click.core.ParameterSource.DEFAULT
        ):
            continue
        value = ctx.params.get(p.name)
        flag = p.opts[-1] if p.opts[-1].startswith("--") else p.opts[0]
        if p.is_flag:
            if value:
                out.append(flag)
        elif p.multiple:
            vs = [absolute(str(v)) if p.name in PATH_OPTIONS else str(v) for v in value or ()]
            out += [f"{flag} {shlex.quote(v)}" for v in vs]
        elif value is not None:
            v = absolute(str(value)) if p.name in PATH_OPTIONS else str(value)
            out.append(f"{flag} {shlex.quote(v)}")
    return out
