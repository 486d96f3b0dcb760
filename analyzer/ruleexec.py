"""Running one rule: a single SELECT, in a rolled-back transaction, under a time limit that
Ctrl-C also stops; its rows checked and made findings (repeats given once)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import duckdb

from analyzer.categories import SEVERITIES
from analyzer.findings import Finding, iso_utc
from analyzer.packs import Rule


def json_value(v: Any) -> Any:
    """A JSON-safe, deterministic form of a DuckDB value."""
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else round(v, 4)
    if isinstance(v, decimal.Decimal):
        return round(float(v), 4)
    if isinstance(v, (dt.datetime, dt.date)):
        return iso_utc(v) if isinstance(v, dt.datetime) else v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    return str(v)


class RuleOutputError(Exception):
    pass


DEFAULT_RULE_TIMEOUT_S = 60.0


def check_select(sql: str) -> None:
    """A rule is one read-only query: a single SELECT (or WITH ... SELECT) statement.
    Anything else (COPY, ATTACH, DROP, SET, INSERT, several statements) is refused
    before it runs."""
    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise RuleOutputError(f"the rule's SQL does not parse: {e}") from e
    if len(stmts) != 1:
        raise RuleOutputError(f"a rule is one SELECT statement; this one has {len(stmts)}")
    kind = stmts[0].type
    if kind != duckdb.StatementType.SELECT:
        name = getattr(kind, "name", str(kind))
        raise RuleOutputError(f"a rule is one SELECT statement; this one is {name}")


def _interrupted(e: BaseException) -> bool:
    """DuckDB turns Ctrl-C during a query into RuntimeError('Query interrupted')."""
    return isinstance(e, RuntimeError) and "interrupted" in str(e).lower()


def was_interrupted(e: BaseException) -> bool:
    """A DuckDB query stopped by Ctrl-C (DuckDB's own exception, or its text)."""
    return isinstance(e, duckdb.InterruptException) or _interrupted(e)


def interruptible(
    con: duckdb.DuckDBPyConnection, work: Callable[[], Any], timeout_s: float | None = None
) -> Any:
    """Run ``work`` (DuckDB calls on ``con``) in a helper thread while this thread
    waits: Ctrl-C (and ``timeout_s``) interrupt the query at once instead of
    whenever DuckDB next looks at signals. Raises KeyboardInterrupt on Ctrl-C and
    TimeoutError past the limit."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as e:  # handed to the waiting thread
            box["error"] = e

    t = threading.Thread(target=target, name="leakreport-query", daemon=True)
    t.start()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while t.is_alive():
            t.join(0.05)
            if deadline is not None and time.monotonic() > deadline and t.is_alive():
                con.interrupt()
                t.join(5.0)
                raise TimeoutError(f"stopped after the rule time limit of {timeout_s:g} s")
    except KeyboardInterrupt:
        con.interrupt()
        # wait for the query to stop: a thread still inside DuckDB when the interpreter
        # exits aborts the process (SIGABRT, "exception not rethrown")
        t.join(30.0)
        raise
    if "error" in box:
        err = box["error"]
        if _interrupted(err):
            raise KeyboardInterrupt from err
        raise err
    return box.get("value")


def run_contained(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: dict[str, Any] | None,
    timeout_s: float | None,
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one SELECT inside a transaction that is always rolled back (nothing it
    does can change what the next rule sees), interrupted after ``timeout_s``."""
    check_select(sql)

    def work() -> tuple[list[str], list[tuple[Any, ...]]]:
        con.execute("BEGIN TRANSACTION")
        try:
            res = con.execute(sql, params or None)
            if res.description is None:
                raise RuleOutputError("the rule's SQL returned no result set (it must be a SELECT)")
            return [d[0] for d in res.description], res.fetchall()
        finally:
            con.execute("ROLLBACK")

    try:
        out: tuple[list[str], list[tuple[Any, ...]]] = interruptible(con, work, timeout_s)
    except TimeoutError as e:
        raise RuleOutputError(str(e)) from e
    return out


def run_rule(
    con: duckdb.DuckDBPyConnection,
    rule: Rule,
    overrides: dict[str, Any] | None = None,
    timeout_s: float | None = DEFAULT_RULE_TIMEOUT_S,
) -> tuple[list[Finding], int]:
    """The rule's findings, and how many of its rows repeated another row exactly (a
    join that fans out): those are given once, and the count is said with the rule."""
    params = rule.bound_params(overrides)
    cols, rows = run_contained(con, rule.sql, params, timeout_s)
    for needed in ("host", "summary"):
        if needed not in cols:
            raise RuleOutputError(f"rule output lacks the column {needed!r}")
    missing = [c for c in rule.evidence if c not in cols]
    if missing:
        raise RuleOutputError(f"rule output lacks evidence column(s) {', '.join(missing)}")
    out = []
    seen: set[tuple[Any, ...]] = set()
    for n, row in enumerate(rows, 1):
        key = tuple(json.dumps(x, sort_keys=True, default=str) for x in row)
        if key in seen:
            continue
        seen.add(key)
        rec = dict(zip(cols, row, strict=True))
        _check_row(rec, n)
        severity = rec.get("severity") or rule.severity
        gpu = rec.get("gpu")
        pid = rec.get("pid")
        out.append(
            Finding(
                rule_id=rule.id,
                category=rule.category,
                severity=str(severity),
                host=str(rec["host"]),
                gpu=None if gpu is None else int(gpu),
                pid=None if pid is None or int(pid) == 0 else int(pid),
                start=iso_utc(rec.get("start")),
                end=iso_utc(rec.get("end")),
                summary=str(rec["summary"]),
                evidence={c: json_value(rec[c]) for c in rule.evidence},
                remediation=rule.remediation,
                title=rule.title,
                references=list(rule.references),
            )
        )
    return out, len(rows) - len(out)


def _check_row(rec: dict[str, Any], n: int) -> None:
    """A row a finding can be made of: a host and a summary, a known severity, times that
    are times. A NULL host became the host "None", and 'yesterday' a finding's start."""
    for col in ("host", "summary"):  # (an empty host name is a host's: its folder is %)
        if rec[col] is None:
            raise RuleOutputError(f"row {n}: {col} is NULL")
    if rec.get("severity") is not None and rec["severity"] not in SEVERITIES:
        raise RuleOutputError(
            f"row {n}: severity {rec['severity']!r}, not one of {', '.join(SEVERITIES)}"
        )
    for col in ("start", "end"):
        v = rec.get(col)
        if v is not None and not isinstance(v, dt.date):  # a datetime, or a day
            raise RuleOutputError(f"row {n}: {col} is {v!r}, not a timestamp or date")
