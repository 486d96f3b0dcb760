"""Tier tables made from several raw tables of one host-day (:data:`analyzer.tier.JOINT`).

The idle segments (``03_idle_windows.sql``) need a host-day's device samples and its
metrics together. ``leakreport rollup`` runs the chain of rollup statements that leads
to them over that day's raw files alone (:func:`build`); an analysis reads them for the
host-days where the file is current for the raw files of every source table (the same
name-hash as one-source tier files) (:func:`cover`), and lists those host-days (by the rows' host and day number) in
``idle_cover`` so that the rollups derive
idle segments for the other host-days only. Made from one day alone, a day's first
buckets can be idle where a reading of the day before says otherwise: they are segments
of their own, checked again in the analysis (see the SQL).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import pyarrow as pa

from analyzer import tier
from analyzer.packs import referenced_params
from collector import layout
from collector.schema import TABLES

COVER_SQL = "CREATE OR REPLACE TABLE idle_cover (host VARCHAR, dn BIGINT)"


def _empty_inputs(con: duckdb.DuckDBPyConnection, sources: set[str]) -> None:
    """Empty tables to read where a host-day has no files of a source, and no covered
    host-days (the chain derives everything from the day's own files)."""
    con.execute(COVER_SQL)
    for name in sorted(sources):
        con.register(f"__empty_{name}", pa.Table.from_pylist([], schema=TABLES[name].schema))


def build(
    con: duckdb.DuckDBPyConnection,
    bucket: str | os.PathLike[str],
    root: str,
    fs: Any,
    before: dt.date,
    good_of: dict[tuple[str, dt.date, str], list[layout.Entry]],
    have: tier.Current,
    stmts: dict[str, str],
    width: float,
    hashes: dict[str, str],
    stage: str,
    progress: Callable[[str], None] | None,
) -> Iterator[tuple[dt.date, str]]:
    """Derive every joint tier table of the finished host-days where it is missing or
    stale; yields the host-days derived. The server log lines of a host-day are parsed
    alone: a record wrapped across the midnight of a collection (a batch-stats line is
    one line) would be parsed otherwise than with the day before."""
    from analyzer import logevents
    from analyzer.bucket import to_arrow
    from analyzer.staging import stage as _stage
    from analyzer.views import raw_select
    from collector.writer import write_derived

    ready = False
    params = tier.build_params(width)
    for tier_table, (table, sources) in tier.JOINT.items():
        keys = sorted({(d, h) for (s, d, h) in good_of if s == sources[0]})
        for day, host_dir in keys:
            entries = [e for s in sources for e in good_of.get((s, day, host_dir), [])]
            src_hash = tier.sources_hash(entries)
            cur = have.get((day, host_dir), {}).get(tier_table)
            if cur is not None and cur[1] == src_hash:
                continue
            if not ready:
                _empty_inputs(con, tier.JOINT_SOURCES)
                ready = True
            for s in sources:
                paths = [e.path for e in good_of.get((s, day, host_dir), [])]
                if paths and fs is not None:
                    paths = _stage(fs, paths, stage)
                sql = (
                    raw_select(con, s, paths, "")
                    if paths
                    else f"SELECT * FROM __empty_{s}"  # a day with no metrics: none
                )
                con.execute(f"CREATE OR REPLACE VIEW {s} AS {sql}")
            logevents.build(con)  # the day's own lines (batch-stats lines are one line each)
            for stmt in tier.chain(tier_table, stmts):
                refs = referenced_params(stmt)
                con.execute(stmt, {k: params[k] for k in refs} if refs else None)
            data = to_arrow(con.sql(f"SELECT * FROM {table} ORDER BY ALL"))
            extra = {
                tier.HASH_KEY: hashes[tier_table].encode(),
                tier.SOURCES_KEY: src_hash.encode(),
                tier.WIDTH_KEY: f"{width:g}".encode(),
            }
            write_derived(bucket, host_dir, tier_table, day, data, extra)
            tier._delete_old(root, fs, [tier_table], day, host_dir, hashes, src_hash)
            if progress:
                progress(f"tier {day} host={host_dir}: {table} derived from {len(entries)} files")
            yield day, host_dir


def cover(
    con: duckdb.DuckDBPyConnection,
    current: tier.Current,
    checks: dict[str, list[layout.FileCheck]],
    ok: Callable[[layout.FileCheck], bool],
    stage: Callable[[list[str]], list[str]] | None,
    use: tier.TierUse,
) -> None:
    """Views ``tier_<table>`` over the current joint tier files of the host-days whose every
    raw file of every source passes ``ok``, and the table ``idle_cover`` of those host-days
    (empty when none)."""
    con.execute(COVER_SQL)
    by_key: dict[tuple[str, tuple[dt.date, str]], list[layout.FileCheck]] = {}
    for name, cs in checks.items():
        for c in cs:
            by_key.setdefault((name, (c.entry.day, c.entry.host_dir)), []).append(c)
    for tier_table, (table, sources) in tier.JOINT.items():
        files: list[str] = []
        for key, cur in current.items():
            if tier_table not in cur or (sources[0], key) not in by_key:
                continue
            mine = [c for s in sources for c in by_key.get((s, key), [])]
            if not all(ok(c) for c in mine):
                continue
            if cur[tier_table][1] != tier.sources_hash([c.entry for c in mine]):
                continue
            files.append(cur[tier_table][0].path)
        if not files:
            continue
        from analyzer.views import parquet

        if stage is not None:
            files = stage(files)
        con.execute(f"CREATE OR REPLACE VIEW {tier_table} AS SELECT * FROM {parquet(files, False)}")
        # the host-days as the rows name them (a host's folder is not always its name); one
        # whose file has no rows is derived again, from the stored buckets: the same none
        con.execute(f"INSERT INTO idle_cover SELECT DISTINCT host, dn FROM {tier_table}")
        use.tables.add(table)
