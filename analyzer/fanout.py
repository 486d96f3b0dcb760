"""Fan the same SQL out per host through any ``concurrent.futures.Executor``.

Each task opens its own DuckDB connection (connections can't be pickled),
analyses one host group, and returns its findings document as plain data; the
parts are merged into one document identical in findings and order to a
single-connection run. Dask distributed is the scale-out executor
(``client.get_executor()``); any Executor works.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from analyzer import __version__
from analyzer.bucket import BucketChanged, BucketError, Scope
from analyzer.daskpool import NoWorkers, wait_result
from analyzer.findings import Finding, FindingsDocument, RuleStatus
from analyzer.packs import Pack
from analyzer.progress import plural
from analyzer.series import date_stale_forecasts, stale_hosts
from collector.store import is_s3

_STATUS_RANK = {"skipped": 0, "clean": 1, "fired": 2, "errored": 3}


def list_hosts(bucket: str | Path, scope: Scope) -> list[str]:
    """Real host names with a file in scope (from the folder names; no file is opened)."""
    from collector import layout
    from collector.schema import TABLES
    from collector.store import is_s3, s3_filesystem, s3_root

    if is_s3(bucket):
        from analyzer.bucket import BucketError

        fs = s3_filesystem()
        try:
            return layout.hosts_in(
                s3_root(str(bucket)), TABLES, fs, scope.date_filter, scope.host_filter
            )
        except OSError as e:  # pyarrow's S3 errors are OSErrors
            raise BucketError(f"{bucket}: cannot open the S3 bucket: {e}") from e
    return layout.hosts_in(str(bucket), TABLES, None, scope.date_filter, scope.host_filter)


def _task(
    bucket: str,
    packs: list[Pack],
    scope: Scope,
    overrides: dict[str, dict[str, Any]],
    now: dt.datetime | None,
    memory_limit: str | None,
    rule_timeout: float | None = 60.0,
) -> dict[str, Any]:
    """One host group's document, and what its analysis said (less the per-rule steps),
    for the caller to pass on: a Dask worker's progress has nowhere else to go."""
    from analyzer.runner import analyze

    said = _Said()
    doc = analyze(
        bucket,
        packs,
        scope=scope,
        overrides=overrides,
        progress=said,
        now=now,
        memory_limit=memory_limit,
        rule_timeout=rule_timeout,
    )
    return {"doc": doc.to_dict(), "said": said.lines}


