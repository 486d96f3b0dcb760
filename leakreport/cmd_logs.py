"""``leakreport logs``: read server logs the way the analyzer does."""

from __future__ import annotations

import sys
import time

import click

from analyzer import exitcodes
from collector.clikit import tz_option
from leakreport.common import console, die, verbosity_options, write_out

_TZ = tz_option(
    "Zone of timestamps that carry no offset (an IANA name such as Europe/Berlin).", "UTC"
)


@click.group()
def logs() -> None:
    """Read SGLang / vLLM / PyTorch server logs the way the analyzer does.

    \b
    Examples:
      leakreport logs parse /var/log/sglang.log --format table
      leakreport logs grade tests/corpus/labels
    """


@logs.command("parse")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--engine",
    type=click.Choice(["auto", "sglang", "vllm"]),
    default="auto",
    show_default=True,
    help="Which server wrote the log (auto: decided per line).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "table"]),
    default="jsonl",
    show_default=True,
    help="jsonl: one JSON object per event; table: one line per event for people.",
)
@click.option("--year", type=int, help="Year for timestamps that carry none (vLLM's MM-DD).")
@_TZ
@click.option("--out", type=click.Path(dir_okay=False), help="Write output here instead of stdout.")
@verbosity_options
def logs_parse(
    file: str, engine: str, fmt: str, year: int | None, tz: str, out: str | None
) -> None:
    """One JSON object per recognised event in FILE: {line, event, engine, ts, fields}.

    Events: batch_stats, kv_leak_check, oom, server_args, fast_image_processor,
    engine_version, kv_capacity. Unrecognised lines produce nothing. A record
    wrapped over several lines is read as one (the event keeps its first line).
    ts is UTC: the engine's own stamp wins over a shipper's in front of it, offsets
    are honoured, stamps without one are read in --tz.

    \b
    Example:
      leakreport logs parse /var/log/sglang.log --format table
    """
    from analyzer import logparse

    t0 = time.perf_counter()
    try:  # read and parsed a chunk at a time: memory stays bounded on any log size
        frame, n_lines = logparse.parse_file(file, engine, year, tz=tz, text=False)
    except OSError as e:
        die(f"{file}: {e}")
    if fmt == "jsonl":
        text = logparse.to_jsonl(frame)
    else:
        rows = [
            f"{e['line']:>8} {e['event']:22} {e['engine'] or '-':7} {e['ts'] or '-':20} "
            + " ".join(f"{k}={v}" for k, v in e["fields"].items())
            for e in logparse.events(frame)
        ]
        text = "\n".join(rows) + ("\n" if rows else "")
    write_out(text, out)
    console()(f"{file}: {n_lines} lines, {frame.height} events in {time.perf_counter() - t0:.2f}s")


@logs.command("grade")
@click.argument("labels", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--year", type=int, help="Year for timestamps that carry none (vLLM's MM-DD).")
@_TZ
@click.option("--json", "as_json", is_flag=True, help="Print the grade as JSON instead of a table.")
@click.option("--show", is_flag=True, help="Also list every miss, wrong field and false event.")
@verbosity_options
def logs_grade(
    labels: tuple[str, ...], year: int | None, tz: str, as_json: bool, show: bool
) -> None:
    """Measure the parser on hand-labelled log lines: found / fields right / false events.

    LABELS are JSON Lines files (or folders of *.jsonl), one expected event per row:
    {"line": 12, "event": "oom", "fields": {"gpu": 0, "tried_bytes": 39845888}}, with
    optional "ts" and "text" (the start of the line, checked). Every line without a
    row must yield no event. The log file is "file" in the first row, else X.txt or
    X.log beside the labels folder for labels/X.jsonl.

    \b
    Example:
      leakreport logs grade tests/corpus/labels --show

    \b
    Exit codes:
      0  every label found with the right fields, no false events
      1  misses, wrong fields or false events
      2  a labels file that cannot be read (the message names file and line)
      3  the parser raised on a log file (graded incomplete)
    """
    import json
    from pathlib import Path

    from analyzer import loggrade

    try:
        g = loggrade.grade([Path(p) for p in labels], year=year, tz=tz)
    except loggrade.LabelError as e:
        die(str(e))
    if as_json:
        write_out(json.dumps(g.to_dict(), indent=2) + "\n", None)
    else:
        write_out(g.table(), None)
    if show:
        for f in g.files:
            for p in f.problems:
                console()(f"{f.log}: {p}")
    if any(f.crashed for f in g.files):
        sys.exit(exitcodes.INCOMPLETE)
    sys.exit(exitcodes.OK if g.perfect else exitcodes.FINDINGS)
