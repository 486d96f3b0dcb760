"""The stored rollup tier: derived once per finished host-day, read instead of raw samples.

``leakreport rollup`` (or :func:`build`) runs the first-stage rollup SQL
(``gpu_info`` and the per-minute ``gpu_buckets`` of ``rollups/00_*.sql`` and
``01_*.sql``, the very statements the analysis runs) over one host-day's raw
``gpu_samples`` files at a time and stores the results as Parquet under their
own tables in the bucket layout: ``tier_gpu_info`` and ``tier_gpu_buckets``.

Each tier file records, in its Parquet metadata, the hash of the SQL (and bucket
width and schema version) that made it and a hash of the raw files it was made
from. At analysis time a host-day's tier is used only when both still match and
the analysis buckets by the same width; otherwise (a changed definition, late
data, a compaction since, today, samples outside the time-sanity bounds) that
host-day is derived from raw samples, so findings are the same either way.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq

from analyzer import rollup
from analyzer.packs import referenced_params
from collector import layout
from collector.schema import SCHEMA_VERSION
from collector.store import is_s3, s3_filesystem, s3_root

TIER_FORMAT = 1
SOURCE = "gpu_samples"
TIERS = {"tier_gpu_info": "gpu_info", "tier_gpu_buckets": "gpu_buckets"}
HASH_KEY = b"leakreport.tier_sql_hash"
SOURCES_KEY = b"leakreport.tier_sources"
WIDTH_KEY = b"leakreport.tier_bucket_s"


def statements() -> dict[str, str]:
    """The rollup statements the tier stores, by the table they create."""
    out: dict[str, str] = {}
    for f in rollup.rollup_files():
        for stmt in rollup._statements(f.read_text(encoding="utf-8")):
            for table in TIERS.values():
                if f"CREATE OR REPLACE TABLE {table} AS" in stmt:
                    out[table] = stmt
    missing = set(TIERS.values()) - set(out)
    if missing:
        raise RuntimeError(f"no rollup statement creates {', '.join(sorted(missing))}")
    return out


def sql_hash(width: float) -> str:
    """What makes a tier file current: its SQL, bucket width, schema and tier format."""
    h = hashlib.sha256(f"{TIER_FORMAT}/{SCHEMA_VERSION}/{width:g}\n".encode())
    for table, stmt in sorted(statements().items()):
        h.update(f"{table}\n{stmt}\n".encode())
    for f in sorted((rollup.ROLLUP_DIR / "tier").glob("*.sql")):  # how tier and raw combine
        h.update(f.read_bytes())
    return h.hexdigest()[:32]


def sources_hash(entries: list[layout.Entry]) -> str:
    return hashlib.sha256("\n".join(sorted(e.name for e in entries)).encode()).hexdigest()[:32]


@dataclass
class Result:
    built: int = 0  # host-days derived and written
    current: int = 0  # host-days whose tier was already current
    skipped: list[str] | None = None  # raw files left out (do not match the schema)


def _width(overrides: dict[str, Any] | None) -> float:
    return float({**rollup.DEFAULTS, **(overrides or {})}["long_bucket_s"])


def _tier_meta(entry: layout.Entry, fs: Any) -> dict[bytes, bytes]:
    try:
        if fs is not None:
            with fs.open_input_file(entry.path) as f:
                return dict(pq.read_metadata(f).metadata or {})
        return dict(pq.read_metadata(entry.path).metadata or {})
    except Exception:  # noqa: BLE001 - an unreadable tier file is one that is not current
        return {}


def current_tier(
    root: str, fs: Any, date_ok: layout.DateOk, host_ok: layout.HostOk, want_hash: str
) -> dict[tuple[dt.date, str], dict[str, tuple[layout.Entry, str]]]:
    """(day, host folder) -> tier table -> (file, sources hash), for files made by the current SQL."""
    out: dict[tuple[dt.date, str], dict[str, tuple[layout.Entry, str]]] = {}
    for tier_table in TIERS:
        for e in layout.list_entries(root, tier_table, fs, date_ok, host_ok):
            md = _tier_meta(e, fs)
            if md.get(HASH_KEY, b"").decode() != want_hash:
                continue  # stale: made by other SQL; never read
            out.setdefault((e.day, e.host_dir), {})[tier_table] = (
                e,
                md.get(SOURCES_KEY, b"").decode(),
            )
    return out


def build(
    bucket: str | os.PathLike[str],
    before: dt.date | None = None,
    progress: Callable[[str], None] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Result:
    """Derive the tier for every finished host-day (days before ``before``, default
    today UTC) whose tier is missing or stale; stale files are then deleted."""
    from analyzer.bucket import _stage
    from analyzer.compact import groups

    before = before or dt.datetime.now(dt.UTC).date()
    fs = s3_filesystem() if is_s3(bucket) else None
    root = s3_root(str(bucket)) if fs is not None else str(bucket)
    width = _width(overrides)
    want = sql_hash(width)
    stmts = statements()
    res = Result(skipped=[])
    have = current_tier(root, fs, lambda d: d < before, lambda _h: True, want)
    with tempfile.TemporaryDirectory(prefix="leakreport-tier-") as stage:
        for (_t, day, host_dir), entries in sorted(groups(root, before, fs, [SOURCE]).items()):
            good, bad = layout.live(layout.check_all(entries, fs))
            assert res.skipped is not None
            res.skipped += [f"{c.entry.path}: {c.problem}" for c in bad]
            if not good:
                continue
            src_hash = sources_hash([c.entry for c in good])
            cur = have.get((day, host_dir), {})
            if set(cur) == set(TIERS) and all(s == src_hash for _e, s in cur.values()):
                res.current += 1
                continue
            paths = [c.entry.path for c in good]
            if fs is not None:
                paths = _stage(fs, paths, stage)
            _derive(bucket, day, host_dir, paths, stmts, width, want, src_hash)
            res.built += 1
            _delete_old(root, fs, day, host_dir, want, src_hash)
            if progress:
                progress(f"tier {day} host={host_dir}: derived from {len(good)} files")
    return res


def _delete_old(root: str, fs: Any, day: dt.date, host_dir: str, want: str, src_hash: str) -> None:
    """Tier files of this host-day other than the ones just written."""
    for t in TIERS:
        for e in layout.list_entries(root, t, fs, lambda d: d == day):
            if e.host_dir != host_dir:
                continue
            md = _tier_meta(e, fs)
            if (
                md.get(HASH_KEY, b"").decode() == want
                and md.get(SOURCES_KEY, b"").decode() == src_hash
            ):
                continue
            if fs is None:
                Path(e.path).unlink(missing_ok=True)
            else:
                fs.delete_file(e.path)


def _derive(
    bucket: str | os.PathLike[str],
    day: dt.date,
    host_dir: str,
    paths: list[str],
    stmts: dict[str, str],
    width: float,
    want: str,
    src_hash: str,
) -> None:
    from analyzer.bucket import to_arrow
    from collector.writer import write_derived

    con = duckdb.connect()
    try:
        files = "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"
        con.execute(
            f"CREATE VIEW {SOURCE} AS SELECT * FROM read_parquet({files}, union_by_name = true, "
            "hive_partitioning = false)"
        )
        params = {**rollup.DEFAULTS, "bucket_s": width}
        for tier_table, table in TIERS.items():
            stmt = stmts[table]
            refs = referenced_params(stmt)
            con.execute(stmt, {k: params[k] for k in refs} if refs else None)
            data = to_arrow(con.sql(f"SELECT * FROM {table} ORDER BY ALL"))
            extra = {HASH_KEY: want.encode(), SOURCES_KEY: src_hash.encode()}
            extra[WIDTH_KEY] = f"{width:g}".encode()
            write_derived(bucket, host_dir, tier_table, day, data, extra)
    finally:
        con.close()


COMBINE_DIR = rollup.ROLLUP_DIR / "tier"


@dataclass
class TierUse:
    """The tier an analysis reads: views tier_gpu_info, tier_gpu_buckets and gpu_samples_rest."""

    width: float
    host_days: int  # read from the tier
    raw_host_days: int  # derived from raw samples


def attach(
    con: duckdb.DuckDBPyConnection,
    root: str,
    fs: Any,
    good: list[layout.FileCheck],
    local: list[str],
    date_ok: layout.DateOk,
    host_ok: layout.HostOk,
    usable: Callable[[layout.FileCheck], bool],
    view_sql: Callable[[list[str]], str],
    stage: Callable[[list[str]], list[str]],
) -> TierUse | None:
    """Views over the current tier for the host-days it covers and over the raw
    ``gpu_samples`` files of the others; None when no host-day has a current tier.

    ``usable`` says whether a raw file's rows all pass the reader's filters (its
    footer's time range within the time-sanity bounds); ``view_sql`` makes the
    ``SELECT`` the reader would make over raw files; ``stage`` copies S3 objects.
    """
    width = _width(None)
    try:
        want = sql_hash(width)
        tier = current_tier(root, fs, date_ok, host_ok, want)
    except (OSError, RuntimeError):
        return None
    if not tier:
        return None
    by_day: dict[tuple[dt.date, str], list[int]] = {}
    for i, c in enumerate(good):
        by_day.setdefault((c.entry.day, c.entry.host_dir), []).append(i)
    covered: list[layout.Entry] = []
    rest: list[str] = []
    n_tier = 0
    for key, idx in by_day.items():
        cur = tier.get(key, {})
        src = sources_hash([good[i].entry for i in idx])
        if (
            set(cur) == set(TIERS)
            and all(s == src for _e, s in cur.values())
            and all(usable(good[i]) for i in idx)
        ):
            covered += [e for e, _s in cur.values()]
            n_tier += 1
        else:
            rest += [local[i] for i in idx]
    if not n_tier:
        return None
    paths = [e.path for e in covered]
    if fs is not None:
        paths = stage(paths)
    for tier_table in TIERS:
        mine = [p for p, e in zip(paths, covered, strict=True) if e.table == tier_table]
        lst = "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in mine) + "]"
        con.execute(f"CREATE OR REPLACE VIEW {tier_table} AS SELECT * FROM read_parquet({lst})")
    if rest:
        con.execute(f"CREATE OR REPLACE VIEW gpu_samples_rest AS {view_sql(rest)}")
    else:
        con.execute("CREATE OR REPLACE VIEW gpu_samples_rest AS SELECT * FROM gpu_samples LIMIT 0")
    return TierUse(width, n_tier, len(by_day) - n_tier)


def rollup_with_tier(con: duckdb.DuckDBPyConnection, stmt: str, params: dict[str, Any]) -> bool:
    """Run a first-stage rollup statement as tier + rest when the tier covers it;
    False when the statement is not one the tier stores (run it as it is)."""
    for table in TIERS.values():
        if f"CREATE OR REPLACE TABLE {table} AS" not in stmt:
            continue
        if table == "gpu_buckets" and float(params["bucket_s"]) != _width(None):
            return False  # the analysis buckets by another width: raw samples only
        if "FROM gpu_samples\n" not in stmt:
            return False
        rest = stmt.replace(f"TABLE {table} AS", f"TABLE {table}_rest AS", 1).replace(
            "FROM gpu_samples\n", "FROM gpu_samples_rest\n"
        )
        refs = referenced_params(rest)
        con.execute(rest, {k: params[k] for k in refs} if refs else None)
        for s in rollup._statements((COMBINE_DIR / f"{table}.sql").read_text(encoding="utf-8")):
            con.execute(s)
        return True
    return False
