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
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import polars as pl

from analyzer import logformats as F

EVENT_TYPES = F.EVENT_TYPES
_TEXT = pl.col("text")
# one pass over every line picks the few that any recogniser could name
_ANY = "|".join(f"(?:{rx})" for rx in F.RECOGNISE.values())


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
        return raw.cast(pl.Float64, strict=False) / 100.0
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


def _records(df: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Each event line joined with the lines that continue it (and, for an old
    SGLang leak check, the ``available_size=`` line just before it): ``record`` with a
    space between the lines, ``record_tight`` without (null where nothing was joined)."""
    n = df.height
    texts = df["text"]
    idx = events["line"].cast(pl.Int64) - 1
    is_event = pl.Series("e", [False] * n).scatter(idx, True)

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
    tight = pl.Series("t", [None] * events.height, dtype=pl.String)
    ok, nxt = continues(idx + 1)
    if ok.any():  # rare: only those rows go round again
        rows = ok.arg_true()
        sub_idx = idx.gather(rows)
        sub = pl.DataFrame(
            {
                "record": record.gather(rows) + " " + nxt.gather(rows),
                "tight": record.gather(rows) + nxt.gather(rows),
                "open": pl.Series([True] * len(rows)),
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


def _utc(stamp: pl.Expr, offset: pl.Expr, tz: str) -> pl.Expr:
    """'YYYY-MM-DD HH:MM:SS' + optional offset ('Z', '+0800', '+08:00') -> UTC datetime."""
    off = offset.str.replace("^Z$", "+00:00").str.replace(r"^([+-]\d\d)(\d\d)$", "$1:$2")
    aware = (stamp + off).str.to_datetime("%Y-%m-%d %H:%M:%S%:z", strict=False, time_zone="UTC")
    naive = stamp.str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False)
    if tz != "UTC":
        naive = naive.dt.replace_time_zone(
            tz, ambiguous="earliest", non_existent="null"
        ).dt.convert_time_zone("UTC")
    else:
        naive = naive.dt.replace_time_zone("UTC")
    return pl.when(offset.is_not_null()).then(aware).otherwise(naive)


def _timestamps(ev: pl.DataFrame, year: int | None, tz: str) -> pl.DataFrame:
    head = _TEXT.str.slice(0, 160)  # stamps sit at the start; long lines are not scanned
    if ev["text"].str.contains(r"^\d{4}-\d\d-\d\d").any():  # a shipper's stamp in front
        outer = head.str.extract_groups(F.OUTER)
        ev = ev.with_columns(
            head.str.replace(F.OUTER, "").alias("_rest"),
            (outer.struct.field("1") + " " + outer.struct.field("2")).alias("_outer"),
            outer.struct.field("3").alias("_outer_off"),
        )
    else:
        ev = ev.with_columns(
            head.alias("_rest"),
            pl.lit(None, dtype=pl.String).alias("_outer"),
            pl.lit(None, dtype=pl.String).alias("_outer_off"),
        )
    full_g = pl.col("_rest").str.extract_groups(F.FULL)
    md_g = pl.col("_rest").str.extract_groups(F.MONTH_DAY)
    full = full_g.struct.field("1") + " " + full_g.struct.field("2")
    md = md_g.struct.field("1") + " " + md_g.struct.field("2")
    md_year = pl.lit(str(year)) if year else pl.col("_outer").str.slice(0, 4)
    ev = ev.with_columns(
        pl.coalesce(full, pl.coalesce(md_year, pl.lit("2000")) + "-" + md, pl.col("_outer")).alias(
            "_stamp"
        ),
        pl.when(full.is_not_null())
        .then(full_g.struct.field("3"))
        .when(md.is_not_null())
        .then(pl.lit(None, dtype=pl.String))
        .otherwise(pl.col("_outer_off"))
        .alias("_off"),
        (full.is_null() & md.is_not_null() & md_year.is_null()).alias("_no_year"),
    )
    stamp, off = pl.col("_stamp"), pl.col("_off")
    if tz == "UTC" and ev["_off"].null_count() == ev.height:
        # the common case: nothing to convert, the stamp is the answer
        when = stamp.str.replace(" ", "T")
        ts = pl.when(pl.col("_no_year")).then(pl.lit("--") + when.str.slice(5)).otherwise(when)
    else:
        utc = _utc(stamp, off, tz)
        ts = (
            pl.when(pl.col("_no_year"))
            .then(pl.lit("--") + utc.dt.strftime("%m-%dT%H:%M:%S"))
            .otherwise(utc.dt.strftime("%Y-%m-%dT%H:%M:%S"))
        )
    return ev.with_columns(ts.alias("ts")).drop(
        "_rest", "_outer", "_outer_off", "_stamp", "_off", "_no_year"
    )


def parse_frame(
    lines: pl.Series, engine: str = "auto", year: int | None = None, *, tz: str = "UTC"
) -> pl.DataFrame:
    """One row per recognised event: line (1-based), event, engine, ts, and field columns.

    ``tz`` names the zone of stamps that carry no offset (an IANA name; default UTC)."""
    ZoneInfo(tz)  # an unknown zone fails here, naming it
    df = pl.DataFrame({"text": lines.cast(pl.String)}).with_row_index("line", offset=1)
    df = df.with_columns(pl.col("text").fill_null(""))
    cand = df.filter(_TEXT.str.contains_any(F.LITERALS, ascii_case_insensitive=True))
    cand = cand.filter(_TEXT.str.contains(_ANY))
    # comment lines ("# ...") are never events, except vLLM's "# GPU blocks: N" (and cuda/npu...)
    cand = cand.filter(~_TEXT.str.contains(r"^\s*#") | _TEXT.str.contains(r"^\s*# \w+ blocks:"))
    cand = cand.with_columns(_classify().alias("event")).filter(pl.col("event").is_not_null())
    cand = cand.filter(~_TEXT.str.replace(F.OUTER, "").str.contains(F.CODE_LINE))
    if cand.height == 0:
        return pl.DataFrame(
            schema={
                "line": pl.UInt32,
                "event": pl.String,
                "engine": pl.String,
                "ts": pl.String,
                "text": pl.String,
            }
        )
    cand = _records(df, cand)
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
    cand = _timestamps(cand.with_columns(eng.alias("engine")), year, tz)
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
    # the engine of a line that does not say falls back to the file's majority
    known = out.filter(pl.col("engine").is_not_null())["engine"]
    if known.len():
        out = out.with_columns(pl.col("engine").fill_null(known.mode().sort()[0]))
    return out.sort("line", "event")


def _implied(sub: pl.DataFrame) -> list[pl.DataFrame]:
    """Events a configuration line states besides its flags: SGLang's ServerArgs says
    whether the fast image processor is on; vLLM's engine-config line (and a version
    line collapsed onto an args line) says the version."""
    keep = ["line", "text", "engine", "ts"]
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
    """Every line of the file (empty lines kept, so line numbers hold), read in Rust.

    Invalid UTF-8 is replaced. A line containing the unit-separator byte (0x1f) is
    cut there: the reader splits on it."""
    if Path(path).stat().st_size == 0:
        return pl.Series("text", [], dtype=pl.String)
    df = pl.read_csv(
        path,
        has_header=False,
        separator="\x1f",
        quote_char=None,
        new_columns=["text"],
        truncate_ragged_lines=True,
        encoding="utf8-lossy",
        infer_schema=False,
    )
    return df["text"].fill_null("")


def events(frame: pl.DataFrame) -> Iterator[dict[str, Any]]:
    """JSON-ready events: {line, event, engine, ts, fields} with only the fields found."""
    cols = [c for c in frame.columns if c not in ("line", "event", "engine", "ts", "text")]
    for row in frame.iter_rows(named=True):
        wanted = F.FIELDS[row["event"]]
        fields = {
            k: row[k]
            for k in cols
            if row[k] is not None
            and (k in wanted or (row["event"] == "fast_image_processor" and k == "enabled"))
        }
        if row["event"] == "batch_stats" and row.get("kv_usage_ratio") is not None:
            fields["kv_usage_ratio"] = round(row["kv_usage_ratio"], 6)
        yield {
            "line": row["line"],
            "event": row["event"],
            "engine": row["engine"],
            "ts": row["ts"],
            "fields": fields,
        }


def to_jsonl(frame: pl.DataFrame) -> str:
    return "".join(json.dumps(e, sort_keys=False) + "\n" for e in events(frame))
