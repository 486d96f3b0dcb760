"""Open a trace bucket as DuckDB views.

Files are listed through the bucket layout (:mod:`collector.layout`), so date and
host filters prune whole folders before DuckDB opens anything. Each file's footer
is checked against the schema first: a truncated, empty, foreign or drifted file
is left out and named (an incomplete analysis), and the rest is analysed. A table
with no files becomes an empty, correctly typed table: rules that need it are
skipped, everything else still runs.

Time sanity (:mod:`analyzer.timesanity`): samples stamped more than five minutes
after the analysis time, or (for tables sampled by a collector run) before the
host's first collector run, are quarantined: left out of the views, counted and
listed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from analyzer import memory, tierindex
from analyzer.sampling import host_intervals, samples_span
from analyzer.staging import StageError
from analyzer.staging import stage as _stage
from analyzer.staging import temp_stage as _temp_stage
from analyzer.timesanity import (
    FUTURE_MARGIN,
    SAMPLED_AT_RUN,
    count_quarantined,
    first_runs,
    sane_predicate,
    scope_predicates,
)
from analyzer.views import raw_select
from analyzer.views import sql_list as _sql_list
from collector import filecheck, layout, layoutscan
from collector.schema import TABLES
from collector.store import is_s3, root_of, s3_filesystem, s3_root


class BucketError(Exception):
    """The bucket cannot be read (missing, not a bucket, unreadable listing)."""


class BucketChanged(Exception):
    """A file listed when the analysis opened the bucket was gone when it was read: a
    ``leakreport rollup`` or ``compact`` replaced it meanwhile (they write the new file
    first, then delete). The message is the file's path; the analysis starts again."""


# how DuckDB names a file it could not open
_NAMED = re.compile(r'(?:match the pattern|open file|No such file or directory[^"]*)\s*"([^"]+)"')


def vanished(e: BaseException, fs: Any = None) -> str | None:
    """The bucket file a read error names, when that file no longer exists; else None."""
    m = _NAMED.search(str(e))
    return m.group(1) if m and not exists(m.group(1), fs) else None


def exists(path: str, fs: Any = None) -> bool:
    """Whether a bucket file is there (True when that cannot be told)."""
    if fs is None:
        return os.path.lexists(path)  # a dangling link is there: unreadable, not gone
    import pyarrow.fs as pafs

    try:
        return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)
    except OSError:
        return True  # unknown: not taken for a change


@dataclass
class Scope:
    since: dt.date | None = None
    until: dt.date | None = None
    hosts: list[str] = field(default_factory=list)
    before: dt.datetime | None = None  # only samples strictly before this instant

    def date_ok(self, d: dt.date) -> bool:
        return (self.since is None or d >= self.since) and (self.until is None or d <= self.until)

    def host_ok(self, h: str) -> bool:
        """``h`` is the name a host folder decodes to (:func:`collector.layout.host_folders`)."""
        return not self.hosts or h in self._folders

    @property
    def date_filter(self) -> layout.DateOk:
        """:meth:`date_ok`, or :data:`layout.ANY` where no date is given (S3 then
        lists a table at once, not date by date)."""
        return self.date_ok if self.since or self.until else layout.ANY

    @property
    def host_filter(self) -> layout.HostOk:
        return self.host_ok if self.hosts else layout.ANY

    @functools.cached_property
    def _folders(self) -> set[str]:
        return layout.host_folders(self.hosts)


def to_arrow(rel: duckdb.DuckDBPyRelation) -> pa.Table:
    """A relation as an Arrow table, on DuckDB 1.x and 2.x (which renamed the call)."""
    fn = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fn()


def checked_files(
    bucket: str | os.PathLike[str],
    table: str,
    scope: Scope,
    fs: Any = None,
    index: tierindex.Index | None = None,
) -> tuple[list[filecheck.FileCheck], list[filecheck.FileCheck]]:
    """(readable files of a table in scope, files left out because they do not match);
    ``index``: the footer checks the last ``leakreport rollup`` stored."""
    entries = layout.list_entries(
        root_of(bucket, fs), table, fs, scope.date_filter, scope.host_filter, bad_folders=True
    )
    if index is None:
        return filecheck.live(filecheck.check_all(entries, fs))
    folders = [e for e in entries if e.unlisted]  # no day to index them by
    files = [e for e in entries if not e.unlisted]
    checks = index.checks(files, lambda es: filecheck.check_all(es, fs))
    return filecheck.live(checks + filecheck.check_all(folders, fs))


