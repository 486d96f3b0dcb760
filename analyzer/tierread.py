"""Reading the stored rollup tier in an analysis: which host-days it covers, and views.

:func:`attach` makes, per source table, a view over the current tier files of the
host-days they cover (``tier_*``) and one over the raw files of the other host-days
(``<source>_rest``); :func:`rollup_with_tier` then combines the two.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb

from analyzer import rollup, tier, tierjoint, tierweek
from analyzer.packs import referenced_params
from analyzer.tier import (
    DAY,
    JOINT,
    SOURCES,
    TIERS,
    _is_current,
    _of,
    _width,
    sources_hash,
)
from analyzer.tiercurrent import current_tier
from analyzer.tierindex import Index
from collector import filecheck, layout
from collector.store import root_of


@dataclass
class TierUse:
    """The tier an analysis reads: views tier_* over the stored files, and ``<source>_rest``
    over the raw files of the host-days the tier does not cover."""

    width: float
    host_days: int  # read from the tier (every source table of them)
    raw_host_days: int  # derived from raw samples (one source table or more)
    tables: set[str] = field(default_factory=set)  # rollup tables that combine tier and raw
    # tier table -> (day, host folder) -> the file read (staged where on S3)
    files: dict[str, dict[tuple[dt.date, str], str]] = field(default_factory=dict)
    # the week files among them -> every host-day each holds (tierweek.select)
    weeks: dict[str, frozenset[tuple[dt.date, str]]] = field(default_factory=dict)
    # rollup tables this analysis made as tier + rest, their rest kept as <table>_rest
    rested: set[str] = field(default_factory=set)
    # each file read (staged where on S3) -> its path in the bucket
    origin: dict[str, str] = field(default_factory=dict)


def check_joint(con: duckdb.DuckDBPyConnection, params: dict[str, Any], use: TierUse) -> None:
    """Before the rollups first read ``idle_cover``: where the analysis runs the chain of a
    joint tier table with other parameters than it was made with, that table is derived
    from raw samples for every host-day (no host-day is covered)."""
    made = tier.build_params(use.width)
    for tier_table, (table, _s) in JOINT.items():
        if table in use.tables and any(
            float(params[k]) != float(made[k]) for k in tier.chain_params(tier_table)
        ):
            use.tables.discard(table)
            con.execute("DELETE FROM idle_cover")


def _aligned(c: filecheck.FileCheck) -> bool:
    """Every row of the file lies within its folder's day (so no rollup group of one
    day can take rows from another day's files)."""
    lo = dt.datetime.combine(c.entry.day, dt.time(), dt.UTC)
    return c.ts_min is not None and c.ts_max is not None and lo <= c.ts_min and c.ts_max < lo + DAY


