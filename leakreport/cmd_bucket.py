"""``leakreport compact`` and ``leakreport rollup``: bucket maintenance."""

from __future__ import annotations

import datetime as dt

import click

from analyzer import exitcodes
from leakreport.common import console, die, err, parse_date, verbosity_options


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
    code is then 3.

    \b
    Example (daily cron):
      leakreport compact /data/traces
    """
    from analyzer.compact import CompactError
    from analyzer.compact import compact as run_compact

    try:
        res = run_compact(bucket, before, progress=console())
    except (CompactError, OSError) as e:
        die(str(e))
    click.echo(
        f"{res.folders} folders: {res.files_before} files -> {res.files_after} "
        f"({res.rows} rows rewritten)"
        + (f"; {res.temp_removed} stale temporary files removed" if res.temp_removed else "")
    )
    for line in res.skipped:
        err(f"leakreport: incomplete: left as it is: {line}")
    if res.skipped:
        raise SystemExit(exitcodes.INCOMPLETE)


@click.command()
@click.argument("bucket")
@click.option(
    "--before",
    callback=parse_date,
    help="Derive days before this date (default: before today, UTC).",
)
@verbosity_options
def rollup(bucket: str, before: dt.date | None) -> None:
    """Store the rollup tier of each finished host-day, so analyses read it instead
    of re-deriving those days from raw samples.

    BUCKET is a folder or s3://bucket/prefix. Only host-days whose tier is missing
    or stale (the rollup SQL changed, late files arrived, compaction ran since)
    are derived; analyses give the same findings with or without the tier. Run it
    after `leakreport compact`.

    \b
    Example (daily cron):
      leakreport compact /data/traces && leakreport rollup /data/traces
    """
    from analyzer.tier import build

    try:
        res = build(bucket, before, progress=console())
    except (OSError, RuntimeError) as e:
        die(str(e))
    click.echo(f"{res.built} host-days derived, {res.current} already current")
    for line in res.skipped or []:
        err(f"leakreport: incomplete: left out: {line}")
    if res.skipped:
        raise SystemExit(exitcodes.INCOMPLETE)
