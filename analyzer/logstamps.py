"""Log line timestamps, in two steps: ``stamps`` finds each line's stamp (regex work,
line by line, so any chunk of lines at a time), ``ts`` turns a parse's stamps into UTC.

The engine's own stamp wins over a collector's or docker's stamp in front of it; a
stamp with an offset (``Z``, ``+08:00``) is converted to UTC; a naive stamp is read in
``tz``. ``ts`` is ``YYYY-MM-DDTHH:MM:SS`` in UTC, or ``--MM-DDTHH:MM:SS`` when the year
is unknown.
"""

from __future__ import annotations

import polars as pl

from analyzer import logformats as F
from collector.importers import fixed_offset
from collector.logimport import FOLD_STEP

_TEXT = pl.col("text")
COLUMNS = ("_stamp", "_off", "_no_year")


def to_utc(stamp: pl.Expr, offset: pl.Expr, tz: str) -> pl.Expr:
    """'YYYY-MM-DD HH:MM:SS' + optional offset ('Z', '+0800', '+08:00') -> UTC datetime."""
    off = offset.str.replace("^Z$", "+00:00").str.replace(r"^([+-]\d\d)(\d\d)$", "$1:$2")
    fixed = fixed_offset(tz)
    if fixed is not None:  # a naive stamp is read at this offset, as if it carried it
        off = off.fill_null(pl.lit(fixed))
    aware = (stamp + off).str.to_datetime("%Y-%m-%d %H:%M:%S%:z", strict=False, time_zone="UTC")
    if fixed is not None:
        return aware
    naive = stamp.str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False)
    if tz != "UTC":
        first, second = (
            naive.dt.replace_time_zone(tz, ambiguous=a, non_existent="null").dt.convert_time_zone(
                "UTC"
            )
            for a in ("earliest", "latest")
        )
        naive = _second_pass(first, second)
    else:
        naive = naive.dt.replace_time_zone("UTC")
    return pl.when(offset.is_not_null()).then(aware).otherwise(naive)


def _second_pass(first: pl.Expr, second: pl.Expr) -> pl.Expr:
    """Of a wall time the zone shows twice (the hour a daylight-saving clock is set back),
    the first, or the second where it reads earlier than a line before it: the log went
    on through that hour and wrote its times again (a step back past
    :data:`collector.logimport.FOLD_STEP`, as the import reads it). In line order; the latest time so far
    is taken twice, the second time over the first pass's choices, so that the whole
    repeated hour, not only its start, reads as the second."""

    def pick(latest: pl.Expr) -> pl.Expr:
        back = first < latest.cum_max().shift(1) - FOLD_STEP
        return pl.when((first != second) & back).then(second).otherwise(first)

    return pick(pick(first))


def stamps(ev: pl.DataFrame, year: int | None) -> pl.DataFrame:
    """Each line's stamp as written (``_stamp``), its offset (``_off``) and whether it lacks
    a year (``_no_year``): the regex work, line by line; ``ts`` turns them into ``ts``."""
    head = _TEXT.str.slice(0, 160)  # stamps sit at the start; long lines are not scanned
    if ev["text"].str.contains(r"^\d{4}-\d\d-\d\d").any():  # a shipper's stamp in front
        outer = head.str.extract_groups(f"({F.OUTER})")  # 1: all of it (one scan, not two)
        ev = ev.with_columns(
            head.str.strip_prefix(outer.struct.field("1").fill_null("")).alias("_rest"),
            (outer.struct.field("2") + " " + outer.struct.field("3")).alias("_outer"),
            outer.struct.field("4").alias("_outer_off"),
        )
    else:  # (the same result, without the scans)
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
    return ev.with_columns(
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
    ).drop("_rest", "_outer", "_outer_off")


def ts(tz: str, offsets: bool) -> pl.Expr:
    """``ts`` from ``stamps``' columns, the same way for all the events of a parse (so
    ``offsets``: whether any of them has a stamp with an offset)."""
    stamp, off = pl.col("_stamp"), pl.col("_off")
    if tz == "UTC" and not offsets:
        # the common case: nothing to convert, the stamp is the answer
        when = stamp.str.replace(" ", "T")
        return pl.when(pl.col("_no_year")).then(pl.lit("--") + when.str.slice(5)).otherwise(when)
    utc = to_utc(stamp, off, tz)
    return (
        pl.when(pl.col("_no_year"))
        .then(pl.lit("--") + utc.dt.strftime("%m-%dT%H:%M:%S"))
        .otherwise(utc.dt.strftime("%Y-%m-%dT%H:%M:%S"))
    )
