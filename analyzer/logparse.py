"""Parse SGLang / vLLM / PyTorch log text into events, vectorised with polars.

Lines are classified by what they say, not where: each event type has a
recognising pattern (``analyzer.logformats``), and each field is pulled out by
its key (``#running-req:``, ``Running: N reqs``, ``mem_fraction_static=``,
``'gpu_memory_utilization': ``...), so reordered, truncated or newer formats
still yield what they carry. A record hard-wrapped over several lines (a
terminal, a shipper, a message that spans lines) is read as one: the lines that
continue an event line lend it their fields, and the event keeps the line
number of the line that names it. Lines that match nothing produce nothing;
nothing stops the run.

Timestamps: the engine's own stamp wins over a collector's or docker's stamp in
front of it; a stamp with an offset (``Z``, ``+08:00``) is converted to UTC; a
naive stamp is read in ``tz`` (default UTC). ``ts`` is ``YYYY-MM-DDTHH:MM:SS``
in UTC, or ``--MM-DDTHH:MM:SS`` when the year is unknown (vLLM's ``MM-DD``
without ``year`` and without a dated prefix).

Speed and memory: lines are parsed a chunk at a time (``WORKERS`` chunks at once),
each chunk with the lines around it that its records can reach, so the result is
the same for any chunk size (``analyzer.logread``). One regex screen of plain
strings (``logformats.SCREEN``) passes the few lines a recogniser could name; only
those are classified and read.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl

from analyzer import logformats as F
from analyzer import logread, logstamps
from collector.importers import zone

EVENT_TYPES = F.EVENT_TYPES
_TEXT = pl.col("text")
CHUNK_LINES = 250_000
# chunks parsed at once: one per core this process may use (each holds about 3x a chunk)
WORKERS = max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2))


def _first(patterns: list[str], group: int = 1) -> pl.Expr:
    """The first pattern that matches; each read first in the record joined without
    spaces (a terminal's hard wrap cuts words), then with them (a sentence's wrap)."""
    exprs = [
        pl.coalesce(pl.col(c).str.extract(p, group) for c in ("record_tight", "record"))
        for p in patterns
    ]
    return pl.coalesce(exprs) if len(exprs) > 1 else exprs[0]


def _field_expr(kind: str, patterns: list[str]) -> pl.Expr:
    if kind == "bytes":  # number and unit from one scan per pattern
        values = []
        for p in patterns:
            for c in ("record_tight", "record"):  # as in _first
                g = pl.col(c).str.extract_groups(p)
                num = g.struct.field("1").cast(pl.Float64, strict=False)
                unit = g.struct.field("2").replace_strict(
                    F.UNITS, default=None, return_dtype=pl.Float64
                )
                values.append(num * unit)
        return pl.coalesce(values).round(0).cast(pl.Int64, strict=False)
    raw = _first(patterns)
    if kind == "int":
        return raw.str.replace_all(",", "").cast(pl.Int64, strict=False)
    if kind == "float":
        return raw.cast(pl.Float64, strict=False)
    if kind == "pct":
        # times 0.01, not / 100: polars divides a column by a constant as a multiplication
        # by its inverse but one row exactly, so the last bit would hang on the row count
        return raw.cast(pl.Float64, strict=False) * 0.01
    if kind == "lower":
        return raw.str.to_lowercase().str.replace_all(" ", "_")
    if kind == "bool":
        return raw.str.to_lowercase().replace_strict(
            {"true": True, "fast": True, "false": False, "slow": False},
            default=None,
            return_dtype=pl.Boolean,
        )
    return raw


def _classify() -> pl.Expr:
    event = pl.lit(None, dtype=pl.String)
    for name in reversed(EVENT_TYPES):
        event = pl.when(_TEXT.str.contains(F.RECOGNISE[name])).then(pl.lit(name)).otherwise(event)
    return event


def _records(df: pl.DataFrame, events: pl.DataFrame, first: int) -> pl.DataFrame:
    """Each event line joined with the lines that continue it (and, for an old
    SGLang leak check, the ``available_size=`` line just before it): ``record`` with a
    space between the lines, ``record_tight`` without (null where nothing was joined)."""
    n = df.height
    texts = df["text"]
    idx = events["line"].cast(pl.Int64) - first
    is_event = pl.repeat(False, n, eager=True).scatter(idx, True)

    def continues(pos: pl.Series) -> tuple[pl.Series, pl.Series]:
        at = pos.clip(0, n - 1)
        nxt = texts.gather(at).fill_null("")
        ok = (
            (pos < n)
            & (nxt.str.len_chars() > 0)
            & ~nxt.str.contains(F.NEW_RECORD)
            & ~is_event.gather(at)
        )
        return ok, nxt

    record = events["text"]
    tight = pl.repeat(None, events.height, dtype=pl.String, eager=True)
    ok, nxt = continues(idx + 1)
    if ok.any():  # rare: only those rows go round again
        rows = ok.arg_true()
        sub_idx = idx.gather(rows)
        sub = pl.DataFrame(
            {
                "record": record.gather(rows) + " " + nxt.gather(rows),
                "tight": record.gather(rows) + nxt.gather(rows),
                "open": pl.repeat(True, len(rows), eager=True),
            }
        )
        for k in range(2, F.MAX_CONTINUATION + 1):
            ok_k, nxt_k = continues(sub_idx + k)
            sub = sub.with_columns(pl.col("open") & ok_k, nxt_k.alias("nxt")).with_columns(
                pl.when("open").then(pl.col("record") + " " + pl.col("nxt")).otherwise("record"),
                pl.when("open").then(pl.col("tight") + pl.col("nxt")).otherwise("tight"),
            )
        record = record.scatter(rows, sub["record"])
        tight = tight.scatter(rows, sub["tight"])
    leaks = ((events["event"] == "kv_leak_check") & (idx > 0)).arg_true()
    if len(leaks):
        prev = texts.gather(idx.gather(leaks) - 1)
        before = ~events["text"].gather(leaks).str.contains("available") & prev.str.contains(
            r"available_size=\d"
        )
        joined = pl.select(
            pl.when(before).then(prev + " " + record.gather(leaks)).otherwise(record.gather(leaks))
        ).to_series()
        record = record.scatter(leaks, joined)
    return events.with_columns(record.alias("record"), tight.alias("record_tight"))


_STAMP_COLS = logstamps.COLUMNS
# the output's columns in a fixed order: the same frame whichever events a chunk holds
_ORDER = ["line", "text", "event", "engine", "ts"] + list(
    dict.fromkeys(
        f
        for name in EVENT_TYPES
        for f in (*F.FIELDS[name], *(["enabled", "version"] if name == "server_args" else []))
        if f != "kv_usage_pct"
    )
)
_EMPTY = {"line": pl.UInt32, "event": pl.String, "engine": pl.String, "ts": pl.String}
_Job = Callable[[], tuple[pl.DataFrame | None, int]]


def _scan(
    lines: pl.Series,
    first: int,
    keep: tuple[int, int],
    engine: str,
    year: int | None,
    text: bool = True,
) -> pl.DataFrame | None:
    """The events of lines numbered ``first``... whose line is in ``keep`` (from, to),
    with stamps not yet turned into ``ts``; the other lines are context (a record's
    neighbours). None when there are none."""
    df = pl.DataFrame({"text": lines.cast(pl.String)}).with_row_index("line", offset=first)
    df = df.with_columns(pl.col("text").fill_null(""))
    if df["text"].str.contains("\x1b", literal=True).any():  # a coloured log
        df = df.with_columns(_TEXT.str.replace_all(F.ANSI, ""))
    cand = df.filter(_TEXT.str.contains(F.SCREEN))
    # comment lines ("# ...") are never events, except vLLM's "# GPU blocks: N" (and cuda/npu...)
    cand = cand.filter(~_TEXT.str.contains(r"^\s*#") | _TEXT.str.contains(r"^\s*# \w+ blocks:"))
    cand = cand.with_columns(_classify().alias("event")).filter(pl.col("event").is_not_null())
    cand = cand.filter(~_TEXT.str.replace(F.OUTER, "").str.contains(F.CODE_LINE))
    cand = cand.filter(~_TEXT.str.slice(0, F.REQUEST_HEAD).str.contains(F.REQUEST_LINE))
    if cand.height == 0:
        return None
    cand = _records(df, cand, first).filter(pl.col("line").is_between(*keep, closed="left"))
    if cand.height == 0:
        return None
    if engine == "auto":
        head = _TEXT.str.slice(0, 600)  # an engine's marks sit early; configs are long
        eng = (
            pl.when(head.str.contains(F.SGLANG))
            .then(pl.lit("sglang"))
            .when(head.str.contains(F.VLLM))
            .then(pl.lit("vllm"))
            .otherwise(pl.lit(None, dtype=pl.String))
        )
    else:
        eng = pl.lit(engine)
    cand = logstamps.stamps(cand.with_columns(eng.alias("engine")), year)
    parts = []
    for name in EVENT_TYPES:
        sub = cand.filter(pl.col("event") == name)
        if sub.height == 0:
            continue
        fields = F.FIELDS[name]
        sub = sub.with_columns(
            [_field_expr(kind, pats).alias(f) for f, (kind, pats) in fields.items()]
        )
        if name == "batch_stats":  # one KV-usage ratio whatever the engine logged
            sub = sub.with_columns(
                pl.coalesce("kv_usage_ratio", "kv_usage_pct").alias("kv_usage_ratio")
            ).drop("kv_usage_pct")
        parts.append(sub)
        if name == "server_args":
            parts += _implied(sub)
    out = pl.concat(parts, how="diagonal_relaxed").drop("record", "record_tight")
    # + "": the events' own copy of their text; a slice would keep the chunk's whole buffer
    out = out.with_columns(_TEXT + "") if text else out.drop("text")
    return out.sort("line", "event")  # chunks come in line order: no sort of the whole


def _finish(parts: list[pl.DataFrame], tz: str, text: bool = True) -> pl.DataFrame:
    """One frame from the chunks' events (each in line order): ``ts``, the file's majority
    engine. Part by part, then put side by side without a copy: memory holds the events
    once, however many there are."""
    if not parts:
        return pl.DataFrame(schema={**_EMPTY, "text": pl.String} if text else _EMPTY)
    offsets = any(p["_off"].null_count() < p.height for p in parts)
    ts = logstamps.ts(tz, offsets).alias("ts")
    for i, p in enumerate(parts):
        parts[i] = p.with_columns(ts).drop(*_STAMP_COLS)
    out = pl.concat(parts, how="diagonal_relaxed", rechunk=False)
    out = out.select(c for c in _ORDER if c in out.columns)
    # the engine of a line that does not say falls back to the file's majority
    known = out["engine"].drop_nulls()
    if known.len():
        out = out.with_columns(pl.col("engine").fill_null(known.mode().sort()[0]))
    return out


def _run(jobs: Iterator[_Job], tz: str, text: bool = True) -> tuple[pl.DataFrame, int]:
    """Runs the chunk jobs ``WORKERS`` at a time (polars lets go of the GIL), few ahead so
    memory stays bounded; each chunk's lines are numbered after the chunks before it."""
    parts: list[pl.DataFrame] = []
    line = 0
    with ThreadPoolExecutor(WORKERS) as pool:
        pending: deque[Future[tuple[pl.DataFrame | None, int]]] = deque()

        def take() -> None:
            nonlocal line
            frame, n = pending.popleft().result()
            if frame is not None:
                parts.append(frame.with_columns((pl.col("line") + line).cast(pl.UInt32)))
            line += n

        for job in jobs:
            pending.append(pool.submit(job))
            if len(pending) > WORKERS:
                take()
        while pending:
            take()
    return _finish(parts, tz, text), line