@dataclass
class Opened:
    con: duckdb.DuckDBPyConnection
    counts: dict[str, int]  # table -> files read
    skipped: list[str] = field(default_factory=list)  # "path: reason", files left out
    quarantined: list[str] = field(default_factory=list)  # one line per host and table
    readable_dirs: list[str] = field(default_factory=list)  # where the views read from
    tier: Any = None  # analyzer.tierread.TierUse when the stored rollup tier is read
    span_s: float | None = None  # device samples' time span, from the footers (None: unknown)
    intervals: dict[str, float] = field(default_factory=dict)  # samples' interval per host
    # table -> the hosts its view has rows of, where the footers tell exactly (no row filter)
    hosts: dict[str, set[str]] = field(default_factory=dict)
    duckdb_memory: int | None = None  # bytes DuckDB may use, of --memory-limit (None: unset)
    notes: list[str] = field(default_factory=list)  # said at the start of the analysis
    # every raw file the views read: the file read (staged, for S3) -> its bucket path
    paths: dict[str, str] = field(default_factory=dict)
    unread: list[str] = field(default_factory=list)  # data in scope not analysed, and why

    @property
    def interval_s(self) -> float | None:
        """The sparsest host's sampling interval (None: unknown)."""
        return max(self.intervals.values()) if self.intervals else None


def check_bucket(bucket: str | os.PathLike[str]) -> Any:
    """The S3 file system of an ``s3://`` bucket (None for a folder), once it is known
    to be there: BucketError naming it otherwise."""
    if is_s3(bucket):
        try:
            s3 = s3_filesystem()
            s3.get_file_info(s3_root(str(bucket)).split("/")[0])
        except Exception as e:  # pyarrow raises OSError or ArrowException subclasses
            raise BucketError(f"{bucket}: cannot open the S3 bucket: {e}") from e
        return s3
    path = Path(bucket)
    if not path.exists():
        raise BucketError(f"{path}: no such bucket folder")
    if not path.is_dir():
        raise BucketError(f"{path}: a bucket is a folder of trace tables")
    return None


def _known_table(name: str) -> bool:
    """A top-level folder of the bucket this version reads: a trace table, or the rollup
    tier's (``tier_*``: derived data, of this release or another, never the only copy)."""
    return name in TABLES or name.startswith("tier_")


