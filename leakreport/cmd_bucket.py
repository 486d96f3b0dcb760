"""``leakreport compact`` and ``leakreport rollup``: bucket maintenance."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import click

from analyzer import exitcodes
from analyzer.bucketlock import BucketBusy, held
from analyzer.progress import plural
from leakreport.common import console, die, err, s3_there, verbosity_options
from leakreport.options import parse_date


def _removed(n: int, what: str) -> str:
    return f"; {plural(n, what)} removed" if n else ""


@click.command()
@click.argument("bucket")
@click.option(
    "--before",
    callback=parse_date,
    help="Compact days before this date (default: before today, UTC).",
)
@verbosity_options
def compact(bucket: str, before: dt.date | None) -> None:
    """Merge each finished day's small per-run files into one file per table/date/host.

    BUCKET is a folder or s3://bucket/prefix. Safe while others read: a reader
    sees the old files or the new one, never both; originals are deleted only
    after the new file's row count checks out. A file that does not match the
    schema (truncated, empty, foreign) is left as it is and named; the exit
    code is then 3, as it is when BUCKET holds no trace file at all (the folder
    above the bucket?). One compact or rollup at a time on a bucket folder: another
    one running (a cron run that overran) is named, nothing is done, exit 3. An S3
    bucket has no lock: two compacts at once there may each merge a folder, and
    readers and the next compact then keep one of the two.

    \b
    Example (daily cron):
      leakreport compact /data/traces
    """
    from analyzer.compact import CompactError
    from analyzer.compact import compact as run_compact

    s3_there(bucket)
    try:
        with held(bucket, "leakreport compact"):
            res = run_compact(bucket, before, progress=console(), alone=True)
    except BucketBusy as e:
        die(f"incomplete: {e}", exitcodes.INCOMPLETE)
    except (CompactError, OSError) as e:
        die(str(e))
    click.echo(
        f"{res.folders} folders: {res.files_before} files -> {res.files_after} "
        f"({res.rows} rows rewritten)" + _removed(res.temp_removed, "stale temporary file")
    )
    for line in res.skipped:
        err(f"leakreport: incomplete: left as it is: {line}")
    if res.skipped:
        raise SystemExit(exitcodes.INCOMPLETE)
    if res.files_before == 0:
        holds_traces(bucket, "compact")


@click.command()
@click.argument("bucket")
@click.option(
    "--before",
    callback=parse_date,
    help="Derive days before this date (default: before today, UTC).",
)
@click.option(
    "--verify",
    is_flag=True,
    help="First decode every row of the stored tier (a read of all of it; on S3 a "
    "download) and delete each file whose rows cannot be read, naming it: its host-days "
    "are then derived again. For a weekly cron, or when an analysis names a damaged tier file.",
)
@verbosity_options
def rollup(bucket: str, before: dt.date | None, verify: bool) -> None:
    """Store the rollup tier of each finished host-day, so analyses read it instead
    of re-deriving those days from raw samples; then the findings of each finished
    ISO week, so `leakreport fleet` draws those weeks without analysing them.

    BUCKET is a folder or s3://bucket/prefix. Only host-days whose tier is missing
    or stale (the rollup SQL or the log parser changed, late files arrived,
    compaction ran since) are derived; analyses give the same findings with or
    without the tier. Each week's tier files are then merged into one file per
    table for all hosts (fewer files to open). A week
    (Monday to Sunday, all before --before and before today) is analysed with the
    default pack and options when its stored findings are missing or stale (its
    trace files, the code or the packs changed), and stored only when the analysis
    is complete. Run it after `leakreport compact`. A raw file that does not match
    its schema, a week file that cannot be written, or a week whose analysis is
    incomplete is named on stderr, the rest goes on, and the exit code is 3, as it is
    when BUCKET holds no trace file at all
    (the folder above the bucket?). One compact or rollup at a time on a bucket
    folder: another one running (a cron run that overran) is named, nothing is
    done, exit 3 (an S3 bucket has no lock: run one such job per bucket there).
    A run killed at any point (a reboot, the OOM killer) leaves a bucket that analyses
    the same; the next run clears what it left half done and finishes the work.

    \b
    Example (daily cron; add --verify once a week):
      leakreport compact /data/traces && leakreport rollup /data/traces
    """
    import duckdb

    from analyzer import tierverify
    from analyzer.bucket import BucketError
    from analyzer.ruleexec import was_interrupted
    from analyzer.tier import build

    s3_there(bucket)
    try:
        with held(bucket, "leakreport rollup"):
            if verify:
                for line in tierverify.repair(bucket, console()):
                    err(f"leakreport: repaired: {line}")
            res = build(bucket, before, progress=console(), alone=True)
            click.echo(
                f"{plural(res.built, 'host-day')} derived, {res.current} already current, "
                f"{plural(res.weeks, 'week file')} written"
                + _removed(res.temp_removed, "temporary file")
            )
            for line in res.skipped:
                err(f"leakreport: incomplete: left out: {line}")
            for line in res.week_failures:
                err(f"leakreport: incomplete: {line}")
            weeks = store_weeks(bucket, before or dt.datetime.now(dt.UTC).date())
    except BucketBusy as e:
        die(f"incomplete: {e}", exitcodes.INCOMPLETE)
    except (BucketError, OSError, RuntimeError, duckdb.Error) as e:
        if was_interrupted(e):
            raise KeyboardInterrupt from e
        die(str(e))
    if res.skipped or res.week_failures or weeks.incomplete:  # cron must hear of each
        raise SystemExit(exitcodes.INCOMPLETE)
    if res.built == 0 and res.current == 0:
        holds_traces(bucket, "roll up")


def holds_traces(bucket: str, what: str) -> None:
    """Exit 3 when ``bucket`` holds no trace file at all: a cron line given the folder above
    the bucket (or a new one no collector writes to) would otherwise find nothing to do,
    exit 0 and say so quietly every day. A bucket with only today's files passes."""
    from analyzer.bucket import Scope
    from analyzer.fanout import list_hosts

    if not list_hosts(bucket, Scope()):
        die(
            f"incomplete: nothing to {what}: {bucket} holds no trace files (is it the bucket's "
            "root, the folder that holds gpu_samples/ and the other table folders?)",
            exitcodes.INCOMPLETE,
        )


def store_weeks(bucket: str, before: dt.date) -> Any:
    """The findings of finished weeks, analysed as `leakreport fleet` would (default
    options) where the stored ones are missing or stale; counts on stdout, weeks not
    stored on stderr."""
    from analyzer import weekstore
    from leakreport.common import run_analysis
    from leakreport.options import AnalysisOptions

    say = console()
    opts = AnalysisOptions()

    def analyse(since: dt.date, until: dt.date) -> Any:
        return run_analysis(bucket, dataclasses.replace(opts, since=since, until=until), say)

    try:
        res = weekstore.store_finished(bucket, before, analyse, weekstore.settings(opts), err, say)
    except OSError as e:
        die(f"storing the week findings: {e}")
    click.echo(  # the command's result, as the tier's line is: -q leaves stderr to errors
        f"week findings: {plural(res.stored, 'week')} stored, {res.current} already current, "
        f"{len(res.unclean)} not stored" + (" (incomplete analysis)" if res.incomplete else "")
    )
    for line in res.unclean:
        err(f"leakreport: week not stored: {line}")
    return res
