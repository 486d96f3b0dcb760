"""Week files of the rollup tier: a week's tier files of every host in one file per table.

Opening a stored file costs about what reading thousands of its rows does, and an
analysis scans each tier table several times: a month of host-day files (750 for 25
hosts) spent more time opening files than reading rows. So ``leakreport rollup``
(:func:`pack`) merges, for each week (Monday to Sunday, UTC) with finished host-days,
each tier table's files of every host into one *week file*,
``<tier table>_week/date=<Monday>/host=@all/<file>`` (:data:`collector.layout.FLEET_DIR`),
and deletes the files it holds. Each row names its host-day in ``_tier_key``
(``<day>/<host folder>``); the footer has the SQL hash, as any tier file, and in place of
one sources hash a JSON object of them by host-day.

A host-day is read from exactly one file: its own day file where there is one (derived
since the week file: late data, a changed definition), else the newest week file that
holds it. A week file read for some of its host-days only is read with a filter on
``_tier_key`` (:func:`select`): a week file stale for one host-day, or a crash between
writing a week file and deleting the files it replaces, costs a filter, never a wrong
row, and the next rollup writes the week again.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from analyzer.views import parquet, sql_str
from collector import layout
from collector.store import remove

KEY_COL = "_tier_key"
MEMORY_LIMIT = "512MB"  # for writing a week file (the analysis has its own budget)
SUFFIX = "_week"
Key = tuple[dt.date, str]  # (day, host folder)
# week files of these tier tables sort by this column first (then by every column, as
# the others): the analysis reads them a value at a time (requests, activity and
# kv_usage each read one metric of metric_norm), and each row group of such a file then
# holds few values, so DuckDB skips the rest by their statistics (a month: the three
# read 0.15 s, not 0.21 s). Only the speed depends on it: older week files still serve.
SORT_FIRST = {"tier_metric_norm": "metric"}


def week_table(tier_table: str) -> str:
    return tier_table + SUFFIX


def tier_of(table: str) -> str:
    """The tier table a (day or week) file's table stands for."""
    return table.removesuffix(SUFFIX)


def monday(day: dt.date) -> dt.date:
    return day - dt.timedelta(days=day.weekday())


def is_week(e: layout.Entry) -> bool:
    return e.host_dir == layout.FLEET_DIR and e.table.endswith(SUFFIX)


def key_text(key: Key) -> str:
    return f"{key[0].isoformat()}/{key[1]}"


def keys_of(sources: str) -> dict[Key, str]:
    """A week file's host-days and their sources hashes (empty when unreadable)."""
    try:
        doc = json.loads(sources)
        out = {}
        for k, v in doc.items():
            day, host_dir = str(k).split("/", 1)
            out[(dt.date.fromisoformat(day), host_dir)] = str(v)
        return out
    except (ValueError, TypeError, AttributeError):
        return {}


def list_weeks(
    root: str, fs: Any, tier_tables: list[str], date_ok: layout.DateOk
) -> list[layout.Entry]:
    """The week files of these tier tables that hold a day ``date_ok`` accepts."""

    def week_ok(m: dt.date) -> bool:
        return any(date_ok(m + dt.timedelta(days=i)) for i in range(7))

    keep = layout.ANY if date_ok is layout.ANY else week_ok
    return [
        e
        for t in tier_tables
        for e in layout.list_entries(root, week_table(t), fs, keep)
        if e.host_dir == layout.FLEET_DIR
    ]


def select(files: dict[Key, str], weeks: dict[str, frozenset[Key]]) -> str:
    """A ``SELECT`` of the rows of these host-days, each from the file given: a day file
    whole, a week file (one of ``weeks``, with every host-day it holds) for these
    host-days only."""
    plain = sorted({p for p in files.values() if p not in weeks})
    wanted: dict[str, set[Key]] = {}
    for k, p in files.items():
        if p in weeks:
            wanted.setdefault(p, set()).add(k)
    parts = [f"SELECT * FROM {parquet(plain, False)}"] if plain else []
    whole = sorted(p for p, ks in wanted.items() if ks == weeks[p])
    if whole:
        parts.append(f"SELECT * EXCLUDE ({KEY_COL}) FROM {parquet(whole, False)}")
    for p, ks in sorted(wanted.items()):
        if p not in whole:
            parts.append(
                f"SELECT * EXCLUDE ({KEY_COL}) FROM {parquet([p], False)} "
                f"WHERE {KEY_COL} IN ({_in(key_text(k) for k in ks)})"
            )
    return "\nUNION ALL BY NAME\n".join(parts)