def open_checked(
    bucket: str | os.PathLike[str],
    scope: Scope | None = None,
    *,
    con: duckdb.DuckDBPyConnection | None = None,
    memory_limit: str | None = None,
    stage_dir: str | os.PathLike[str] | None = None,
    now: dt.datetime | None = None,
    exclude: dict[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Opened:
    """A connection with one view per trace table, what was read, and what was not.
    ``exclude``: bucket paths of files to leave out, and why (:mod:`analyzer.rowcheck`).
    ``progress``: told of the slow steps on S3 (listing and footers, each table's copy).

    An ``s3://`` bucket's objects (pruned by date and host first) are copied once
    into ``stage_dir`` (a temporary folder if not given) and read from there:
    every rollup scans some tables more than once, and over the network each scan
    would fetch the objects again. Objects are copied whole: fetching only the
    columns some query names read more bytes, not fewer, on objects of a few
    hundred KB (48 MB against 43 MB for 12 hosts of the fleet-week benchmark,
    through three times the requests).
    """
    path = Path(bucket)
    s3 = check_bucket(bucket)
    budget = memory.parse_memory_limit(memory_limit) if memory_limit else None
    scope = scope or Scope()
    con = con or duckdb.connect()
    duck = memory.duckdb_share(budget) if budget else None
    if duck:
        con.execute(f"SET memory_limit = '{duck}B'")
    con.execute("SET TimeZone = 'UTC'")
    # every rollup binds the views again: footers read once, not per statement
    con.execute("SET parquet_metadata_cache = true")
    con.execute(f"SET checkpoint_threshold = '{memory.NO_CHECKPOINT}'")
    out = Opened(con, {}, duckdb_memory=duck)
    if s3 is not None:
        stage_dir = stage_dir or _temp_stage()
        out.readable_dirs.append(os.path.abspath(stage_dir))
    else:
        out.readable_dirs.append(os.path.abspath(path))
    good: dict[str, list[filecheck.FileCheck]] = {}
    from analyzer import tierread

    index = tierindex.stored(root_of(bucket, s3), s3)
    say = progress if progress is not None and s3 is not None else (lambda _m: None)
    say(f"{bucket}: listing the trace objects in scope and reading their footers")
    for name in TABLES:
        try:
            ok, bad = checked_files(bucket, name, scope, s3, index)
        except OSError as e:
            raise BucketError(f"{bucket}/{name}: cannot list the trace files: {e}") from e
        gone = [c.entry.path for c in bad if not exists(c.entry.path, s3)]
        if gone:
            raise BucketChanged(_shown(bucket, gone[0], s3))
        out.skipped += [f"{_shown(bucket, c.entry.path, s3)}: {c.problem}" for c in bad]
        if exclude:
            out.skipped += [
                f"{_shown(bucket, c.entry.path, s3)}: {exclude[c.entry.path]}"
                for c in ok
                if c.entry.path in exclude
            ]
            ok = [c for c in ok if c.entry.path not in exclude]
        good[name] = ok
        out.counts[name] = len(ok)
    root = root_of(bucket, s3)
    for d in layoutscan.foreign_tables(root, _known_table, s3, scope.date_ok, scope.host_ok):
        out.skipped.append(f"{_shown(bucket, d, s3)}: {layoutscan.FOREIGN}")
    wall = dt.datetime.now(dt.UTC)
    hi = max(now or wall, wall) + FUTURE_MARGIN
    local: dict[str, list[str]] = {}
    for name in TABLES:
        local[name] = [c.entry.path for c in good[name]]
        if s3 is not None and local[name]:
            say(f"{name}: copying {len(local[name]):,} objects from S3")
            try:
                local[name] = _stage(s3, local[name], stage_dir or _temp_stage())
            except StageError as e:  # the object it failed on: gone (replaced), or not
                if not exists(e.key, s3):  # one HEAD, not one per object of the table
                    raise BucketChanged(_shown(bucket, e.key, s3)) from None
                raise
        out.paths.update(zip(local[name], (c.entry.path for c in good[name]), strict=True))
    first_run = first_runs(con, good["collector_runs"], local["collector_runs"], hi)
    out.span_s = samples_span(good["gpu_samples"], hi)
    out.intervals = host_intervals(good["gpu_samples"], s3)
    parts: dict[str, str] = {}
    for name, spec in TABLES.items():
        files = local[name]
        if not files:
            # a real (empty) table, visible to every cursor of the connection
            cols = ", ".join(f'"{c}"' for c in spec.columns)
            con.register("__empty", pa.Table.from_pylist([], schema=spec.schema))
            con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT {cols} FROM __empty")
            con.unregister("__empty")
            continue
        los = first_run if name in SAMPLED_AT_RUN else {}
        sane = sane_predicate(good[name], hi, los)
        where = scope_predicates(scope) + ([sane] if sane else [])
        parts[name] = (" WHERE " + " AND ".join(where)) if where else ""
        with _reading(bucket, name):
            # binds the view, reading every footer: an unreadable file fails here already
            sql = raw_select(con, name, files, parts[name], alike=filecheck.one_schema(good[name]))
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
            if sane:
                lines, lost = count_quarantined(con, name, files, sane, scope)
                out.quarantined += lines
                out.unread += lost
    with _reading(bucket, "gpu_samples"):
        _pod_view(con, good["gpu_samples"], local["gpu_samples"], parts.get("gpu_samples", ""))
    out.hosts = footer_hosts(good, parts)
    if scope.before is None and parts:
        out.tier = tierread.attach_opened(
            out, bucket, s3, scope, good, local, parts, hi, first_run, stage_dir, index, exclude
        )
    return out


@contextlib.contextmanager
def _reading(bucket: str | os.PathLike[str], name: str) -> Iterator[None]:
    """Binding a view over a table's files: a file gone meanwhile is BucketChanged (the
    analysis reads the bucket again), any other failure a BucketError naming the table."""
    try:
        yield
    except duckdb.Error as e:
        if gone_path := vanished(e):
            raise BucketChanged(gone_path) from e
        raise BucketError(f"{bucket}/{name}: cannot read trace files: {e}") from e


def _pod_view(
    con: duckdb.DuckDBPyConnection, checks: list[filecheck.FileCheck], files: list[str], cond: str
) -> None:
    """``gpu_pod_samples``: the device samples of the files whose footers show a pod
    name (the rows of ``gpu_samples`` that can have one), so that finding the pods reads
    those files alone, not every day's."""
    mine = [(c, f) for c, f in zip(checks, files, strict=True) if c.pods]
    if not mine:
        con.execute("CREATE OR REPLACE TABLE gpu_pod_samples AS SELECT * FROM gpu_samples LIMIT 0")
        return
    alike = filecheck.one_schema([c for c, _f in mine])
    sql = raw_select(con, "gpu_samples", [f for _c, f in mine], cond, alike=alike)
    con.execute(f"CREATE OR REPLACE VIEW gpu_pod_samples AS {sql}")


def footer_hosts(
    good: dict[str, list[filecheck.FileCheck]], parts: dict[str, str]
) -> dict[str, set[str]]:
    """Per table whose view reads its files whole (no scope or quarantine condition) and
    whose every file's footer names one host for all rows: the hosts it has rows of."""
    out: dict[str, set[str]] = {}
    for name, checks in good.items():
        if parts.get(name, "") or any(c.rows and c.host is None for c in checks):
            continue
        out[name] = {c.host for c in checks if c.rows and c.host is not None}
    return out


def scope_sampling(
    bucket: str | os.PathLike[str], scope: Scope, now: dt.datetime | None = None
) -> tuple[float | None, dict[str, float]]:
    """:func:`samples_span` and :func:`host_intervals` of a whole scope, before it is split
    into host batches."""
    s3 = s3_filesystem() if is_s3(bucket) else None
    wall = dt.datetime.now(dt.UTC)
    index = tierindex.stored(root_of(bucket, s3), s3)
    good, _bad = checked_files(bucket, "gpu_samples", scope, s3, index)
    span = samples_span(good, max(now or wall, wall) + FUTURE_MARGIN)
    return span, host_intervals(good, s3)


def open_bucket(
    bucket: str | os.PathLike[str],
    scope: Scope | None = None,
    *,
    con: duckdb.DuckDBPyConnection | None = None,
    memory_limit: str | None = None,
    stage_dir: str | os.PathLike[str] | None = None,
) -> tuple[duckdb.DuckDBPyConnection, dict[str, int]]:
    """:func:`open_checked`, as (connection, files read per table)."""
    o = open_checked(bucket, scope, con=con, memory_limit=memory_limit, stage_dir=stage_dir)
    return o.con, o.counts


def _shown(bucket: str | os.PathLike[str], p: str, fs: Any) -> str:
    return f"s3://{p}" if fs is not None else p


def lock_down(con: duckdb.DuckDBPyConnection, readable: list[str]) -> None:
    """After the views exist: no file access outside ``readable`` (the bucket, or its
    staging folder) and no configuration changes, for the rest of the connection."""
    dirs = [d.rstrip("/") + "/" for d in readable]
    tmp = con.execute("SELECT current_setting('temp_directory')").fetchone()
    if tmp and tmp[0]:
        dirs.append(os.path.abspath(str(tmp[0])).rstrip("/") + "/")
    con.execute(f"SET allowed_directories = {_sql_list(dirs)}")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