def parse_frame(
    lines: pl.Series,
    engine: str = "auto",
    year: int | None = None,
    *,
    tz: str = "UTC",
    chunk_lines: int = CHUNK_LINES,
) -> pl.DataFrame:
    """One row per recognised event: line (1-based), event, engine, ts, and field columns.

    ``tz`` names the zone of stamps that carry no offset (an IANA name; default UTC).
    Long inputs are parsed ``chunk_lines`` at a time, with the same result."""
    zone(tz)  # an unknown zone fails here, naming it
    n, step, ctx = lines.len(), max(chunk_lines, 1), F.MAX_CONTINUATION

    def job(lo: int) -> _Job:
        hi = min(lo + step, n)
        a = max(lo - 1, 0)  # from the line before (an old leak check's numbers)
        window = lines.slice(a, min(hi + ctx, n) - a)
        return lambda: (_scan(window, a + 1 - lo, (1, hi - lo + 1), engine, year), hi - lo)

    return _run((job(lo) for lo in range(0, n, step)), tz)[0]


def parse_file(
    path: str | Path,
    engine: str = "auto",
    year: int | None = None,
    *,
    tz: str = "UTC",
    chunk_bytes: int = logread.CHUNK_BYTES,
    text: bool = True,
) -> tuple[pl.DataFrame, int]:
    """``parse_frame`` of a file's lines, and how many lines it has, read ``chunk_bytes``
    at a time: memory holds a few chunks and the events, whatever the file's size.
    ``text=False`` leaves out the events' line text (what ``events`` does not show)."""
    zone(tz)

    def job(w: logread.Window) -> _Job:
        def run() -> tuple[pl.DataFrame | None, int]:
            lines = logread.decode(w.data)
            n = lines.len() - w.before - w.after
            return _scan(lines, 1 - w.before, (1, n + 1), engine, year, text), n

        return run

    windows = logread.windows(path, chunk_bytes, after=F.MAX_CONTINUATION)
    return _run((job(w) for w in windows), tz, text)


