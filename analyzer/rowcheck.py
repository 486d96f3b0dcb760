"""Which Parquet files' rows cannot be read.

Opening a bucket checks every file's footer; a file can have a sound footer over pages
that are not (a disk or copy that damaged them, a tool that wrote them wrong). A
statement that reads such a file fails without naming it. Only then are the files the
statement could have read decoded one by one, in a connection of their own, so that the
analysis can leave out the ones that fail, say so, and go on (:mod:`analyzer.runner`).
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
    progress(f"reading rows failed ({e}): checking the rows of the {n} files read, one by one")
    bad = unreadable([*e.paths, *sorted(e.tier)], progress)
    if not bad:
        raise e.error
    return {{**e.paths, **e.tier}[p]: why for p, why in bad.items()}


def unreadable(paths: list[str], progress: Callable[[str], None] | None = None) -> dict[str, str]:
    """path -> why, for each of ``paths`` whose rows cannot all be decoded."""
    bad: dict[str, str] = {}
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        for i, p in enumerate(paths, 1):
            try:
                con.execute(f"CREATE OR REPLACE TEMP TABLE _rows AS SELECT * FROM {parquet([p])}")
            except duckdb.Error as e:
                bad[p] = f"rows cannot be read: {str(e).splitlines()[0][:300]}"
            if progress and i % 500 == 0:
                progress(f"checked the rows of {i} of {len(paths)} files")
    return bad


def not_stored(named: list[str], paths: list[str], e: Exception, what: str) -> list[str]:
    """Why ``what`` (made from the files ``named``, read as ``paths``) was not stored:
    each file whose rows cannot be read, with its reason; else ``e``."""
    bad = unreadable(paths)
    out = [
        f"{n}: {bad[p]}; {what} not stored" for n, p in zip(named, paths, strict=True) if p in bad
    ]
    return out or [f"{what} not stored: {e}"]