class _Said:
    """A progress callable that keeps the lines and drops the steps (analyzer.progress)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def step(self, done: int, total: int, unit: str, detail: str = "") -> None:
        pass


def _merge_status(parts: list[RuleStatus]) -> RuleStatus:
    first = parts[0]
    active = [p for p in parts if p.status != "skipped"]
    if not active:
        return RuleStatus(
            first.rule_id, first.name, first.pack, "skipped", first.reason, 0.0, 0, first.hint
        )
    worst = max(active, key=lambda p: _STATUS_RANK[p.status])
    reasons = sorted({p.reason for p in active if p.reason and p.status == worst.status})
    return RuleStatus(
        first.rule_id,
        first.name,
        first.pack,
        worst.status,
        "; ".join(reasons) or None,
        round(sum(p.duration_s for p in parts), 4),
        sum(p.findings for p in parts),
    )


def merge(docs: list[FindingsDocument], bucket: str, scope: Scope) -> FindingsDocument:
    if not docs:
        raise ValueError("nothing to merge: the bucket has no hosts in scope")
    base = docs[0]
    run = base.run
    run.bucket = bucket
    run.hosts = list(scope.hosts)
    order: list[tuple[str, str]] = [(r.pack, r.rule_id) for r in run.rules]
    by_rule: dict[tuple[str, str], list[RuleStatus]] = {}
    for d in docs:
        for r in d.run.rules:
            by_rule.setdefault((r.pack, r.rule_id), []).append(r)
    run.rules = [_merge_status(by_rule[k]) for k in order]
    run.tables = {t: sum(d.run.tables.get(t, 0) for d in docs) for t in run.tables}
    starts = [d.run.data_start for d in docs if d.run.data_start]
    ends = [d.run.data_end for d in docs if d.run.data_end]
    run.data_start, run.data_end = (min(starts) if starts else None), (max(ends) if ends else None)
    out = FindingsDocument(run=run)
    out.findings = sorted((f for d in docs for f in d.findings), key=Finding.sort_key)
    out.hosts = sorted((h for d in docs for h in d.hosts), key=lambda h: h.host)
    out.kv = sorted((k for d in docs for k in d.kv), key=lambda k: k.host)
    out.alloc = sorted((a for d in docs for a in d.alloc), key=lambda a: (a.host, a.pid, a.device))
    out.series = sorted((s for d in docs for s in d.series), key=lambda s: (s.host, s.gpu))
    out.events = [
        e for d in sorted(docs, key=lambda d: d.hosts[0].host if d.hosts else "") for e in d.events
    ]
    out.events.sort(key=lambda e: e.host)  # stable: keeps each host's time order
    # per-host parts cannot see that a host stopped before the others: decide that on the whole
    failures = [
        g
        for d in sorted(docs, key=lambda d: d.hosts[0].host if d.hosts else "")
        for g in d.run.gaps
        if g not in set(stale_hosts(d))  # a batch's own view of who stopped: decided below
    ]
    out.run.gaps = stale_hosts(out) + sorted(failures, key=lambda g: g.split(": ", 1)[0])
    date_stale_forecasts(out)
    out.run.incomplete = sorted({r for d in docs for r in d.run.incomplete})
    out.coverage = sorted((c for d in docs for c in d.coverage), key=lambda c: str(c.get("host")))
    return out


Overrides = dict[str, dict[str, Any]]


def width_classes(
    bucket: str | Path,
    scope: Scope,
    now: dt.datetime | None,
    overrides: Overrides,
    hosts: list[str],
) -> list[tuple[Overrides, list[str]]]:
    """``hosts`` by the bucket width their samples need (the scope's span, each host's own
    sampling interval), with the overrides that fix it: a host sampled every 60 s must not
    coarsen the buckets of hosts sampled every 10 s (wider buckets lose short idle
    windows), nor a host's narrow ones lose its idle windows. One class where the width is
    given (--param rollup.bucket_s) or the span unknown (each batch then decides)."""
    from analyzer.bucket import scope_sampling
    from analyzer.rollup import with_width

    span, intervals = scope_sampling(bucket, scope, now)
    by: dict[float, tuple[Overrides, list[str]]] = {}
    for h in hosts:
        over = with_width(overrides, span, intervals.get(h))
        width = float(over.get("rollup", {}).get("bucket_s") or 0.0)  # 0: each batch decides
        by.setdefault(width, (over, []))[1].append(h)
    return [by[w] for w in sorted(by)]


def analyze_fanout(
    bucket: str | Path,
    packs: list[Pack],
    executor: Executor,
    *,
    scope: Scope | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    now: dt.datetime | None = None,
    memory_limit: str | None = None,
    hosts_per_task: int = 1,
    progress: Callable[[str], None] | None = None,
    rule_timeout: float | None = 60.0,
    unit: str = "host group",
    groups: list[list[str]] | None = None,
    group_overrides: list[dict[str, dict[str, Any]]] | None = None,
) -> FindingsDocument:
    """Each task's document, merged; ``progress`` gets, per task as it ends, what its
    analysis said (prefixed "``unit`` i/n:") and a line that it is done. A task for each
    ``hosts_per_task`` hosts, or for each of ``groups`` where given."""
    scope = scope or Scope()
    hosts = list_hosts(bucket, scope)
    if not hosts:  # nothing to fan out: an empty run says so the same way a local one does
        from analyzer.runner import analyze

        return analyze(
            bucket,
            packs,
            scope=scope,
            overrides=overrides,
            now=now,
            memory_limit=memory_limit,
            rule_timeout=rule_timeout,
        )
    if groups is None or group_overrides is None:
        # a task's hosts share a bucket width, fixed from the whole scope, not each task's
        step = max(hosts_per_task, 1)
        groups, group_overrides = [], []
        for over, members in width_classes(bucket, scope, now, overrides or {}, hosts):
            for i in range(0, len(members), step):
                groups.append(members[i : i + step])
                group_overrides.append(over)
    if not is_s3(bucket):  # a worker's working folder is not the caller's
        bucket = os.path.abspath(bucket)
    now = now or dt.datetime.now(dt.UTC)  # one clock for every task: the caller's
    futures = [
        executor.submit(
            _task,
            str(bucket),
            packs,
            Scope(scope.since, scope.until, g, scope.before),
            over,
            now,
            memory_limit,
            rule_timeout,
        )
        for g, over in zip(groups, group_overrides, strict=True)
    ]
    docs, lost = [], []
    for i, f in enumerate(futures, 1):
        try:
            out = wait_result(f, getattr(executor, "alive", None))
        except (BucketError, BucketChanged):
            raise  # the bucket's: the whole analysis says so
        except NoWorkers as e:  # the rest would wait as long: all left out now
            for g in groups[i - 1 :]:
                lost.append(f"hosts {', '.join(g)}: not analysed: {e}")
            if progress:
                progress(f"{unit} {i}/{len(groups)} and the rest not analysed: {e}")
            break
        except Exception as e:  # a worker that died, a task that failed: its hosts alone
            if isinstance(executor, InlineExecutor):
                raise  # in this process: the error is the command's
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
            lost.append(
                f"hosts {', '.join(groups[i - 1])}: not analysed: their task failed ({why})"
            )
            if progress:
                progress(f"{unit} {i}/{len(groups)} failed: {why}")
            continue
        part = FindingsDocument.from_dict(out["doc"])
        lost += _unanswered(part, groups[i - 1], str(bucket))
        docs.append(part)
        if progress:
            for line in out["said"]:
                progress(f"{unit} {i}/{len(groups)}: {line}")
            progress(f"{unit} {i}/{len(groups)} done ({plural(len(groups[i - 1]), 'host')})")
    if not docs:
        raise RuntimeError(f"every task failed; the first: {lost[0]}")
    doc = merge(docs, str(bucket), scope)
    doc.run.incomplete = sorted({*doc.run.incomplete, *lost})
    return doc


def _unanswered(part: FindingsDocument, group: list[str], bucket: str) -> list[str]:
    """Reasons the run is incomplete, from one task's document: a group whose task read no
    file (a worker that sees another folder at the bucket's path: an unmounted share),
    and a worker on another version of leakreport."""
    out = []
    if not any(part.run.tables.values()):  # listed here, but not one file read there
        out = [
            f"host {h}: not analysed: its task found no file of it (does every worker see "
            f"the bucket at {bucket}?)"
            for h in group
        ]
    if part.run.analyzer_version != __version__:
        out.append(
            f"hosts {', '.join(group)}: analysed by leakreport {part.run.analyzer_version} on "
            f"a worker, this is {__version__}: findings may differ; install one version on "
            "every worker"
        )
    return out


class _Later(Future):  # type: ignore[type-arg]
    """A future whose work runs when its result is first asked for."""

    def __init__(self, work: Callable[[], Any]) -> None:
        super().__init__()
        self._work = work

    def result(self, timeout: float | None = None) -> Any:
        if not self.done():
            try:
                self.set_result(self._work())
            except BaseException as e:  # Ctrl-C too: raised again just below
                self.set_exception(e)
        return super().result(timeout)


class InlineExecutor(Executor):
    """Runs each task in this process when its result is asked for: batches one at a
    time, each reported as it ends. An error (or Ctrl-C) stops at once: the later
    batches never run."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return _Later(lambda: fn(*args, **kwargs))


def analyze_local(
    bucket: str | Path,
    packs: list[Pack],
    *,
    scope: Scope | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    progress: Callable[[str], None] | None = None,
    now: dt.datetime | None = None,
    memory_limit: str | None = None,
    batch_hosts: int = 32,
    rule_timeout: float | None = 60.0,
    timings: list[dict[str, Any]] | None = None,
) -> FindingsDocument:
    """One connection for up to ``batch_hosts`` hosts; more are analysed in batches of
    that many, one after the other, so memory is bounded by the batch, not the fleet (a
    host whose days are stored in the rollup tier counts less: :mod:`analyzer.batches`).
    ``timings`` (one batch only) gets the seconds of each stage (see runner.analyze)."""
    from analyzer import batches
    from analyzer.runner import analyze

    scope = scope or Scope()
    hosts = list_hosts(bucket, scope)
    classes = width_classes(bucket, scope, now, overrides or {}, hosts) if hosts else []
    weights = batches.host_weights(str(bucket), scope) if len(hosts) > batch_hosts else {}
    groups, group_overrides = [], []
    for over, members in classes:  # a batch's hosts share a bucket width
        for g in batches.split(members, weights, batch_hosts):
            groups.append(g)
            group_overrides.append(over)
    if len(groups) <= 1:
        return analyze(
            bucket,
            packs,
            scope=scope,
            overrides=group_overrides[0] if group_overrides else overrides,
            progress=progress,
            now=now,
            memory_limit=memory_limit,
            rule_timeout=rule_timeout,
            timings=timings,
        )
    if progress:
        sizes = sorted({len(g) for g in groups})
        size = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]}"
        whose = "1 host's" if batch_hosts == 1 else f"{batch_hosts} hosts'"
        progress(
            f"{len(hosts)} hosts: analysing them in {len(groups)} batches of {size} "
            f"{'host' if size == '1' else 'hosts'} "
            f"(--batch-hosts {batch_hosts}: a batch holds at most {whose} weeks of raw samples; "
            "a host-day stored in the rollup tier weighs an eighth of a raw one)"
        )
        if memory_limit:
            from analyzer.memory import budget_note

            progress(budget_note(memory_limit))

    return analyze_fanout(
        bucket,
        packs,
        InlineExecutor(),
        scope=scope,
        overrides=overrides,
        now=now,
        memory_limit=memory_limit,
        progress=progress,
        rule_timeout=rule_timeout,
        unit="batch",
        groups=groups,
        group_overrides=group_overrides,
    )