def localise(
    files: dict[Key, str],
    weeks: dict[str, frozenset[Key]],
    stage: Callable[[list[str]], list[str]] | None,
    origin: dict[str, str] | None = None,
) -> tuple[dict[Key, str], dict[str, frozenset[Key]]]:
    """``files`` and the week files among them by their staged copies (S3), each once;
    ``origin`` gets each copy's path in the bucket."""
    uniq = sorted(set(files.values()))
    local = dict(zip(uniq, stage(uniq) if stage is not None else uniq, strict=True))
    if origin is not None:
        origin.update((copy, p) for p, copy in local.items())
    return {k: local[p] for k, p in files.items()}, {local[p]: weeks[p] for p in uniq if p in weeks}


Owners = dict[Key, dict[str, tuple[layout.Entry, str]]]


def pack(
    bucket: str | os.PathLike[str],
    root: str,
    fs: Any,
    have: Owners,
    weeks: dict[str, frozenset[Key]],
    sql_hashes: dict[str, str],
    progress: Callable[[str], None] | None,
    failed: list[str],
) -> int:
    """Write a week file for each tier table and week whose current host-days (``have``,
    with every day and host) are not all held by one week file alone, then delete the
    files it replaces; how many were written. A week file that cannot be written (a
    stored file that cannot be read whole, memory) is named in ``failed`` and its files
    are left as they are (they are read as before)."""
    import duckdb

    from analyzer.staging import stage as _stage
    from analyzer.tier import HASH_KEY, SOURCES_KEY

    by_week: dict[tuple[str, dt.date], dict[Key, tuple[layout.Entry, str]]] = {}
    for key, tables in have.items():
        for t, owner in tables.items():
            by_week.setdefault((t, monday(key[0])), {})[key] = owner
    listed: dict[tuple[str, dt.date], list[layout.Entry]] = {}
    for e in list_weeks(root, fs, sorted({t for t, _m in by_week}), layout.ANY):
        listed.setdefault((tier_of(e.table), e.day), []).append(e)
    written = 0
    with duckdb.connect() as con, tempfile.TemporaryDirectory(prefix="leakreport-week-") as tmp:
        con.execute("SET TimeZone = 'UTC'")
        # a week's rows are sorted in bounded memory: what does not fit goes to disk
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        con.execute(f"SET temp_directory = {sql_str(tmp)}")
        con.execute("SET preserve_insertion_order = false")  # each file is sorted as a whole
        for (t, m), own in sorted(by_week.items()):
            there = listed.get((t, m), [])
            held = {e.path for e, _s in own.values()}
            if len(there) == 1 and held == {there[0].path} and weeks.get(there[0].path) == set(own):
                continue  # one week file holds them all, and nothing else
            files = {k: e.path for k, (e, _s) in own.items()}
            files, local_weeks = localise(
                files,
                {p: weeks[p] for p in held if p in weeks},
                (lambda ps: _stage(fs, ps, tmp)) if fs is not None else None,
            )
            meta = {
                HASH_KEY.decode(): sql_hashes[t],
                SOURCES_KEY.decode(): json.dumps(
                    {key_text(k): s for k, (_e, s) in sorted(own.items())}, sort_keys=True
                ),
                layout.TABLE_KEY.decode(): week_table(t),
            }
            out = Path(tmp) / "week.parquet"
            try:
                write(con, files, local_weeks, SORT_FIRST.get(t), out, meta)
            except duckdb.Error as err:  # a stored file that cannot be read whole
                failed.append(
                    f"tier week of {m}: {t} not written: {err}; "
                    "its host-days stay in the files it would replace"
                )
                out.unlink(missing_ok=True)
                continue
            _put(bucket, week_table(t), m, out)
            out.unlink()
            for e in [*there, *(e for e, _s in own.values() if not is_week(e))]:
                remove(e.path, fs, prune=True)
            written += 1
            if progress:
                progress(f"tier week of {m}: {t} packed, {len(own)} host-days")
    return written


