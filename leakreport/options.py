"""The ``leakreport`` command-line options shared by several commands, declared once:
dates, sizes, the analysis options (scope, rules, how to run) and ``--fail-on``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable
from typing import Any

import click

from analyzer.categories import SEVERITIES
from analyzer.memory import MIN_BUDGET_TEXT, PYTHON_RESERVE, TooSmall, mib, parse_memory_limit
from collector import layout

FAIL_ON = [*SEVERITIES, "never"]


def parse_date(_ctx: click.Context, _param: click.Parameter, value: str | None) -> dt.date | None:
    if value is None:
        return None
    day = layout.parse_day(value)
    if day is None:
        raise click.BadParameter(f"{value!r} is not a date (YYYY-MM-DD)")
    return day


def parse_size(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A memory size such as 512MB or 2GiB; anything else is a usage error."""
    if value is None:
        return None
    try:
        parse_memory_limit(value)
    except TooSmall:
        raise click.BadParameter(
            f"{value!r} is too small: an analysis needs at least {MIN_BUDGET_TEXT}"
        ) from None
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a size such as 512MB, 2GB or 1GiB") from None
    return value.strip().replace(" ", "")


RULE_TIMEOUT_S = 60.0  # analyzer.runner's default, kept here: the CLI loads no DuckDB to show it


@dataclasses.dataclass(frozen=True)
class AnalysisOptions:
    """Which data, which rules, and how to run them: shared by analyze, report and fleet."""

    since: dt.date | None = None
    until: dt.date | None = None
    hosts: tuple[str, ...] = ()
    packs: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    executor: str = "local"
    scheduler: str | None = None
    workers: int = 2
    memory_limit: str | None = None
    batch_hosts: int = 32
    rule_timeout: float = RULE_TIMEOUT_S


_SCOPE_OPTS = [
    click.option("--since", callback=parse_date, help="First date (YYYY-MM-DD, UTC) to read."),
    click.option("--until", callback=parse_date, help="Last date (YYYY-MM-DD, UTC) to read."),
    click.option("--host", "hosts", multiple=True, help="Only this host (repeatable; exact name)."),
]
_RULE_OPTS = [
    click.option(
        "--pack",
        "packs",
        multiple=True,
        type=click.Path(file_okay=False),
        help="Extra rule pack folder (repeatable); the built-in pack always runs.",
    ),
    click.option(
        "--param",
        "params",
        multiple=True,
        metavar="RULE.key=value",
        help="Override a rule parameter, e.g. --param GM001.min_growth_mib=256 (repeatable).",
    ),
]


def rule_timeout_option(help_text: str) -> Callable[[Any], Any]:
    """--rule-timeout SECONDS (analyze and its kin, rules test): one default and bound."""
    return click.option(
        "--rule-timeout",
        default=RULE_TIMEOUT_S,
        show_default=True,
        type=click.FloatRange(min=0.1),
        metavar="SECONDS",
        help=help_text,
    )


_RUN_OPTS = [
    click.option(
        "--executor",
        type=click.Choice(["local", "dask"]),
        default="local",
        show_default=True,
        help="local: DuckDB in this process; dask: one task per host on a Dask cluster.",
    ),
    click.option(
        "--scheduler",
        metavar="ADDRESS",
        help="Dask scheduler (tcp://host:8786), with --executor dask; default: a local "
        "cluster on 127.0.0.1.",
    ),
    click.option(
        "--workers",
        default=2,
        show_default=True,
        type=click.IntRange(1, 256),
        help="Workers of the local Dask cluster.",
    ),
    click.option(
        "--memory-limit",
        metavar="SIZE",
        callback=parse_size,
        help="Memory for the analysis, per process (e.g. 1GB, as in a container's limit; "
        f"at least {MIN_BUDGET_TEXT}): DuckDB gets it less what Python holds and a reserve "
        f"of {mib(PYTHON_RESERVE)}, and spills to disk past that. Dask workers: one thread "
        "each. Default: DuckDB's own (80% of RAM).",
    ),
    click.option(
        "--batch-hosts",
        default=32,
        show_default=True,
        type=click.IntRange(1),
        help="Local runs over more hosts than this analyse them in batches, one connection "
        "at a time, each holding at most this many hosts' weeks of raw samples: memory stays "
        "bounded, findings are the same. A host counts one per week of raw samples (at least "
        "one), and each host-day stored in the rollup tier an eighth of one read raw, so a "
        "batch can hold more hosts than this.",
    ),
    rule_timeout_option(
        "Stop a rule that runs longer than this; it is recorded as errored (exit 3)."
    ),
]
_FIELDS = [f.name for f in dataclasses.fields(AnalysisOptions)]


def analysis_options(scope: bool = True) -> Callable[[Any], Any]:
    """Add the analysis options to a command and hand it one ``opts: AnalysisOptions``."""
    opts_list = (_SCOPE_OPTS if scope else []) + _RULE_OPTS + _RUN_OPTS

    def deco(f: Any) -> Any:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            vals = {k: kwargs.pop(k) for k in _FIELDS if k in kwargs}
            return f(*args, opts=AnalysisOptions(**vals), **kwargs)

        for opt in reversed(opts_list):
            wrapper = opt(wrapper)
        return wrapper

    return deco


def given_analysis_options() -> list[str]:
    """The analysis options of the running command given on its command line, as typed
    (``--host``): what a command that reads a findings document cannot honour."""
    ctx = click.get_current_context()
    return [
        p.opts[0]
        for p in ctx.command.params
        if p.name in _FIELDS
        and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE
    ]


def fail_on_option(default: str) -> Callable[[Any], Any]:
    return click.option(
        "--fail-on",
        type=click.Choice(FAIL_ON),
        default=default,
        show_default=True,
        help="Exit 1 when a finding is at or above this severity ('never': findings never "
        "change the exit code; an incomplete analysis still exits 3).",
    )