def _implied(sub: pl.DataFrame) -> list[pl.DataFrame]:
    """Events a configuration line states besides its flags: SGLang's ServerArgs says
    whether the fast image processor is on; vLLM's engine-config line (and a version
    line collapsed onto an args line) says the version."""
    keep = ["line", "text", "engine", *_STAMP_COLS]
    fip = sub.filter(pl.col("disable_fast_image_processor").is_not_null()).select(
        *keep,
        pl.lit("fast_image_processor").alias("event"),
        (~pl.col("disable_fast_image_processor")).alias("enabled"),
    )
    version = _field_expr(*F.FIELDS["engine_version"]["version"])
    ver = (
        sub.with_columns(version.alias("version"))
        .filter(pl.col("version").is_not_null())
        .select(*keep, pl.lit("engine_version").alias("event"), "version")
    )
    return [d for d in (fip, ver) if d.height]


def read_lines(path: str | Path) -> pl.Series:
    """Every line of the file (empty lines kept, so line numbers hold); see ``logread``."""
    return logread.read_lines(path)


def events(frame: pl.DataFrame) -> Iterator[dict[str, Any]]:
    """JSON-ready events: {line, event, engine, ts, fields} with only the fields found."""
    head = ("line", "event", "engine", "ts")
    cols = [c for c in frame.columns if c not in (*head, "text")]
    kinds = frame["event"].to_list()
    rows = {}  # per event type: its field names and its rows, in line order
    for name in set(kinds):
        wanted = [c for c in cols if c in F.FIELDS[name]]
        sub = frame.select(*head, *wanted).filter(pl.col("event") == name)
        rows[name] = (wanted, sub.iter_rows())
    for name in kinds:
        wanted, it = rows[name]
        line, event, engine, ts, *values = next(it)
        fields = {k: v for k, v in zip(wanted, values, strict=True) if v is not None}
        if "kv_usage_ratio" in fields:
            fields["kv_usage_ratio"] = round(fields["kv_usage_ratio"], 6)
        yield {"line": line, "event": event, "engine": engine, "ts": ts, "fields": fields}


def to_jsonl(frame: pl.DataFrame) -> str:
    return "".join(json.dumps(e, sort_keys=False) + "\n" for e in events(frame))
