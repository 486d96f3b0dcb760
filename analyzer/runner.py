"""Run rule packs over a bucket and produce the findings document."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import math
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from analyzer import __version__, coverage, logevents, memory, pods, rollup, rowcheck, series
from analyzer.bucket import BucketChanged, BucketError, Scope, lock_down, open_checked, vanished
from analyzer.categories import SEVERITIES
from analyzer.findings import (
    LEFT_OUT,
    Finding,
    FindingsDocument,
    PackInfo,
    RuleStatus,
    RunInfo,
    iso_utc,
    repeated_rows,
)
from analyzer.packs import Pack, Rule
from analyzer.progress import plural
from analyzer.progress import step as progress_step
from collector.store import is_s3

Progress = Callable[[str], None]


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
    for col in ("host", "summary"):
        if rec[col] is None or str(rec[col]).strip() == "":
            raise RuleOutputError(f"row {n}: {col} is {'NULL' if rec[col] is None else 'empty'}")
    if rec.get("severity") is not None and rec["severity"] not in SEVERITIES:
        raise RuleOutputError(
            f"row {n}: severity {rec['severity']!r}, not one of {', '.join(SEVERITIES)}"
        )
    for col in ("start", "end"):
        v = rec.get(col)
        if v is not None and not isinstance(v, dt.datetime):
            raise RuleOutputError(f"row {n}: {col} is {v!r}, not a timestamp")


def analyze(
    bucket: str | Path,
    packs: list[Pack],
    *,
    scope: Scope | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    only_rules: set[str] | None = None,
    progress: Progress | None = None,
    now: dt.datetime | None = None,
    memory_limit: str | None = None,
    with_series: bool = True,
    rule_timeout: float | None = DEFAULT_RULE_TIMEOUT_S,
    timings: list[dict[str, Any]] | None = None,
) -> FindingsDocument:
    """Analyse a bucket. Rules run contained: each one SELECT, read-only, with no
    file access but the bucket's, stopped after ``rule_timeout`` seconds. ``timings``
    (if given) gets the seconds of each stage: opening, every rollup statement,
    every rule, coverage and chart series."""
    if rule_timeout is not None and not rule_timeout > 0:
        raise ValueError(f"--rule-timeout {rule_timeout}: must be a positive number of seconds")
    scope = scope or Scope()
    overrides = overrides or {}
    say = progress or (lambda _m: None)
    exclude: dict[str, str] = {}  # bucket path -> why: files whose rows cannot be read
    attempt = 0
    while True:
        # an s3:// bucket's objects are staged here for the analysis (see open_bucket)
        staging = tempfile.TemporaryDirectory(prefix="leakreport-") if is_s3(bucket) else None
        try:
            with staging or contextlib.nullcontext() as stage:
                try:
                    return _analyze(
                        bucket,
                        packs,
                        scope,
                        overrides,
                        only_rules,
                        say,
                        now,
                        memory_limit,
                        with_series,
                        stage,
                        rule_timeout,
                        timings,
                        exclude,
                    )
                except rowcheck.RowsUnreadable as e:
                    # checked while the staged copies are still there; each pass leaves
                    # out one file more at least, or ends here
                    bad = rowcheck.left_out(e, say)
                    if bad.keys() <= exclude.keys():
                        raise e.error from e
                    exclude.update(bad)
        except BucketChanged as e:
            # a rollup or compact replaced files while they were read: their rows are in
            # the files that replaced them, which a fresh listing finds
            attempt += 1
            if attempt == 2:
                raise BucketError(
                    f"{e}: bucket files were replaced while the analysis read them, twice; "
                    "is a `leakreport rollup` or `compact` running? Run again once it is done"
                ) from e
            say(
                f"{e}: replaced while the analysis read it (a rollup or compact); reading the bucket again"
            )
        if timings is not None:
            timings.clear()


def _analyze(
    bucket: str | Path,
    packs: list[Pack],
    scope: Scope,
    overrides: dict[str, dict[str, Any]],
    only_rules: set[str] | None,
    say: Progress,
    now: dt.datetime | None,
    memory_limit: str | None,
    with_series: bool,
    stage: str | None,
    rule_timeout: float | None,
    timings: list[dict[str, Any]] | None = None,
    exclude: dict[str, str] | None = None,
) -> FindingsDocument:
    times: list[dict[str, Any]] = timings if timings is not None else []
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now_t = time.perf_counter()
        times.append({"stage": stage, "seconds": round(now_t - clock, 4)})
        clock = now_t

    opened = open_checked(
        bucket, scope, memory_limit=memory_limit, stage_dir=stage, now=now, exclude=exclude
    )
    lap("open")
    con, files = opened.con, opened.counts
    if opened.duckdb_memory:
        say(
            f"memory: DuckDB may use {memory.mib(opened.duckdb_memory)} of --memory-limit "
            f"{memory_limit} (the rest is this process's own); past that it spills to disk"
        )
    for line in opened.skipped:
        say(f"left out: {line}")
    for line in opened.notes:
        say(line)
    try:
        t0 = time.perf_counter()
        with rowcheck.checked(opened):  # the first statements to read every raw file's rows
            n_events = logevents.build(con)
            lap("log_events")
            # the bucket width follows the samples' span (a host batch gets its scope's)
            overrides = rollup.with_width(overrides, opened.span_s, opened.interval_s)
            rollup.build(con, overrides.get("rollup"), tier=opened.tier, timings=times)
        clock = time.perf_counter()
        if opened.tier is not None:
            say(
                f"rollup tier: {opened.tier.host_days} host-days stored, "
                f"{opened.tier.raw_host_days} derived from raw samples"
            )
        rules_con = con.cursor()  # rules run on their own cursor, interruptible from here
        rules_con.execute("SET TimeZone = 'UTC'")
        lock_down(con, opened.readable_dirs)
        say(f"rollups built in {time.perf_counter() - t0:.2f}s ({n_events} log events)")
        doc = FindingsDocument(
            run=RunInfo(
                bucket=str(bucket),
                since=scope.since.isoformat() if scope.since else None,
                until=scope.until.isoformat() if scope.until else None,
                hosts=list(scope.hosts),
                generated_at=iso_utc(now or dt.datetime.now(dt.UTC)) or "",
                analyzer_version=__version__,
                packs=[PackInfo(p.name, p.version, str(p.path)) for p in packs],
                tables=files,
            )
        )
        statuses: list[RuleStatus] = []
        data_hosts: set[str] | None = None
        n_rules = sum(
            len(p.errors) + sum(only_rules is None or r.id in only_rules for r in p.rules)
            for p in packs
        )
        for pack in packs:
            for err in pack.errors:
                statuses.append(RuleStatus(err.rule_id, "", pack.name, "errored", str(err)))
            for rule in pack.rules:
                if only_rules is not None and rule.id not in only_rules:
                    continue
                st = RuleStatus(rule.id, rule.name, pack.name, "clean")
                statuses.append(st)
                if not rule.enabled:
                    st.status, st.reason = "skipped", "disabled in its metadata"
                    continue
                absent = [t for t in rule.requires if not any(files.get(x) for x in t.split("|"))]
                if absent:
                    st.status, st.reason = "skipped", f"no data in table(s) {', '.join(absent)}"
                    continue
                t1 = time.perf_counter()
                try:
                    found, repeated = run_rule(
                        rules_con, rule, overrides.get(rule.id), rule_timeout
                    )
                    if repeated:
                        st.reason = repeated_rows(repeated)
                    if found and data_hosts is None:  # a finding names a host with data
                        data_hosts = coverage.hosts_with_data(con, opened.hosts)
                    ghosts = sorted({f.host for f in found} - (data_hosts or set()))
                    if ghosts:
                        raise RuleOutputError(
                            f"a row names host {ghosts[0]!r}, which has no data in scope"
                        )
                except (duckdb.Error, RuleOutputError, ValueError, TypeError) as e:
                    if gone := vanished(e):
                        raise BucketChanged(gone) from e
                    st.status, st.reason = "errored", rule.located(e)
                    found = []
                st.duration_s = round(time.perf_counter() - t1, 4)
                times.append({"stage": f"rule:{rule.id}", "seconds": st.duration_s})
                if found:
                    st.status, st.findings = "fired", len(found)
                doc.findings.extend(found)
                progress_step(
                    say,
                    len(statuses),
                    n_rules,
                    "rules",
                    f"{rule.id} {st.status}, {plural(len(found), 'finding')}, {st.duration_s:.2f}s",
                )
        doc.run.rules = statuses
        clock = time.perf_counter()
        # per host: what could and could not be checked
        coverage.build(con, doc, packs, opened.hosts)
        doc.findings.sort(key=Finding.sort_key)
        pods.annotate(con, doc.findings)  # the Kubernetes pod on the GPU, where known
        lap("coverage")
        if with_series:
            with rowcheck.checked(opened):  # the first to read allocator_snapshots
                series.fill(con, doc)
            lap("series")
        doc.run.incomplete += [f"{LEFT_OUT}{line}" for line in opened.skipped]
        doc.run.incomplete += opened.unread
        doc.run.gaps += opened.quarantined
        return doc
    except (duckdb.Error, RuntimeError) as e:  # the rollups name their file in a RuntimeError
        if gone := vanished(e):
            raise BucketChanged(gone) from e
        raise
    finally:
        with contextlib.suppress(duckdb.Error):  # busy only when a Ctrl-C is on its way out
            con.close()
