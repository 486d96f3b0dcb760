"""Which Parquet files' rows cannot be read.

Opening a bucket checks every file's footer; a file can have a sound footer over pages
that are not (a disk or copy that damaged them, a tool that wrote them wrong). A
statement that reads such a file fails without naming it. Only then are the files the
statement could have read decoded (in groups, halved where one fails), in a connection of
their own, so that the analysis can leave out the ones that fail, say so, and go on
(:mod:`analyzer.runner`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import duckdb

from analyzer.bucket import Opened, vanished
from analyzer.views import parquet

# failures of the SQL or the machine, never of a file's rows
_NOT_READS = (
    duckdb.OutOfMemoryException,
    duckdb.InterruptException,
    duckdb.BinderException,
    duckdb.ParserException,
    duckdb.CatalogException,
    duckdb.PermissionException,
)


class RowsUnreadable(Exception):
    """A statement failed reading rows; ``paths``: the raw files it could have read (the
    file read -> its bucket path, to name and leave out), ``tier``: the same of the stored
    tier's files."""

    def __init__(self, error: BaseException, paths: dict[str, str], tier: dict[str, str]) -> None:
        super().__init__(str(error))
        self.error, self.paths, self.tier = error, paths, tier


def duckdb_error(e: BaseException | None) -> duckdb.Error | None:
    """The DuckDB error ``e`` is or was raised from, if any."""
    while e is not None and not isinstance(e, duckdb.Error):
        e = e.__cause__
    return e


def may_be_rows(e: BaseException) -> bool:
    """Whether ``e`` may come from a file's rows (not from memory, an interrupt or the SQL)."""
    err = duckdb_error(e)
    return err is not None and not isinstance(err, _NOT_READS)


@contextlib.contextmanager
def checked(opened: Opened) -> Iterator[None]:
    """A failure of the statements within that may come from a file's rows is raised as
    RowsUnreadable, with every file of ``opened`` they could have read."""
    try:
        yield
    except (RuntimeError, duckdb.Error) as e:
        if vanished(e) or not may_be_rows(e):
            raise
        stored = opened.tier.origin if opened.tier is not None else {}
        raise RowsUnreadable(e, opened.paths, stored) from e


def left_out(e: RowsUnreadable, progress: Callable[[str], None]) -> dict[str, str]:
    """The bucket paths of the files whose rows cannot be read, and why (a file of the
    stored tier too: its host-days are then derived from raw samples); the failure
    itself again where none is found."""
    n = len(e.paths) + len(e.tier)
    progress(f"reading rows failed ({e}): checking the rows of the {n} files read")
    bad = unreadable([*e.paths, *sorted(e.tier)], progress)
    if not bad:
        raise e.error
    named = {**e.paths, **e.tier}
    # DuckDB quotes the file it read: for S3 a staged copy, named here by its key instead
    return {named[p]: why.replace(p, named[p]) for p, why in bad.items()}


GROUP = 64  # files decoded together; a group that fails is halved until the bad ones are found


def unreadable(paths: list[str], progress: Callable[[str], None] | None = None) -> dict[str, str]:
    """path -> why, for each of ``paths`` whose rows cannot all be decoded. Files are
    decoded a group of one table's at a time (one statement per file cost 12 s for 6,400
    files), every column of every row hashed, so nothing is held; a group that fails
    is halved until each failing file stands alone."""
    bad: dict[str, str] = {}
    by_table: dict[str, list[str]] = {}
    for p in paths:  # one table's files together: other tables' columns could clash
        by_table.setdefault(p.rsplit("/date=", 1)[0], []).append(p)
    todo = [fs[i : i + GROUP] for fs in by_table.values() for i in range(0, len(fs), GROUP)]
    done, told = 0, 0
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        while todo:
            group = todo.pop()
            try:
                con.execute(f"SELECT max(hash(COLUMNS(*))) FROM {parquet(group)}").fetchall()
            except duckdb.Error as e:
                if len(group) > 1:
                    todo += [group[len(group) // 2 :], group[: len(group) // 2]]
                    continue
                bad[group[0]] = f"rows cannot be read: {str(e).splitlines()[0][:300]}"
            done += len(group)
            if progress and done - told >= 500:
                told = done
                progress(f"checked the rows of {done} of {len(paths)} files")
    return bad


def not_stored(named: list[str], paths: list[str], e: Exception, what: str) -> list[str]:
    """Why ``what`` (made from the files ``named``, read as ``paths``) was not stored:
    each file whose rows cannot be read, with its reason; else ``e``."""
    bad = unreadable(paths)
    out = [
        f"{n}: {bad[p]}; {what} not stored" for n, p in zip(named, paths, strict=True) if p in bad
    ]
    return out or [f"{what} not stored: {e}"]
