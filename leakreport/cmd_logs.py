"""``leakreport logs``: read server logs the way the analyzer does."""

from __future__ import annotations

import time

import click

from leakreport.common import console, die, verbosity_options, write_out


@click.group()
def logs() -> None:
    """Read SGLang / vLLM / PyTorch server logs the way the analyzer does."""


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
@click.option("--out", type=click.Path(dir_okay=False), help="Write output here instead of stdout.")
@verbosity_options
def logs_parse(file: str, engine: str, fmt: str, year: int | None, out: str | None) -> None:
    """One JSON object per recognised event in FILE: {line, event, engine, ts, fields}.

    Events: batch_stats, kv_leak_check, oom, server_args, fast_image_processor,
    engine_version, kv_capacity. Unrecognised lines produce nothing.

    \b
    Example:
      leakreport logs parse /var/log/sglang.log --format table
    """
    from analyzer import logparse

    t0 = time.perf_counter()
    try:
        lines = logparse.read_lines(file)
    except OSError as e:
        die(f"{file}: {e}")
    frame = logparse.parse_frame(lines, engine, year)
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
    console()(
        f"{file}: {lines.len()} lines, {frame.height} events in {time.perf_counter() - t0:.2f}s"
    )
