"""Tier tables made from several raw tables of one host-day (:data:`analyzer.tier.JOINT`).

The idle segments (``03_idle_windows.sql``) need a host-day's device samples, metrics and
server log lines together. ``leakreport rollup`` runs the chain of rollup statements that
leads to them over that day's raw files alone (:func:`derive`). An analysis reads them for
the host-days where the file is current for the raw files of every source table (the same
name-hash as one-source tier files), and lists those host-days, by the rows' host and day
number, in ``idle_cover`` (:func:`cover`), so that the rollups derive idle segments for the
other host-days only (:func:`idle_view`). Made from one day alone, a day's first
buckets can be idle where a reading of the day before says otherwise: they are segments
of their own, checked again in the analysis (see the SQL).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from analyzer import rowcheck, tier, tiercurrent, tierweek
from analyzer.packs import referenced_params
from collector import filecheck, layout
from collector.schema import TABLES

if TYPE_CHECKING:
    from analyzer.tierread import TierUse

COVER_SQL = "CREATE OR REPLACE TABLE idle_cover (host VARCHAR, dn BIGINT)"


def prepare(con: duckdb.DuckDBPyConnection) -> None:
    """Once per rollup connection: empty tables to read where a host-day has no files of a
    source, and no covered host-days (the chain derives everything from the day's own files)."""
    con.execute(COVER_SQL)
    for name in sorted(tier.JOINT_SOURCES):
        con.register(f"__empty_{name}", pa.Table.from_pylist([], schema=TABLES[name].schema))


def derive(
    con: duckdb.DuckDBPyConnection,
    bucket: str | os.PathLike[str],
    root: str,
    fs: Any,
    day: dt.date,
    host_dir: str,
    good_of: dict[tuple[str, dt.date, str], list[layout.Entry]],
    have: tiercurrent.Current,
    stmts: dict[str, str],
    width: float,
    hashes: dict[str, str],
    stage: str,
    fresh: set[str],
    progress: Callable[[str], None] | None,
    skipped: list[str],
) -> bool:
    """Derive the joint tier tables of one finished host-day where missing or stale; True
    when one was (``con`` made ready by :func:`prepare`). ``fresh``: rollup tables of the
    chain that ``con`` holds for this
    host-day already (just derived for the one-source tier), not derived again. A table
    whose raw files' rows cannot be read is not stored: each such file is named in
    ``skipped``. The server
    log lines of a host-day are parsed alone: a record wrapped across the midnight of a
    collection (a batch-stats line is one line) would be parsed otherwise than with the
    day before."""
    from analyzer import logevents
    from analyzer.bucket import to_arrow
    from analyzer.staging import stage as _stage
    from analyzer.views import raw_select
    from collector.writer import write_derived

    params = tier.build_params(width)
    done = False
    for tier_table, (table, sources) in tier.JOINT.items():
        if (sources[0], day, host_dir) not in good_of:
            continue
        entries = [e for s in sources for e in good_of.get((s, day, host_dir), [])]
        src_hash = tier.sources_hash(entries)
        cur = have.get((day, host_dir), {}).get(tier_table)
        if cur is not None and cur[1] == src_hash:
            continue
        steps = tier.chain(tier_table, stmts)
        read: list[str] = []  # as read, beside ``entries``
        for s in sources:
            paths = [e.path for e in good_of.get((s, day, host_dir), [])]
            if paths and fs is not None:
                paths = _stage(fs, paths, stage)
            read += paths
            sql = (
                raw_select(con, s, paths, "")
                if paths
                else f"SELECT * FROM __empty_{s}"  # a day with no metrics: none
            )
            con.execute(f"CREATE OR REPLACE VIEW {s} AS {sql}")
        try:
            logevents.build(con)  # the day's own lines
            for t, stmt in zip(tier.JOINT_CHAIN, steps, strict=True):
                if t in fresh:
                    continue
                refs = referenced_params(stmt)
                con.execute(stmt, {k: params[k] for k in refs} if refs else None)
            data = to_arrow(con.sql(f"SELECT * FROM {table} ORDER BY ALL"))
        except duckdb.Error as e:  # rows that cannot be read: name the file, go on
            if not rowcheck.may_be_rows(e):
                raise
            what = f"the {table} of {day} host={host_dir}"
            skipped += rowcheck.not_stored([x.path for x in entries], read, e, what)
            continue
        extra = {
            tier.HASH_KEY: hashes[tier_table].encode(),
            tier.SOURCES_KEY: src_hash.encode(),
            tier.WIDTH_KEY: f"{width:g}".encode(),
        }
        name = write_derived(bucket, host_dir, tier_table, day, data, extra).name
        tier._delete_old(root, fs, [tier_table], day, host_dir, {name})
        done = True
        if progress:
            progress(f"tier {day} host={host_dir}: {table} derived from {len(entries)} files")
    return done


def cover(
    con: duckdb.DuckDBPyConnection,
    current: tiercurrent.Current,
    checks: dict[str, list[filecheck.FileCheck]],
    ok: Callable[[filecheck.FileCheck], bool],
    stage: Callable[[list[str]], list[str]] | None,
    use: TierUse,
) -> None:
    """Tables ``tier_<table>`` of the current joint tier files of the host-days whose every
    raw file of every source passes ``ok``, and the table ``idle_cover`` of those host-days
    (empty when none)."""
    con.execute(COVER_SQL)
    by_key: dict[tuple[str, tuple[dt.date, str]], list[filecheck.FileCheck]] = {}
    for name, cs in checks.items():
        for c in cs:
            by_key.setdefault((name, (c.entry.day, c.entry.host_dir)), []).append(c)
    for tier_table, (table, sources) in tier.JOINT.items():
        files: dict[tuple[dt.date, str], str] = {}
        for key, cur in current.items():
            if tier_table not in cur or (sources[0], key) not in by_key:
                continue
            mine = [c for s in sources for c in by_key.get((s, key), [])]
            if not all(ok(c) for c in mine):
                continue
            if cur[tier_table][1] != tier.sources_hash([c.entry for c in mine]):
                continue
            files[key] = cur[tier_table][0].path
        if not files:
            continue
        files, weeks = tierweek.localise(files, current.weeks, stage, use.origin)
        use.files[tier_table] = files
        use.weeks.update(weeks)
        # a table, read once: a month is ~50 k rows in 750 files, and reading the files is
        # what costs (three reads of them took longer than the statements that use them)
        try:
            con.execute(
                f"CREATE OR REPLACE TABLE {tier_table} AS {tierweek.select(files, use.weeks)}"
            )
        except duckdb.Error as e:  # the analysis finds which file, and names it
            if not rowcheck.may_be_rows(e):
                raise
            raise rowcheck.RowsUnreadable(e, {}, {p: use.origin[p] for p in files.values()}) from e
        # the host-days as the rows name them (a host's folder is not always its name). One
        # whose file has no rows is not listed: none of its buckets is idle even by its own
        # day's readings, and the analysis derives none for it (see idle_view)
        con.execute(f"INSERT INTO idle_cover SELECT DISTINCT host, dn FROM {tier_table}")
        use.tables.add(table)


# the views of 03_idle_windows.sql over the host-days whose idle segments the analysis
# derives (those idle_cover does not list): view -> (the rollup table it reads, the tier
# table that stores that one)
IDLE_VIEWS = {
    "idle_gpu_buckets": ("gpu_buckets", "tier_gpu_buckets"),
    "idle_requests": ("metric_norm", "tier_metric_norm"),
}


def idle_view(con: duckdb.DuckDBPyConnection, stmt: str, use: TierUse) -> bool:
    """One of :data:`IDLE_VIEWS`, made over the stored files of the host-days the tier does
    not cover and the raw rest instead of over the whole table: a covered host-day's files
    are not read at all. A covered host-day whose file holds no segment had no idle bucket
    even by its own day's readings, so none by the analysis's either (and the segments
    look up only their own day's readings). False where ``stmt`` makes no such view or the
    stored table is not read (the statement's own view then leaves out idle_cover's
    host-days)."""
    view = next((v for v in IDLE_VIEWS if f"CREATE OR REPLACE VIEW {v} AS" in stmt), None)
    if view is None:
        return False
    table, tier_table = IDLE_VIEWS[view]
    mine = use.files.get("tier_idle_segments", {})
    stored = use.files.get(tier_table)
    if stored is None or table not in use.rested or "idle_segments" not in use.tables:
        return False
    keep = {k: p for k, p in stored.items() if k not in mine}
    src = (f"{tierweek.select(keep, use.weeks)}\nUNION ALL BY NAME\n" if keep else "") + (
        f"SELECT * FROM {table}_rest"
    )
    read = f"FROM {table} "
    if stmt.count(read) != 1:
        raise RuntimeError(f"the statement making {view} must read {table} once ({read!r})")
    con.execute(stmt.replace(read, f"FROM ({src}) ", 1))
    return True
