"""Run rule packs over a bucket and produce the findings document."""

from __future__ import annotations

import contextlib
import datetime as dt
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from analyzer import (
    __version__,
    clockcheck,
    coverage,
    logevents,
    memory,
    pods,
    rollup,
    rowcheck,
    sampling,
    series,
)
from analyzer.bucket import BucketChanged, BucketError, Scope, lock_down, open_checked, vanished
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
from analyzer.packs import Pack
from analyzer.progress import plural
from analyzer.progress import step as progress_step
from analyzer.ruleexec import (
    DEFAULT_RULE_TIMEOUT_S,
    RuleOutputError,
    run_rule,
)
from collector.store import is_s3

Progress = Callable[[str], None]


READS = 5  # tries at reading a bucket whose files a compact or rollup keeps replacing


class BucketKeptChanging(BucketError):
    """Files were replaced under every read (exit 3: not checked, not a usage error)."""


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
            if attempt == READS:
                raise BucketKeptChanging(
                    f"{e}: bucket files were replaced while the analysis read them, "
                    f"{READS} times; is a `leakreport rollup` or `compact` running? Run again "
                    "once it is done"
                ) from e
            wait = 2.0 ** (attempt - 1)
            say(
                f"{e}: replaced while the analysis read it (a rollup or compact); reading the "
                f"bucket again in {wait:g} s"
            )
            time.sleep(wait)
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
        bucket,
        scope,
        memory_limit=memory_limit,
        stage_dir=stage,
        now=now,
        exclude=exclude,
        progress=say,
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
            rollup.build(
                con, overrides.get("rollup"), opened.tier, times, interval_s=opened.interval_s
            )
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
        # hosts sampled too sparsely for their buckets first: coverage does not name them again
        doc.run.incomplete += sampling.unserved(con, opened.intervals)
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
        doc.run.incomplete += clockcheck.log_clock_offsets(con)
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
