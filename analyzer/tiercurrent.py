"""Which stored file of the rollup tier holds each host-day (:mod:`analyzer.tier`): read
by the analysis to choose between tier and raw samples, and by ``leakreport rollup`` to
find what is missing, stale or doubled."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

import pyarrow.parquet as pq

from analyzer import tier, tierindex, tierweek
from collector import filecheck, layout


def tier_meta(entry: layout.Entry, fs: Any) -> tierindex.TierMeta:
    """A tier file's (SQL hash, sources hash); empty ones when its footer cannot be read."""
    try:
        md = pq.read_metadata(entry.path, filesystem=fs).metadata or {}
    except Exception:  # noqa: BLE001 - an unreadable tier file is one that is not current
        md = {}
    return md.get(tier.HASH_KEY, b"").decode(), md.get(tier.SOURCES_KEY, b"").decode()


class Current(dict[tuple[dt.date, str], dict[str, tuple[layout.Entry, str]]]):
    """(day, host folder) -> tier table -> (the file it is read from, its sources hash);
    ``weeks``: each week file listed -> every host-day it holds (:mod:`analyzer.tierweek`);
    ``stale``: host-days with a tier file made by other rollup SQL or settings and no
    current one of that table (never read: `leakreport rollup` makes them again);
    ``left_out``: each file left out (its rows cannot be read) -> its tier table;
    ``unreadable``: files whose footer cannot be read (not read);
    ``twins``: current day files of a table and host-day that another one stands for
    (left by a run stopped between writing a file and deleting the one it replaces)."""

    def __init__(self) -> None:
        super().__init__()
        self.weeks: dict[str, frozenset[tuple[dt.date, str]]] = {}
        self.stale: set[tuple[dt.date, str]] = set()
        self.left_out: dict[str, str] = {}
        self.unreadable: list[str] = []
        self.twins: list[str] = []


def current_tier(
    root: str,
    fs: Any,
    date_ok: layout.DateOk,
    host_ok: layout.HostOk,
    width: float,
    index: tierindex.Index | None = None,
    skip: Collection[str] = (),
) -> Current:
    """The tier files made by the current SQL, for each host-day: its own day file, else
    the newest week file that holds it. ``index``: hashes stored by
    :func:`tierindex.refresh`, used where the file is the same; ``skip``: paths of files
    not to read (their host-days are not stored, unless another file holds them)."""
    out = Current()
    entries = [
        e for t in tier.ALL_TIERS for e in layout.list_entries(root, t, fs, date_ok, host_ok)
    ]
    entries += tierweek.list_weeks(root, fs, list(tier.ALL_TIERS), date_ok)
    want = {t: tier.sql_hash(width, t) for t in tier.ALL_TIERS}
    if index is not None:
        metas = index.tier_meta(entries, lambda e: tier_meta(e, fs))
    else:
        metas = filecheck.each_footer(lambda e: tier_meta(e, fs), entries, fs)
    weeks: list[tuple[layout.Entry, str]] = []
    stale: dict[tuple[dt.date, str], set[str]] = {}
    for e, (sql, sources) in zip(entries, metas, strict=True):
        if e.path in skip:
            out.left_out[e.path] = tierweek.tier_of(e.table)
            continue
        if not sql:  # no footer (or not one of ours): the host-days it held are not stored
            out.unreadable.append(e.path)
        if sql != want[tierweek.tier_of(e.table)]:  # stale: made by other SQL; never read
            held = tierweek.keys_of(sources) if tierweek.is_week(e) else {(e.day, e.host_dir): ""}
            for key in held:
                stale.setdefault(key, set()).add(tierweek.tier_of(e.table))
            continue
        if tierweek.is_week(e):
            weeks.append((e, sources))
        else:
            mine = out.setdefault((e.day, e.host_dir), {})
            if e.table in mine:
                out.twins.append(mine[e.table][0].path)
            mine[e.table] = (e, sources)
    for e, sources in sorted(weeks, key=lambda w: w[0].name):  # the newest last
        held = tierweek.keys_of(sources)
        out.weeks[e.path] = frozenset(held)
        table = tierweek.tier_of(e.table)
        for key, src in held.items():
            if not (date_ok(key[0]) and host_ok(layout.decode_host(key[1]))):
                continue
            mine = out.setdefault(key, {})
            if table not in mine or tierweek.is_week(mine[table][0]):  # a day file wins
                mine[table] = (e, src)
    out.stale = {
        k
        for k, tables in stale.items()
        if date_ok(k[0])
        and host_ok(layout.decode_host(k[1]))
        and any(t not in out.get(k, {}) for t in tables)
    }
    return out
