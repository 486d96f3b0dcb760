"""What every ``leakreport`` command shares: output, verbosity, progress, the analysis
options (declared once), exit codes.

Machine output goes to stdout (or --out), progress and diagnostics to stderr.
Nothing heavy is imported here: commands import what they need when they run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from analyzer import exitcodes
from analyzer.categories import SEVERITIES
from analyzer.memory import (
    MIN_BUDGET_TEXT,
    OUT_OF_MEMORY_HINT,
    PYTHON_RESERVE,
    TooSmall,
    budget_note,
    mib,
    parse_memory_limit,
)
from analyzer.progress import plural
from collector.atomic import write_atomic
from collector.clikit import verbosity_level
from collector.clikit import verbosity_options as verbosity_options_of

FAIL_ON = [*SEVERITIES, "never"]


def err(msg: str) -> None:
    try:
        click.echo(msg, err=True)
    except BrokenPipeError:  # stderr's reader left (`2>&1 | head`): the work goes on, unheard
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stderr.fileno())  # also for what is still buffered, at exit
        os.close(devnull)


def die(msg: str, code: int = exitcodes.ERROR) -> NoReturn:
    err(f"leakreport: {msg}")
    sys.exit(code)


# --- verbosity and progress -------------------------------------------------------


class Console:
    """Progress on stderr: a bar on a terminal, plain lines otherwise, nothing with -q."""

    def __init__(self, verbosity: int) -> None:
        self.verbosity = verbosity
        self.tty = sys.stderr.isatty()
        self._bar: Any = None
        self._bar_key: tuple[str, int] | None = None
        self._t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        """A progress line (shown unless -q)."""
        if self.verbosity < 0:
            return
        if self._bar is not None and not self.verbosity:
            return  # the bar says it; the lines would tear it
        err(msg)

    def debug(self, msg: str) -> None:
        if self.verbosity > 0:
            err(msg)

    def step(self, done: int, total: int, unit: str, detail: str = "") -> None:
        if self.verbosity < 0:
            return
        if not self.tty or self.verbosity > 0:
            # plain lines: every step with -v, else about ten per unit of work
            tenth = (done * 10) // max(total, 1) != ((done - 1) * 10) // max(total, 1)
            if self.verbosity > 0 or done >= total or tenth:
                elapsed = time.monotonic() - self._t0
                extra = f", {detail}" if detail and self.verbosity > 0 else ""
                err(f"{unit} {done}/{total} done ({elapsed:.0f}s){extra}")
            return
        if self._bar_key != (unit, total):
            self.close()
            self._bar = click.progressbar(
                length=total,
                label=unit,
                file=sys.stderr,
                show_eta=True,
                show_pos=True,
                width=30,
            )
            self._bar.__enter__()
            self._bar_key = (unit, total)
        self._bar.update(done - self._bar.pos)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar, self._bar_key = None, None


verbosity_options = verbosity_options_of(
    quiet_help="Nothing on stderr but errors.",
    verbose_help="More detail on stderr (every rule's timing; plain lines instead of a bar).",
)


def console() -> Console:
    return Console(max(-1, min(1, verbosity_level())))


# --- output ------------------------------------------------------------------------


def write_out(text: str, out: str | None, what: str = "--out") -> None:
    """Machine output to stdout, or atomically to a file (a one-line error, never a traceback)."""
    if out is None or out == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    try:
        path = write_atomic(out, text)
    except OSError as e:
        die(f"{what} {out}: cannot write: {e.strerror or e}")
    console()(f"wrote {path}")


def parse_date(_ctx: click.Context, _param: click.Parameter, value: str | None) -> dt.date | None:
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date (YYYY-MM-DD)") from None


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


# --- the analysis options, declared once ---------------------------------------------


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
    rule_timeout: float = 60.0


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
_RUN_OPTS = [
    click.option(
        "--executor",
        type=click.Choice(["local", "dask"]),
        default="local",
        show_default=True,
        help="local: DuckDB in this process; dask: one task per host group on a Dask cluster.",
    ),
    click.option(
        "--scheduler",
        metavar="ADDRESS",
        help="Dask scheduler (tcp://host:8786); default: a local cluster on 127.0.0.1.",
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
    click.option(
        "--rule-timeout",
        default=60.0,
        show_default=True,
        type=click.FloatRange(min=0.1),
        metavar="SECONDS",
        help="Stop a rule that runs longer than this; it is recorded as errored (exit 3).",
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


def fail_on_option(default: str) -> Callable[[Any], Any]:
    return click.option(
        "--fail-on",
        type=click.Choice(FAIL_ON),
        default=default,
        show_default=True,
        help="Exit 1 when a finding is at or above this severity ('never': findings never "
        "change the exit code; an incomplete analysis still exits 3).",
    )


def bucket_path(bucket: str) -> str:
    """Refuse what is not a bucket before any work (exit 2, one line)."""
    if bucket.startswith("s3://"):
        return bucket
    from collector.schema import TABLES

    p = Path(bucket)
    if not p.exists():
        die(f"{bucket}: no such bucket folder")
    if not p.is_dir():
        die(f"{bucket}: not a folder (a bucket is a folder or s3://bucket/prefix)")
    entries = [e.name for e in p.iterdir() if not e.name.startswith(".")]
    if entries and not any(name in TABLES for name in entries):
        die(
            f"{bucket}: not a trace bucket (none of its {plural(len(entries), 'entry', 'entries')}"
            f" is a table folder such as gpu_samples/; write one with leakcollect or "
            f"leakreport simulate)"
        )
    return bucket


def load_packs(pack_dirs: tuple[str, ...], no_builtin: bool = False) -> list[Any]:
    """The built-in pack and the --pack folders; a broken pack ends the command (exit 2),
    a broken rule is said on stderr and runs as errored."""
    from analyzer.packs import PackError
    from analyzer.packs import load_packs as load

    try:
        packs = load(list(pack_dirs), builtin=not no_builtin)
    except PackError as e:
        die(str(e))
    for p in packs:
        for rule_err in p.errors:
            err(f"leakreport: rule error: {rule_err}")
    return packs


def run_analysis(bucket: str, opts: AnalysisOptions, progress: Console | None = None) -> Any:
    """Run the packs over the bucket; usage and bucket errors end the command (exit 2)."""
    import duckdb

    from analyzer import rollup
    from analyzer.bucket import BucketError, Scope
    from analyzer.packs import param_type_error, parse_param_overrides

    say = progress if progress is not None else console()
    bucket_path(bucket)
    packs = load_packs(opts.packs)
    try:
        overrides = parse_param_overrides(list(opts.params))
    except ValueError as e:
        die(f"--param: {e}")
    known = {r.id: r for p in packs for r in p.rules}
    for rule_id, kv in overrides.items():
        if rule_id == "rollup":
            defaults = rollup.DEFAULTS
        elif rule_id not in known:
            die(f"--param: no rule {rule_id!r} (see `leakreport rules list`)")
        else:
            defaults = known[rule_id].params
        for k, v in kv.items():
            if k not in defaults:
                have = ", ".join(defaults) or "none"
                die(f"--param: {rule_id} has no parameter {k!r} (it has: {have})")
            wrong = param_type_error(f"{rule_id}.{k}", defaults[k], v)
            if wrong:
                die(f"--param {wrong}")
    if opts.since and opts.until and opts.since > opts.until:
        die(f"--since {opts.since} is after --until {opts.until}: no day is in between")
    scope = Scope(opts.since, opts.until, list(opts.hosts))
    try:
        if opts.executor == "dask":
            from analyzer.fanout import analyze_fanout, dask_executor

            pool, closer = dask_executor(opts.scheduler, opts.workers)
            try:
                say(f"fanning out per host on Dask ({opts.scheduler or 'local cluster'})")
                if opts.memory_limit:
                    say(budget_note(opts.memory_limit))
                doc = analyze_fanout(
                    bucket,
                    packs,
                    pool,
                    scope=scope,
                    overrides=overrides,
                    memory_limit=opts.memory_limit,
                    hosts_per_task=opts.batch_hosts,
                    progress=say,
                    rule_timeout=opts.rule_timeout,
                )
            finally:
                closer.close()
        else:
            from analyzer.fanout import analyze_local

            doc = analyze_local(
                bucket,
                packs,
                scope=scope,
                overrides=overrides,
                progress=say,
                memory_limit=opts.memory_limit,
                batch_hosts=opts.batch_hosts,
                rule_timeout=opts.rule_timeout,
            )
    except (BucketError, ValueError, RuntimeError, OSError, duckdb.Error) as e:
        # a rule's own failure is caught per rule; this is the rollups' or the bucket's
        oom = duckdb.OutOfMemoryException
        if oom in (type(e), type(e.__cause__)):  # DuckDB's own advice is for SQL users
            die(f"{OUT_OF_MEMORY_HINT}: {str(e).splitlines()[0]}")
        die(str(e))
    finally:
        say.close()
    if not doc.has_data():
        doc.run.incomplete.append(explain_empty(bucket, opts))
    doc.run.incomplete = doc.incomplete_reasons()
    return doc


def explain_empty(bucket: str, opts: AnalysisOptions) -> str:
    """Which filter emptied the scope, in one line."""
    from analyzer.bucket import Scope
    from analyzer.fanout import list_hosts

    try:
        every = list_hosts(bucket, Scope())
    except Exception as e:  # noqa: BLE001 - the explanation must not fail the command
        return f"no data in scope ({e})"
    if not every:
        return "no data in scope: the bucket holds no trace files"
    if opts.hosts:
        known = [h for h in opts.hosts if h in every]
        if not known:
            sample = ", ".join(every[:5]) + (", ..." if len(every) > 5 else "")
            return (
                f"no data in scope: --host {' '.join(opts.hosts)} matches no host in the bucket "
                f"({plural(len(every), 'host')}: {sample})"
            )
    if opts.since or opts.until:
        return (
            f"no data in scope: no trace files dated within --since {opts.since or '(any)'} "
            f"--until {opts.until or '(any)'}"
        )
    return "no data in scope"


def exit_code(doc: Any, fail_on: str, *, show: bool = True) -> int:
    """1 findings at or above --fail-on; else 3 when the analysis is incomplete; else 0.

    A found leak is the news, so 1 wins over 3; the incomplete reasons are printed on
    stderr either way (and are in the findings document).
    """
    reasons = doc.incomplete_reasons()
    if show:
        for r in reasons:
            err(f"leakreport: incomplete: {r}")
    if fail_on != "never" and doc.count_at_or_above(fail_on):
        return exitcodes.FINDINGS
    return exitcodes.INCOMPLETE if reasons else exitcodes.OK


EPILOG_EXIT = exitcodes.help_text()
