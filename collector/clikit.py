"""-q/--quiet and -v/--verbose, shared by ``leakcollect`` and ``leakreport``.

Click only (the collector's commands use it too): the level lives in the root
context's ``meta``, so a flag given to any subcommand counts for the whole run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import click

_KEY = "verbosity"


def _add(delta: int) -> Callable[[click.Context, click.Parameter, Any], None]:
    def cb(ctx: click.Context, _p: click.Parameter, value: Any) -> None:
        if value:
            root = ctx.find_root()
            root.meta[_KEY] = root.meta.get(_KEY, 0) + delta * int(value)

    return cb


def verbosity_options(quiet_help: str, verbose_help: str) -> Callable[[Any], Any]:
    """A decorator adding -q/--quiet and -v/--verbose (values not passed to the command)."""

    def deco(f: Any) -> Any:
        f = click.option(
            "-v",
            "--verbose",
            count=True,
            expose_value=False,
            callback=_add(1),
            help=verbose_help,
        )(f)
        return click.option(
            "-q", "--quiet", is_flag=True, expose_value=False, callback=_add(-1), help=quiet_help
        )(f)

    return deco


def verbosity_level() -> int:
    """-1 quiet, 0 normal, 1 or more verbose (0 outside a click command)."""
    ctx = click.get_current_context(silent=True)
    return int(ctx.find_root().meta.get(_KEY, 0)) if ctx else 0


def _check_tz(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The zone as every reader takes it ("utc" and "Z" become "UTC"), or a usage error."""
    if value is None:
        return None
    from collector.importers import fixed_offset, zone  # the one reading of a zone name

    try:
        return "UTC" if zone(value) is dt.UTC else (fixed_offset(value) or value)
    except ValueError as e:
        raise click.BadParameter(str(e), param=param) from None


def tz_option(help_text: str, default: str | None = None) -> Callable[[Any], Any]:
    """--tz, checked when the command line is read: an unknown zone is a usage error (2)."""
    return click.option(
        "--tz",
        default=default,
        show_default=default is not None,
        callback=_check_tz,
        help=help_text,
    )
