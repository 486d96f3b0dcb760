"""The SQL of a trace table's view: the schema's columns over a list of Parquet files,
one row per key where the table has one (:func:`raw_select`). analyzer.bucket builds the
views with it; the rollup tier (analyzer.tier, analyzer.tierread) reads the raw rest of a
host-day through the same SELECT."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from collector.schema import TABLES, TS

# the DuckDB type of an optional column's NULLs, where no file has the column yet
# the SQL type of an optional column a file written before it lacks (collector.schema)
_SQL_TYPE = {
    pa.string(): "VARCHAR",
    TS: "TIMESTAMPTZ",
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
}


def sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def sql_list(paths: list[str]) -> str:
    return "[" + ", ".join(sql_str(p) for p in paths) + "]"


def parquet(files: list[str], union_by_name: bool = True) -> str:
    """``read_parquet`` of ``files`` with the columns the files hold and no other: DuckDB
    would add ``date`` and ``host`` from the ``date=``/``host=`` folders, and a host's
    folder is not always its name (a long one is cut, an empty one is ``%``)."""
    union = ", union_by_name = true" if union_by_name else ""
    return f"read_parquet({sql_list(files)}{union}, hive_partitioning = false)"


def raw_select(
    con: duckdb.DuckDBPyConnection,
    name: str,
    files: list[str],
    cond: str,
    columns_of: list[str] | None = None,
    *,
    alike: bool = False,
) -> str:
    """The ``SELECT`` of a trace table's view over ``files``: the schema's columns (NULL
    for optional ones no file of ``columns_of``, default ``files``, has yet), one row
    per key where the table has one. ``alike``: every file of ``columns_of`` has the same
    Parquet schema (:func:`collector.filecheck.one_schema`), so DuckDB binds the view from one
    footer instead of reconciling all of them (union_by_name), at every statement."""
    spec = TABLES[name]
    src = parquet(files, union_by_name=not alike)
    cols = ", ".join(f'"{c}"' for c in spec.columns)
    if spec.optional:  # columns added later are NULL where no file has them yet
        of = parquet(columns_of or files, union_by_name=not alike)
        have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {of}").fetchall()}
        cols = ", ".join(
            f'CAST(NULL AS {_SQL_TYPE[spec.schema.field(c).type]}) AS "{c}"'
            if c in spec.optional and c not in have
            else f'"{c}"'
            for c in spec.columns
        )
    if spec.key:
        return _one_per_key(name, f"SELECT {cols} FROM {src}{cond}")
    return f"SELECT {cols} FROM {src}{cond}"


def _one_per_key(name: str, rows: str) -> str:
    """``rows`` with one row per key of table ``name``: of rows sharing a key, the one read
    first (least time column), ties broken by the other columns in schema order, the same at
    any thread count (``DISTINCT ON`` keeps any one). A hash aggregate of the least row, not a
    sort: a scan of 0.9 M log lines costs 1.1-1.7x DISTINCT ON's, DISTINCT ON ... ORDER BY 3x."""
    spec = TABLES[name]
    keys = ", ".join(f'"{c}"' for c in spec.key)
    rest = sorted(
        (c for c in spec.columns if c not in spec.key), key=lambda c: c != spec.time_column
    )
    row = ", ".join(f'"{c}" := "{c}"' for c in rest)
    out = ", ".join(f'"{c}"' if c in spec.key else f'__row."{c}" AS "{c}"' for c in spec.columns)
    return (
        f"SELECT {out} FROM (SELECT {keys}, min(struct_pack({row})) AS __row "
        f"FROM ({rows}) GROUP BY {keys})"
    )
