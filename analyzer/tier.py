"""The stored rollup tier: derived once per finished host-day, read instead of raw samples.

``leakreport rollup`` (:func:`build`) runs the first-stage rollup statements (the very ones the
analysis runs) over one host-day's raw files at a time and stores their results in the bucket
layout: ``tier_gpu_info``, ``tier_gpu_buckets`` and ``tier_gpu_blocks`` (from
``gpu_samples``), ``tier_metric_norm`` (``metric_samples``), ``tier_proc_bins``
(``gpu_processes``), ``tier_source_runs`` (``collector_runs``), ``tier_server_parts``
(``processes``), grouped by keys within a day;
and ``tier_idle_segments``, from the three of ``gpu_samples``, ``metric_samples`` and
``log_lines`` together (:mod:`analyzer.tierjoint`).

Each file records the hash of its SQL (with the parameter values it used, the schema version
and tier format) and of the raw files it was made from. An analysis reads a host-day from the
tier only when both still match, its raw files lie within the day and pass the time-sanity
bounds, and the parameters are the same; otherwise (changed SQL, late data, a compaction
since, today) from raw samples: same findings either way.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import tempfile
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from analyzer import rollup, rowcheck, tiercurrent, tierindex, tierweek
from analyzer.packs import referenced_params
from collector import filecheck, layout
from collector.schema import SCHEMA_VERSION
from collector.store import remove, root_of

TIER_FORMAT = 3
# tier table -> (the rollup table it stores, the raw table it is derived from)
TIERS: dict[str, tuple[str, str]] = {
    "tier_gpu_info": ("gpu_info", "gpu_samples"),
    "tier_gpu_buckets": ("gpu_buckets", "gpu_samples"),
    "tier_gpu_blocks": ("gpu_blocks", "gpu_samples"),
    "tier_metric_norm": ("metric_norm", "metric_samples"),
    "tier_proc_bins": ("proc_bins", "gpu_processes"),
    "tier_source_runs": ("source_runs", "collector_runs"),
    "tier_server_parts": ("server_parts", "processes"),
}
SOURCES = tuple(sorted({s for _t, s in TIERS.values()}))
# tier tables made from a rollup table of the same raw table, made just before them (in
# TIERS order), not from the raw table itself: tier table -> the rollup table it reads
READS: dict[str, str] = {"tier_gpu_blocks": "gpu_buckets"}
# tier tables made from several raw tables of a host-day at once, by the chain of rollup
# statements that leads to them: the idle segments (03_idle_windows.sql), from the device
# samples, metrics and server log lines (their batch-stats events) of the host-day.
JOINT: dict[str, tuple[str, tuple[str, ...]]] = {
    "tier_idle_segments": ("idle_segments", ("gpu_samples", "metric_samples", "log_lines")),
}
JOINT_SOURCES = {s for _t, sources in JOINT.values() for s in sources}
JOINT_CHAIN = (
    "gpu_buckets",
    "metric_norm",
    "kv_usage",
    "activity",
    "idle_gpu_buckets",
    "activity_grid",
    "idle_requests",
    "idle_segments",
)
JOINT_TABLES = {t for t, _s in JOINT.values()}
ALL_TIERS = (*TIERS, *JOINT)
# every table the tier's files are stored under: the day files' and the week files'
STORED = (*ALL_TIERS, *(tierweek.week_table(t) for t in ALL_TIERS))
# the modules that turn log lines into events: part of a joint table's hash
PARSER = ("logevents.py", "logparse.py", "logformats.py", "logstamps.py", "logread.py")
HASH_KEY = b"leakreport.tier_sql_hash"
SOURCES_KEY = b"leakreport.tier_sources"
WIDTH_KEY = b"leakreport.tier_bucket_s"
COMBINE_DIR = rollup.ROLLUP_DIR / "tier"
DAY = dt.timedelta(days=1)


def statements() -> dict[str, str]:
    """The rollup statements the tier runs, by the table they create (in file order)."""
    out: dict[str, str] = {}
    wanted = {t for t, _s in TIERS.values()} | set(JOINT_CHAIN) | set(READS.values())
    for f in rollup.rollup_files():
        for stmt in rollup._statements(f.read_text(encoding="utf-8")):
            m = rollup._CREATES.search(stmt)
            if m and m.group(1) in wanted and "MACRO" not in m.group(0):
                out[m.group(1)] = stmt
    missing = wanted - set(out)
    if missing:
        raise RuntimeError(f"no rollup statement creates {', '.join(sorted(missing))}")
    return out


def build_params(width: float) -> dict[str, Any]:
    """The parameters the tier is derived with: the defaults, buckets of ``width``."""
    return {**rollup.DEFAULTS, "bucket_s": width}


def chain(tier_table: str, stmts: dict[str, str] | None = None) -> list[str]:
    """The statements that make one tier table, in order."""
    stmts = stmts or statements()
    if tier_table in JOINT:
        return [stmts[t] for t in JOINT_CHAIN]
    before = [stmts[READS[tier_table]]] if tier_table in READS else []
    return [*before, stmts[TIERS[tier_table][0]]]


def chain_params(tier_table: str) -> set[str]:
    return {k for stmt in chain(tier_table) for k in referenced_params(stmt)}


def sql_hash(width: float, tier_table: str = "tier_gpu_buckets") -> str:
    """What makes one tier table's file current: its statements, the parameter values they
    use, how tier and raw combine, the schema version and the tier format."""
    table, source = TIERS.get(tier_table) or (JOINT[tier_table][0], "+".join(JOINT[tier_table][1]))
    stmts = chain(tier_table)
    params = build_params(width)
    used = ",".join(f"{k}={params[k]!r}" for k in sorted(chain_params(tier_table)))
    body = "\n".join(stmts)
    h = hashlib.sha256(f"{TIER_FORMAT}/{SCHEMA_VERSION}/{source}/{used}\n{body}\n".encode())
    h.update((COMBINE_DIR / f"{table}.sql").read_bytes())
    if "log_lines" in JOINT.get(tier_table, ("", ()))[1]:
        for name in PARSER:  # a changed log parser can find other batch-stats events
            h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()[:32]


def sources_hash(entries: list[layout.Entry]) -> str:
    """The raw files a tier file was derived from, by name, and for a local file its size
    and modification time: a file rewritten under its name makes the tier stale (never
    read) for that day."""

    def stamp(e: layout.Entry) -> str:
        try:  # a local file; an S3 key (its objects are never rewritten by us) by its name
            st = os.stat(e.path)
        except OSError:
            return e.name
        return f"{e.name}:{st.st_size}:{st.st_mtime_ns}"

    return hashlib.sha256("\n".join(sorted(map(stamp, entries))).encode()).hexdigest()[:32]


@dataclass
class Result:
    built: int = 0  # host-days derived and written (one table or more)
    current: int = 0  # host-days whose tier was already current
    weeks: int = 0  # week files written (tierweek)
    skipped: list[str] = field(default_factory=list)  # raw files left out, and why
    week_failures: list[str] = field(default_factory=list)  # week files not written, why
    temp_removed: int = 0  # temporary files left by a stopped rollup, deleted


def _width(overrides: dict[str, Any] | None) -> float:
    return float({**rollup.DEFAULTS, **(overrides or {})}["long_bucket_s"])


def _of(source: str) -> list[str]:
    return [t for t, (_r, s) in TIERS.items() if s == source]


def _is_current(cur: dict[str, tuple[layout.Entry, str]], source: str, src_hash: str) -> bool:
    mine = _of(source)
    return all(t in cur and cur[t][1] == src_hash for t in mine)


def build(
    bucket: str | os.PathLike[str],
    before: dt.date | None = None,
    progress: Callable[[str], None] | None = None,
    overrides: dict[str, Any] | None = None,
    weeks: bool = True,
    alone: bool = False,
) -> Result:
    """Derive the tier for every finished host-day (days before ``before``, default
    today UTC) whose tier is missing or stale; stale files are then deleted. With
    ``weeks``, each week's files are then merged into week files (:mod:`analyzer.tierweek`).
    Then the footer-check index of the finished days is brought up to date
    (:mod:`analyzer.tierindex`). ``alone``: no other rollup runs on this bucket (the
    caller holds its lock), so a temporary file of the tier, its index or the stored week
    findings is one a stopped run left, deleted whatever its age (else once it is an hour
    old, as :func:`analyzer.compact.compact` does)."""
    from analyzer import weekstore
    from analyzer.bucket import check_bucket
    from analyzer.compact import STALE_TEMP_S, groups, remove_old, stale_temp
    from analyzer.staging import stage as _stage

    before = before or dt.datetime.now(dt.UTC).date()
    fs = check_bucket(bucket)
    root = root_of(bucket, fs)
    width = _width(overrides)
    stmts = statements()
    hashes = {t: sql_hash(width, t) for t in ALL_TIERS}
    res = Result()
    if fs is None:
        temp = stale_temp(root, before, STORED) + [
            f  # write_atomic's, of the rollup's other files
            for d in (tierindex.INDEX_DIR, weekstore.STORE_DIR)
            for f in Path(root, d).glob(".*.tmp")
        ]
        res.temp_removed = remove_old(temp, 0.0 if alone else STALE_TEMP_S)
    good_of: dict[tuple[str, dt.date, str], list[layout.Entry]] = {}
    index = tierindex.load(root, fs, progress)
    have = tiercurrent.current_tier(root, fs, lambda d: d < before, layout.ANY, width, index)
    for path in have.twins:  # the same rows twice: one file of each stays
        remove(path, fs)
    built: set[tuple[dt.date, str]] = set()
    seen: set[tuple[dt.date, str]] = set()
    con = duckdb.connect()  # one for every host-day: a new one costs ~30 ms
    con.execute("SET TimeZone = 'UTC'")
    from analyzer import tierjoint

    by_day: dict[tuple[dt.date, str], list[tuple[str, list[layout.Entry]]]] = {}
    for (source, day, host_dir), entries in groups(
        root, before, fs, sorted({*SOURCES, *JOINT_SOURCES})
    ).items():
        by_day.setdefault((day, host_dir), []).append((source, entries))
    tierjoint.prepare(con)
    with con, tempfile.TemporaryDirectory(prefix="leakreport-tier-") as stage:
        # host-day by host-day: the joint tables reuse what its sources' tables just derived
        for (day, host_dir), of_day in sorted(by_day.items()):
            fresh: set[str] = set()  # rollup tables derived for this host-day, still in con
            for source, entries in sorted(of_day):
                checked = index.checks(entries, lambda es: filecheck.check_all(es, fs))
                good, bad = filecheck.live(checked)
                res.skipped += [f"{c.entry.path}: {c.problem}" for c in bad]
                if not good:
                    continue
                good_of[(source, day, host_dir)] = [c.entry for c in good]
                if source not in SOURCES:
                    continue  # read by a joint tier table only
                seen.add((day, host_dir))
                src_hash = sources_hash([c.entry for c in good])
                if _is_current(have.get((day, host_dir), {}), source, src_hash):
                    continue
                paths = [c.entry.path for c in good]
                if fs is not None:
                    paths = _stage(fs, paths, stage)
                try:
                    names = _derive(
                        con, bucket, source, day, host_dir, paths, stmts, width, hashes, src_hash
                    )
                except duckdb.Error as e:  # rows that cannot be read: name the file, go on
                    if not rowcheck.may_be_rows(e):
                        raise
                    what = f"the tier of {day} host={host_dir} from {source}"
                    res.skipped += rowcheck.not_stored([c.entry.path for c in good], paths, e, what)
                    continue
                fresh |= {TIERS[t][0] for t in _of(source)}
                built.add((day, host_dir))
                _delete_old(root, fs, _of(source), day, host_dir, names)
                if progress:
                    progress(f"tier {day} host={host_dir}: {source} derived from {len(good)} files")
            if tierjoint.derive(
                con,
                bucket,
                root,
                fs,
                day,
                host_dir,
                good_of,
                have,
                stmts,
                width,
                hashes,
                stage,
                fresh,
                progress,
                res.skipped,
            ):
                built.add((day, host_dir))
    res.built, res.current = len(built), len(seen - built)
    if weeks:
        now = tiercurrent.current_tier(root, fs, layout.ANY, layout.ANY, width, index)
        res.weeks = tierweek.pack(
            bucket, root, fs, now, now.weeks, hashes, progress, res.week_failures
        )
    tierindex.refresh(root, fs, before, index, list(STORED), lambda e: tiercurrent.tier_meta(e, fs))
    return res


def _delete_old(
    root: str,
    fs: Any,
    tables: list[str],
    day: dt.date,
    host_dir: str,
    keep: Collection[str],
) -> None:
    """Delete the tier files of this host-day and these tier tables other than the ones
    just written (``keep``, by name): older ones, and any a stopped run left beside them."""
    for t in tables:
        for e in layout.folder_entries(root, t, day, host_dir, fs):
            if e.name not in keep:
                remove(e.path, fs)


def _derive(
    con: duckdb.DuckDBPyConnection,
    bucket: str | os.PathLike[str],
    source: str,
    day: dt.date,
    host_dir: str,
    paths: list[str],
    stmts: dict[str, str],
    width: float,
    hashes: dict[str, str],
    src_hash: str,
) -> set[str]:
    """Write this host-day's tier files of the tables made from ``source``; their names."""
    from analyzer.bucket import to_arrow
    from analyzer.views import raw_select
    from collector.writer import write_derived

    con.execute(f"CREATE OR REPLACE VIEW {source} AS {raw_select(con, source, paths, '')}")
    params = build_params(width)
    names = set()
    for tier_table in _of(source):
        table = TIERS[tier_table][0]
        stmt = stmts[table]
        refs = referenced_params(stmt)
        con.execute(stmt, {k: params[k] for k in refs} if refs else None)
        data = to_arrow(con.sql(f"SELECT * FROM {table} ORDER BY ALL"))
        extra = {
            HASH_KEY: hashes[tier_table].encode(),
            SOURCES_KEY: src_hash.encode(),
            WIDTH_KEY: f"{width:g}".encode(),
        }
        names.add(write_derived(bucket, host_dir, tier_table, day, data, extra).name)
    return names
