"""``leakcollect import``: load data a team already has into a bucket."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any, NoReturn

import click

from collector import exitcodes
from collector.clikit import tz_option

TZ_HELP = (
    "Time zone of timestamps that carry none (nvidia-smi and most servers print local "
    "time), e.g. Europe/Berlin or +02:00. Default: UTC."
)


def _die(msg: str) -> NoReturn:
    click.echo(f"leakcollect: {msg}", err=True)
    raise SystemExit(exitcodes.NOTHING)


def _store(
    bucket: str, host: str, table: str, rows: list[dict[str, Any]], before: int = 0
) -> list[str]:
    """Write rows into the bucket; the files written. When it cannot: exit 2 (nothing
    written), or 1 where ``before`` rows went in already (a re-import is de-duplicated
    when read)."""
    from collector.writer import BucketWriter

    if not rows:
        return []
    try:
        return [str(f) for f in BucketWriter(bucket, host).write(table, rows)]
    except (OSError, ValueError) as e:
        if not before:
            _die(f"cannot write {table} to {bucket}: {e}")
        click.echo(
            f"leakcollect: cannot write {table} to {bucket}: {e}; {before} rows were "
            "written before it (importing the file again once it can be written is safe: "
            "the analysis reads each row once)",
            err=True,
        )
        sys.exit(exitcodes.PARTIAL)


def _write(
    bucket: str,
    host: str,
    table: str,
    rows: list[dict[str, Any]],
    before: int = 0,
    files: list[str] | None = None,
) -> None:
    """Write the last rows and say how many went into how many files (``before`` rows
    in ``files`` were written already)."""
    written = (files or []) + _store(bucket, host, table, rows, before)
    if written:
        n_files = f"{len(written)} file" + ("" if len(written) == 1 else "s")
        click.echo(f"{before + len(rows)} rows into {n_files} of {table}", err=True)


def _record_run(bucket: str, host: str, kind: str, first: dt.datetime | None, rows: int) -> None:
    """A ``collector_runs`` row for an import of device samples, stamped at its first
    sample: the analysis quarantines samples stamped before a host's first collector run
    (a clock that went back), and history imported before the collector ran is not that.
    An import of /metrics history writes one the same way (promimport)."""
    if first is None or not rows:
        return
    now = dt.datetime.now(dt.UTC)
    run = {"ts": first, "run_id": f"import {kind} {now:%Y%m%dT%H%M%S.%fZ}", "source": f"import:{kind}",
           "status": "ok", "rows": rows, "finished": now}  # fmt: skip
    _store(bucket, host, "collector_runs", [run], rows)


def _first(rows: list[dict[str, Any]], first: dt.datetime | None = None) -> dt.datetime | None:
    return min(
        [r["ts"] for r in rows if r.get("ts") is not None] + ([first] if first else []),
        default=None,
    )


_HOST = click.option(
    "--host", required=True, help="Host name the rows belong to (the bucket's host= partition)."
)
_BUCKET = click.option(
    "--bucket", required=True, help="Bucket to write into: a folder or s3://bucket/prefix."
)
_TZ = tz_option(TZ_HELP)


@click.group("import")
def import_() -> None:
    """Load data you already have into a bucket (nvidia-smi logs, server logs, Prometheus).

    \b
    Example (nvidia-smi log plus the server's log, then a report):
      leakcollect import nvidia-smi-csv smi.csv --host gpu-7 --bucket B --tz Europe/Berlin
      leakcollect import server-log sglang.log --host gpu-7 --bucket B --tz Europe/Berlin
      leakreport report B --out report.html
    """


@import_.command("nvidia-smi-csv")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@_HOST
@_BUCKET
@click.option(
    "--start",
    help="ISO time of the first sample, when the file has no timestamp column (in --tz "
    "unless it has an offset; default: the last sample is at the file's modification time).",
)
@click.option(
    "--interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.001),
    help="Seconds between samples (nvidia-smi -l N), when the file has no timestamp column.",
)
@click.option(
    "--columns",
    help="Header for noheader output, e.g. 'index,memory.used [MiB]' (values without a unit "
    "are read in the header's unit, MiB when it has none).",
)
@_TZ
def import_smi(
    file: str,
    host: str,
    bucket: str,
    start: str | None,
    interval: float,
    columns: str | None,
    tz: str | None,
) -> None:
    """nvidia-smi --query-gpu=... --format=csv [-l N] output, also mixed with other text.

    Rows of a --query-compute-apps section become per-process rows; banners, tables
    and blank lines are skipped and counted.

    \b
    Example:
      nvidia-smi --query-gpu=timestamp,index,uuid,memory.used,memory.total,utilization.gpu \\
        --format=csv -l 10 > smi.csv
      leakcollect import nvidia-smi-csv smi.csv --host gpu-7 --bucket /data/traces
    """
    from collector.importers import ImportError_, read_nvidia_smi_csv, zone

    files: list[str] = []  # written a chunk at a time while the file is read
    first: dt.datetime | None = None  # of the rows written while reading

    def flush(rows: list[dict[str, Any]], before: int) -> None:
        nonlocal first
        files.extend(_store(bucket, host, "gpu_samples", rows, before))
        first = _first(rows, first)

    try:
        t0 = dt.datetime.fromisoformat(start.replace("Z", "+00:00")) if start else None
        if t0 and t0.tzinfo is None:  # a wall-clock time, as the log's own: in --tz
            t0 = t0.replace(tzinfo=zone(tz))
        got = read_nvidia_smi_csv(
            file, host, start=t0, interval=interval, columns=columns, tz=tz, flush=flush
        )
    except (ImportError_, ValueError) as e:
        _die(str(e))
    click.echo(f"{file}: {got.summary()}", err=True)
    if not got.rows and not got.processes and not got.written:
        _die(f"{file}: no nvidia-smi rows found")
    _write(bucket, host, "gpu_samples", got.rows, got.written, files)
    _write(bucket, host, "gpu_processes", got.processes)
    n = got.written + len(got.rows) + len(got.processes)
    _record_run(bucket, host, "nvidia-smi-csv", _first(got.rows + got.processes, first), n)


@import_.command("gpu-memory-log")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@_HOST
@_BUCKET
@click.option("--gpu", default=0, show_default=True, type=int, help="GPU index of the values.")
@click.option("--total-mib", type=float, help="The GPU's memory in MiB, if known.")
@_TZ
def import_memlog(
    file: str, host: str, bucket: str, gpu: int, total_mib: float | None, tz: str | None
) -> None:
    """'<time> <MiB>' lines, or a `date; nvidia-smi --query-gpu=memory.used` loop.

    \b
    Example:
      leakcollect import gpu-memory-log mem.log --host gpu-7 --bucket B --total-mib 81559
    """
    from collector.importers import ImportError_
    from collector.memlog import read_gpu_memory_log

    try:
        got = read_gpu_memory_log(file, host, gpu=gpu, total_mib=total_mib, tz=tz)
    except (ImportError_, ValueError) as e:
        _die(str(e))
    click.echo(f"{file}: {got.summary()}", err=True)
    if not got.rows:
        _die(f"{file}: no memory samples found")
    _write(bucket, host, "gpu_samples", got.rows)
    _record_run(bucket, host, "gpu-memory-log", _first(got.rows), len(got.rows))


@import_.command("server-log")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@_HOST
@_BUCKET
@click.option("--year", type=int, help="Year for timestamps without one (vLLM's MM-DD).")
@_TZ
def import_log(file: str, host: str, bucket: str, year: int | None, tz: str | None) -> None:
    """A whole past SGLang / vLLM server log (the lines the analyzer reads).

    \b
    Example:
      leakcollect import server-log /var/log/sglang.log --host gpu-7 --bucket B
    """
    from collector.importers import ImportError_
    from collector.logimport import server_log

    try:
        rows = server_log(file, host, year=year, tz=tz)
    except (ImportError_, ValueError, OSError, EOFError) as e:  # EOFError: a cut-off gzip
        _die(f"{file}: {e or 'ends before its end (a cut-off gzip file?)'}")
    if not rows:
        _die(f"{file}: no line matched a known server-log signature: nothing written")
    _write(bucket, host, "log_lines", rows)
