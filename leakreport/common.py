"""What every ``leakreport`` command shares: output, verbosity, progress, running an
analysis, exit codes (the options, declared once: :mod:`leakreport.options`).

Machine output goes to stdout (or --out), progress and diagnostics to stderr.
Nothing heavy is imported here: commands import what they need when they run.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import click

from analyzer import exitcodes
from analyzer.findings import QUARANTINED
from analyzer.memory import OUT_OF_MEMORY_HINT, budget_note
from analyzer.progress import plural
from collector.atomic import write_atomic
from collector.clikit import verbosity_level
from collector.clikit import verbosity_options as verbosity_options_of
from leakreport import Sigint
from leakreport.options import AnalysisOptions


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
    verbose_help="More detail on stderr (every step and its timing; plain lines, not a bar).",
)


def console() -> Console:
    return Console(max(-1, min(1, verbosity_level())))


# --- output ------------------------------------------------------------------------


def write_out(text: str, out: str | None, what: str = "--out") -> None:
    """Machine output to stdout, or atomically to a file (a one-line error, never a traceback).
    Nothing after a Ctrl-C, even one whose KeyboardInterrupt Python swallowed."""
    Sigint.check()
    if out is None or out == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    try:
        path = write_atomic(out, text)
    except OSError as e:
        die(f"{what} {out}: cannot write: {e.strerror or e}")
    console()(f"wrote {path}")


def writable_out(out: str | None, what: str = "--out") -> None:
    """Refuse an --out that cannot be written before the analysis, not after it. Missing
    folders are made when it is written (collector.atomic), so the nearest folder that
    exists is the one that must take a new file; a device (/dev/stdout) is written to."""
    if out is None or out == "-":
        return
    p = Path(os.path.realpath(out))
    if p.is_dir():
        die(f"{what} {out}: cannot write: it is a folder; give a file name")
    if p.exists() and not p.is_file():
        return  # a device, FIFO or socket: written to, never replaced
    folder = p.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        die(f"{what} {out}: cannot write: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        die(f"{what} {out}: cannot write: no permission to write in {folder}")


def bucket_path(bucket: str) -> str:
    """Refuse what is not a bucket before any work (exit 2, one line)."""
    from collector.schema import TABLES

    if bucket.startswith("s3://"):
        entries = s3_there(bucket)
    else:
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


def s3_there(bucket: str) -> list[str]:
    """The names right under an S3 bucket's prefix; exit 2 where the S3 bucket does not
    exist or nothing is stored under the prefix (as for a missing folder). A folder
    bucket: nothing to check here (``[]``)."""
    if not bucket.startswith("s3://"):
        return []
    import pyarrow.fs as pafs

    from collector.store import s3_filesystem, s3_root

    root = s3_root(bucket)
    try:
        fs = s3_filesystem()
        with contextlib.suppress(OSError):  # a policy may allow the prefix, not the bucket
            if fs.get_file_info(root.split("/")[0]).type == pafs.FileType.NotFound:
                die(f"{bucket}: no such S3 bucket {root.split('/')[0]!r}")
        sel = pafs.FileSelector(root, recursive=False, allow_not_found=True)
        names = [i.base_name for i in fs.get_file_info(sel) if not i.base_name.startswith(".")]
    except OSError as e:  # pyarrow's S3 errors: credentials, endpoint, permissions
        die(f"{bucket}: cannot open the S3 bucket: {e}")
    if not names and "/" in root:
        die(f"{bucket}: nothing is stored under this prefix (no such bucket folder)")
    return names


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
    from analyzer.ruleexec import was_interrupted
    from analyzer.runner import BucketKeptChanging

    say = progress if progress is not None else console()
    if opts.scheduler and opts.executor != "dask":  # it would be passed over
        die(f"--scheduler {opts.scheduler} is for --executor dask: give both")
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
            if rule_id == "rollup" and (need := rollup.out_of_range(k, float(v))):
                die(f"--param rollup.{k}={v}: must be {need}")
    if opts.since and opts.until and opts.since > opts.until:
        die(f"--since {opts.since} is after --until {opts.until}: no day is in between")
    scope = Scope(opts.since, opts.until, list(opts.hosts))
    try:
        if opts.executor == "dask":
            from analyzer.daskpool import dask_executor
            from analyzer.fanout import analyze_fanout

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
                    hosts_per_task=1,  # one task per host: the workers share the fleet
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
        if was_interrupted(e):
            raise KeyboardInterrupt from e
        oom = duckdb.OutOfMemoryException
        if oom in (type(e), type(e.__cause__)):  # DuckDB's own advice is for SQL users
            die(f"{OUT_OF_MEMORY_HINT}: {str(e).splitlines()[0]}")
        if isinstance(e, BucketKeptChanging):  # a busy bucket: not checked, not misused
            die(f"incomplete: {e}", exitcodes.INCOMPLETE)
        die(str(e))
    finally:
        say.close()
    if not doc.has_data():
        doc.run.incomplete.append(explain_empty(bucket, opts))
    else:  # one --host of several matching nothing (a typo) is said, not passed over
        seen = {h.host for h in doc.hosts} | {c.get("host") for c in doc.coverage}
        doc.run.incomplete += [
            f"--host {h}: no data of this host in scope (a typo?)"
            for h in opts.hosts
            if h not in seen
        ]
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
        for g in doc.run.gaps:  # rows left out for their time: said, not silent
            if QUARANTINED in g:
                err(f"leakreport: left out: {g}")
    if fail_on != "never" and doc.count_at_or_above(fail_on):
        return exitcodes.FINDINGS
    return exitcodes.INCOMPLETE if reasons else exitcodes.OK


EPILOG_EXIT = exitcodes.help_text()
EPILOG_FLEET = exitcodes.help_text(exitcodes.FLEET_TABLE)