def write(
    con: Any,
    files: dict[Key, str],
    weeks: dict[str, frozenset[Key]],
    first: str | None,
    out: Path,
    meta: dict[str, str],
) -> None:
    """Write the week file ``out``: the rows of each host-day (:func:`_rows`), sorted by
    every column (``first`` first, where given), with ``meta`` in its footer. The rows are
    gathered into a table, then sorted from it: sorted straight from the files (a week file
    and a day's files, UNION ALL), the 125-host week's 5 M metric_norm rows ran out of
    memory at limits of 300 MB to 512 MB; from a table they sort at any of 150 MB to 1 GB,
    spilling to the connection's temporary folder."""
    kv = ", ".join(f"{sql_str(k)}: {sql_str(v)}" for k, v in meta.items())
    con.execute(f"CREATE OR REPLACE TEMP TABLE week_rows AS {_rows(con, files, weeks)}")
    try:
        con.execute(
            f"COPY (SELECT * FROM week_rows ORDER BY {_order(con, first)}) TO {sql_str(str(out))} "
            f"(FORMAT parquet, COMPRESSION zstd, KV_METADATA {{{kv}}})"
        )
    finally:
        con.execute("DROP TABLE week_rows")


def _rows(con: Any, files: dict[Key, str], weeks: dict[str, frozenset[Key]]) -> str:
    """The rows of each host-day with its ``_tier_key``, in no order."""
    plain = {k: p for k, p in files.items() if p not in weeks}
    parts = []
    if plain:
        con.execute("CREATE OR REPLACE TEMP TABLE week_keys (filename VARCHAR, k VARCHAR)")
        con.executemany(
            "INSERT INTO week_keys VALUES (?, ?)", [(p, key_text(k)) for k, p in plain.items()]
        )
        src = parquet(sorted(plain.values()), False).replace(
            "hive_partitioning = false", "hive_partitioning = false, filename = true"
        )
        parts.append(
            f"SELECT w.k AS {KEY_COL}, r.* EXCLUDE (filename) FROM {src} r "
            "JOIN week_keys w USING (filename)"
        )
    of_week: dict[str, list[str]] = {}
    for k, p in files.items():
        if p in weeks:
            of_week.setdefault(p, []).append(key_text(k))
    for p, ks in sorted(of_week.items()):
        parts.append(
            f"SELECT {KEY_COL}, * EXCLUDE ({KEY_COL}) FROM {parquet([p], False)} "
            f"WHERE {KEY_COL} IN ({_in(ks)})"
        )
    return "SELECT * FROM (" + "\nUNION ALL BY NAME\n".join(parts) + ")"


def _order(con: Any, first: str | None = None) -> str:
    """The ``ORDER BY`` of table ``week_rows`` (deterministic files): every column, the
    column ``first`` first where given."""
    if first is None:
        return "ALL"
    cols = [str(r[0]) for r in con.execute("DESCRIBE week_rows").fetchall()]
    return ", ".join(f'"{c}"' for c in [first, *(c for c in cols if c != first)])


def _in(texts: Iterable[str]) -> str:
    return ", ".join(sql_str(t) for t in sorted(texts))


def _put(bucket: str | os.PathLike[str], table: str, m: dt.date, src: Path) -> None:
    from collector.writer import BucketWriter

    w = BucketWriter(bucket, layout.FLEET_DIR)
    w.host_dir = layout.FLEET_DIR
    stamp = dt.datetime.now(dt.UTC)  # names sort by when written: the newest wins
    named = src.with_name(layout.file_name(table, stamp))
    src.rename(named)
    try:
        w.put_file(table, m, named)
    finally:
        named.rename(src)