def attach(
    con: duckdb.DuckDBPyConnection,
    root: str,
    fs: Any,
    good: dict[str, list[filecheck.FileCheck]],
    local: dict[str, list[str]],
    date_ok: layout.DateOk,
    host_ok: layout.HostOk,
    usable: Callable[[filecheck.FileCheck], bool],
    view_sql: Callable[[str, list[str]], str],
    stage: Callable[[list[str]], list[str]],
    index: Index | None = None,
    note: Callable[[str], None] | None = None,
    skip: dict[str, str] | None = None,
    left_out: Callable[[str, str], None] | None = None,
    unread: Callable[[str], None] | None = None,
) -> TierUse | None:
    """Per source table, views over the current tier (host-days it covers) and over the
    raw files of the others (``<source>_rest``); None when no host-day has a current tier.
    ``usable``: a raw file's rows all pass the reader's time-sanity bounds; ``view_sql``:
    the reader's ``SELECT`` over raw files of a table; ``stage``: copies S3 objects;
    ``index``: the tier files' hashes stored by ``leakreport rollup``; ``note``: told
    of stored host-days that are not read because another version made them; ``skip``:
    tier files not to read (their rows cannot be), and why: ``left_out`` is told of each
    (its path, and what became of its host-days); ``unread``: told of stored host-days
    that are not analysed, their raw files gone."""
    width = _width(None)
    try:
        tier = current_tier(root, fs, date_ok, host_ok, width, index, skip=skip or {})
    except (OSError, RuntimeError):
        return None
    from analyzer.bucket import _shown

    for path, table in sorted(tier.left_out.items()):
        # a tier file is read only where its raw files are (the sources hash): they are there.
        # No count of its host-days: each batch of hosts would give another
        if left_out is not None:
            left_out(
                path,
                f"{(skip or {})[path]}; a file of the stored rollup tier ({table}): its "
                "host-days are derived from raw samples instead; delete it, and "
                "`leakreport rollup` stores them again (`leakreport rollup --verify` "
                "does both)",
            )
    if tier.stale and note:
        days = sorted(tier.stale)
        note(
            f"rollup tier: {len(days)} host-days ({days[0][0]} to {days[-1][0]}) were stored "
            "by other rollup SQL or settings (another leakreport version?): not read, "
            "derived from raw samples instead; `leakreport rollup` stores them again"
        )
    if tier.unreadable and note:
        note(
            f"rollup tier: {len(tier.unreadable)} stored files cannot be read "
            f"({_shown(root, tier.unreadable[0], fs)} first): not read; "
            "their host-days are derived from "
            "raw samples, and `leakreport rollup` stores them again"
        )
    gone = _without_raw(tier, good)
    if gone and unread is not None:
        days = sorted(gone)
        unread(
            f"rollup tier: {len(days)} stored host-days ({days[0][0]} host={days[0][1]} "
            f"first) have no readable raw files of {', '.join(sorted(set().union(*gone.values())))}: "
            "not analysed (the tier is read only beside the raw files it was made from)"
        )
    if not tier:
        return None
    use = TierUse(width, 0, 0)
    misaligned_in: dict[str, set[str]] = {}
    raw_days: set[tuple[dt.date, str]] = set()
    all_days: set[tuple[dt.date, str]] = set()
    for source in SOURCES:
        checks = good.get(source, [])
        by_day: dict[tuple[dt.date, str], list[int]] = {}
        for i, c in enumerate(checks):
            by_day.setdefault((c.entry.day, c.entry.host_dir), []).append(i)
        all_days |= set(by_day)
        # a host with any file outside its day is read raw for this table: exact groups
        misaligned = {c.entry.host_dir for c in checks if not _aligned(c)}
        misaligned_in[source] = misaligned
        covered: dict[str, dict[tuple[dt.date, str], str]] = {t: {} for t in _of(source)}
        rest: list[str] = []
        for key, idx in by_day.items():
            src = sources_hash([checks[i].entry for i in idx])
            if (
                key[1] not in misaligned
                and _is_current(tier.get(key, {}), source, src)
                and all(usable(checks[i]) for i in idx)
            ):
                for t in _of(source):
                    covered[t][key] = tier[key][t][0].path
            else:
                rest += [local[source][i] for i in idx]
                raw_days.add(key)
        if not any(covered.values()):
            continue
        for tier_table, files in covered.items():
            files, weeks = tierweek.localise(
                files, tier.weeks, stage if fs is not None else None, use.origin
            )
            use.files[tier_table] = files
            use.weeks.update(weeks)
            con.execute(
                f"CREATE OR REPLACE VIEW {tier_table} AS {tierweek.select(files, use.weeks)}"
            )
            use.tables.add(TIERS[tier_table][0])
        rest_sql = view_sql(source, rest) if rest else f"SELECT * FROM {source} LIMIT 0"
        con.execute(f"CREATE OR REPLACE VIEW {source}_rest AS {rest_sql}")
    tierjoint.cover(
        con,
        tier,
        good,
        lambda c: (
            c.entry.host_dir not in misaligned_in.get(c.entry.table, set())
            and _aligned(c)
            and usable(c)
        ),
        stage if fs is not None else None,
        use,
    )
    if not use.tables:
        return None
    use.raw_host_days = len(raw_days)
    use.host_days = len(all_days - raw_days)
    return use


def _without_raw(
    tier: Any, good: dict[str, list[filecheck.FileCheck]]
) -> dict[tuple[dt.date, str], set[str]]:
    """The host-days the tier holds for a source table that has no raw files of that day
    in the analysis (deleted, or left out), and which tables: the tier is read only where
    its raw files are (sources hash), so their rows are not analysed."""
    out: dict[tuple[dt.date, str], set[str]] = {}
    for source in SOURCES:
        raw = {(c.entry.day, c.entry.host_dir) for c in good.get(source, [])}
        for key, cur in tier.items():
            if key not in raw and all(t in cur for t in _of(source)):
                out.setdefault(key, set()).add(source)
    return out


def attach_opened(
    out: Any,
    bucket: str | os.PathLike[str],
    s3: Any,
    scope: Any,
    good: dict[str, list[filecheck.FileCheck]],
    local: dict[str, list[str]],
    parts: dict[str, str],
    hi: dt.datetime,
    first_run: dict[str, dt.datetime],
    stage_dir: str | os.PathLike[str] | None,
    index: Index | None = None,
    skip: dict[str, str] | None = None,
) -> TierUse | None:
    """:func:`attach` for :func:`analyzer.bucket.open_checked`: the finished host-days
    of ``out``'s views are read from the stored rollup tier where it is current; the
    files of ``skip`` are left out, named in ``out.skipped``."""
    from analyzer.bucket import SAMPLED_AT_RUN, _shown
    from analyzer.staging import stage as _stage
    from analyzer.staging import temp_stage as _temp_stage
    from analyzer.views import raw_select

    def usable(c: filecheck.FileCheck) -> bool:
        lo = first_run.get(c.entry.host) if c.entry.table in SAMPLED_AT_RUN else None
        return (
            c.ts_min is not None
            and c.ts_max is not None
            and c.ts_max <= hi
            and (lo is None or c.ts_min >= lo)
        )

    def view_sql(name: str, rest: list[str]) -> str:
        alike = filecheck.one_schema(good[name])
        return raw_select(out.con, name, rest, parts[name], local[name], alike=alike)

    return attach(
        out.con,
        root_of(bucket, s3),
        s3,
        {k: v for k, v in good.items() if k in parts},
        local,
        scope.date_filter,
        scope.host_filter,
        usable,
        view_sql,
        lambda keys: _stage(s3, keys, stage_dir or _temp_stage()),
        index,
        out.notes.append,
        skip,
        lambda p, text: out.skipped.append(f"{_shown(bucket, p, s3)}: {text}"),
        out.unread.append,
    )


def rollup_with_tier(
    con: duckdb.DuckDBPyConnection, stmt: str, params: dict[str, Any], use: TierUse
) -> bool:
    """Run a first-stage rollup statement as tier + rest when the tier covers it;
    False when the statement is not one the tier stores (run it as it is)."""
    if tierjoint.idle_view(con, stmt, use):
        return True
    for table in use.tables:
        if f"CREATE OR REPLACE TABLE {table} AS" not in stmt:
            continue
        if table in tier.JOINT_TABLES:
            # the statement itself leaves out the host-days the tier covers (idle_cover,
            # idle_gpu_buckets), whose parameters rollup.build checked before the first
            # use of idle_cover
            con.execute(
                stmt.replace(f"TABLE {table} AS", f"TABLE {table}_rest AS", 1),
                {k: params[k] for k in referenced_params(stmt)} or None,
            )
            con.execute((tier.COMBINE_DIR / f"{table}.sql").read_text("utf-8"))
            return True
        tier_table, source = next((k, s) for k, (t, s) in TIERS.items() if t == table)
        made = tier.build_params(use.width)
        refs = referenced_params(stmt)
        if any(float(params[k]) != float(made[k]) for k in refs):
            return False  # the analysis runs with other parameters: raw samples only
        if tier_table in tier.READS:
            # made from another rollup table: from that one's rest, where this run made one
            source = tier.READS[tier_table]
            if source not in use.rested:
                return False
        if f"FROM {source}\n" not in stmt:
            return False
        rest = stmt.replace(f"TABLE {table} AS", f"TABLE {table}_rest AS", 1).replace(
            f"FROM {source}\n", f"FROM {source}_rest\n"
        )
        con.execute(rest, {k: params[k] for k in refs} if refs else None)
        combine = (tier.COMBINE_DIR / f"{table}.sql").read_text("utf-8")
        if f"CREATE OR REPLACE VIEW {table} AS" in combine:
            # read where used: the stored files stay on disk, and only the rest is held
            con.execute(combine)
            use.rested.add(table)
            return True
        # rows come in no particular order either way: not keeping it is a third cheaper
        con.execute("SET preserve_insertion_order = false")
        try:
            for s in rollup._statements(combine):
                con.execute(s)
        finally:
            con.execute("RESET preserve_insertion_order")
        con.execute(f"DROP TABLE {table}_rest")  # combined: its memory is the rules' now
        return True
    return False
