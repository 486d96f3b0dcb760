"""``leakcollect import prometheus``: dcgm-exporter and engine series from a Prometheus
server into the bucket's own tables (``gpu_samples``, ``metric_samples``,
``collector_runs``), so every rule, report and fleet view works unchanged.

It lists the series in the window first (``/api/v1/series``), then fetches host batch
by host batch, in time chunks of at most ``--points`` points per query (and never more
than 11,000 per series), writing each chunk before the next is fetched: memory stays
bounded however long the window or large the fleet. A query that hits the server's
sample limit is split in time; what still fails is skipped and named, per metric.

Each step is read as ``last_over_time(metric[lookback])``: a series that ended (a pod
that restarted) stops within ``--lookback`` instead of Prometheus' 5-minute staleness,
and where an old and a new series of one GPU overlap, the newer one wins. Where the
series carry a replica label (an HA pair), the replicas are read as one series:
``max without (<replica labels>)`` per step. The next chunk's queries run while one
is decoded and written (``concurrency`` requests in flight, two chunks in memory).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from collector import promruns
from collector.promapi import MAX_POINTS_PER_SERIES, PromClient, PromError
from collector.promdecode import Matrix
from collector.promgrid import GpuGrid, engine_table
from collector.promplan import Mapping, Plan, Series, make_plan

SOURCE = "prometheus"
REPLICA_LABELS = ("replica", "prometheus_replica", "__replica__")
MIN_SPLIT_STEPS = 30  # a failing piece is halved in time down to this, then given up
Say = Callable[[str], None]


@dataclass
class Options:
    start: float  # epoch seconds
    end: float
    step: float = 15.0
    match: str = ""  # extra matchers, '{cluster="a"}'
    hosts: set[str] | None = None
    lookback: float | None = None
    max_series: int = 256  # series per host batch
    points: int = 400_000  # points per query
    concurrency: int = 4  # requests in flight
    # HA pairs: labels that tell replicas of one series apart, dropped (one sample a step)
    replica_labels: tuple[str, ...] = REPLICA_LABELS

    @property
    def window(self) -> float:
        return self.lookback or max(4 * self.step, 60.0)


@dataclass
class Stats:
    hosts: int = 0
    samples: int = 0  # points read from Prometheus
    rows: dict[str, int] = field(default_factory=dict)
    per_host: dict[str, int] = field(default_factory=dict)
    files: int = 0
    # (metric, host label, values) -> the windows given up at the server's sample limit
    gaps: dict[tuple[str, str, tuple[str, ...]], list[tuple[float, float]]] = field(
        default_factory=dict
    )

    @property
    def skipped(self) -> list[str]:
        out = []
        for (metric, by, values), spans in sorted(self.gaps.items()):
            hours = sum(b - a for a, b in spans) / 3600
            shown = ", ".join(values[:3]) + (", ..." if len(values) > 3 else "")
            out.append(
                f"{metric} for {len(values)} {by} value(s) ({shown}): {len(spans)} piece(s), "
                f"{hours:.2f} h between {_iso(spans[0][0])} and {_iso(spans[-1][1])}: over the "
                "server's sample limit (lower --points or --max-series, or raise "
                "--query.max-samples on the server)"
            )
        return out

    seconds: float = 0.0

    def add(self, host: str, table: str, n: int) -> None:
        self.rows[table] = self.rows.get(table, 0) + n
        self.per_host[host] = self.per_host.get(host, 0) + n


def _matchers(match: str) -> str:
    m = match.strip()
    if not m:
        return ""
    if not (m.startswith("{") and m.endswith("}")):
        raise ValueError(
            f"--match {match!r}: expected label matchers in braces, e.g. '{{job=\"dcgm\"}}'"
        )
    return m[1:-1].strip().rstrip(",")


def _selector(metric: str, extra: str, by: str, values: list[str]) -> str:
    alt = "|".join(re.escape(v) for v in sorted(values))
    alt = alt.replace("\\", "\\\\").replace('"', '\\"')
    inner = ", ".join(x for x in (extra, f'{by}=~"{alt}"') if x)
    return f"{metric}{{{inner}}}"


def discover(client: PromClient, mapping: Mapping, opts: Options) -> Plan:
    extra = _matchers(opts.match)
    sel = [f"{m}{{{extra}}}" if extra else m for m in mapping.gpu]
    gpu_sets = client.series(sel, opts.start, opts.end)
    esel = [f"{m}{{{extra}}}" if extra else m for m in mapping.engine]
    engine_sets = client.series(esel, opts.start, opts.end) if esel else []
    # an HA pair's replicas of one series become one series; only the replica labels
    # that occur are aggregated away (the aggregation costs the server several times
    # the query itself)
    drop = {k for s in (*gpu_sets, *engine_sets) for k in s if k in opts.replica_labels}
    opts.replica_labels = tuple(k for k in opts.replica_labels if k in drop)
    if drop:
        gpu_sets = [{k: v for k, v in s.items() if k not in drop} for s in gpu_sets]
        engine_sets = [{k: v for k, v in s.items() if k not in drop} for s in engine_sets]
    return make_plan(gpu_sets, engine_sets, mapping, opts.hosts)


@dataclass
class _Chunk:
    b: int  # batch number, from 1
    batch: list[str]  # its hosts
    by_key: dict[tuple[str, tuple[tuple[str, str], ...]], Series]
    groups: dict[tuple[str, str], list[str]]
    t0: float
    t1: float


class _Fetcher:
    def __init__(self, client: PromClient, opts: Options, stats: Stats, say: Say) -> None:
        self.client, self.opts, self.stats, self.say = client, opts, stats, say

    def fetch(self, metric: str, by: str, values: list[str], t0: float, t1: float) -> Matrix:
        """Points of ``metric`` for these host values on the step grid [t0, t1]."""
        sel = _selector(metric, _matchers(self.opts.match), by, values)
        q = f"last_over_time({sel}[{int(math.ceil(self.opts.window))}s])"
        if self.opts.replica_labels:  # the replicas of a series: one value a step
            q = f"max without ({', '.join(self.opts.replica_labels)}) ({q})"
        try:
            return self.client.query_range(q, t0, t1, self.opts.step)
        except PromError as e:
            if e.kind != "too_many_samples":
                raise
        steps = int(round((t1 - t0) / self.opts.step))
        if steps >= 2 * MIN_SPLIT_STEPS:
            mid = t0 + (steps // 2) * self.opts.step
            return Matrix.concat(
                [
                    self.fetch(metric, by, values, t0, mid),
                    self.fetch(metric, by, values, mid + self.opts.step, t1),
                ]
            )
        self.stats.gaps.setdefault((metric, by, tuple(values)), []).append((t0, t1))
        return Matrix()


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat().replace("+00:00", "Z")


def _groups(series: list[Series]) -> dict[tuple[str, str], list[str]]:
    """(metric, host label) -> the label values to select."""
    out: dict[tuple[str, str], set[str]] = {}
    for s in series:
        out.setdefault((s.metric, s.by), set()).add(s.value)
    return {k: sorted(v) for k, v in out.items()}


def _gpu_columns() -> set[str]:
    from collector.schema import GPU_SAMPLES

    return set(GPU_SAMPLES.columns)


def run_import(
    client: PromClient,
    mapping: Mapping,
    opts: Options,
    bucket: str,
    say: Say = lambda m: print(m, file=sys.stderr),
) -> Stats:
    """Fetch and write; raises PromError when nothing could be read at all."""
    from collector.writer import BucketWriter

    t_begin = time.perf_counter()
    stats = Stats()
    step = opts.step
    opts.start = math.ceil(opts.start / step) * step  # the first step at or after --start
    plan = discover(client, mapping, opts)
    for why in plan.dropped:
        say(f"left out: {why}")
    if not plan.series:
        checked = ", ".join([*mapping.gpu, *mapping.engine][:6])
        scope = f" for host(s) {', '.join(sorted(opts.hosts))}" if opts.hosts else ""
        raise PromError(
            "empty",
            f"{client.url}: no series{scope} of the mapped metrics ({checked}, ...) "
            f"{'matching ' + opts.match + ' ' if opts.match else ''}"
            f"between {_iso(opts.start)} and {_iso(opts.end)}",
        )
    hosts = plan.hosts()
    source = f"{SOURCE}:{client.url}"
    clash = promruns.overlapping(bucket, source, set(hosts), opts.start, opts.end)
    after = opts.start + step  # the window after the last import starts where it ended
    if (
        clash
        and after <= opts.end
        and not promruns.overlapping(bucket, source, set(hosts), after, opts.end)
    ):
        say(f"starting at {_iso(after)}: {_iso(opts.start)} is the last step of an earlier import")
        opts.start, clash = after, None
    if clash:
        raise PromError("overlap", clash)
    stats.hosts = len(hosts)
    born: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    fetcher = _Fetcher(client, opts, stats, say)
    columns = _gpu_columns()  # the workload columns only where the schema has them
    batches = plan.batches(opts.max_series)
    say(f"{len(plan.series)} series on {len(hosts)} hosts in {len(batches)} batches")

    def chunks() -> Iterator[_Chunk]:
        for b, batch in enumerate(batches, 1):
            members = set(batch)
            series = [s for s in plan.series if s.host in members]
            by_key = {(s.metric, s.labels): s for s in series}
            groups = _groups(series)
            # every series of the batch in one chunk stays within --points, all metrics together
            steps = max(1, min(MAX_POINTS_PER_SERIES, opts.points // max(len(series), 1)))
            t0 = opts.start
            while t0 <= opts.end:
                t1 = min(opts.end, t0 + (steps - 1) * step)
                yield _Chunk(b, batch, by_key, groups, t0, t1)
                t0 = t1 + step

    def store(c: _Chunk, fetched: dict[tuple[str, str], Future[Matrix]]) -> None:
        grid = GpuGrid(c.t0, int(round((c.t1 - c.t0) / step)) + 1, step)
        etables: list[pa.Table] = []
        for (metric, _by), fut in fetched.items():
            m = fut.result()
            owners: list[str | None] = []
            part = grid.part(m) if metric in mapping.gpu else None
            for labels, first, count in zip(m.labels, m.starts(), m.counts, strict=True):
                key = tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))
                s = c.by_key.get((metric, key)) if count else None
                owners.append(s.host if s is not None else None)
                if s is not None:
                    stats.samples += count
                    born.setdefault((metric, key), m.t[first].as_py())
                if part is not None:
                    column, scale = mapping.gpu[metric]
                    g = plan.gpu.get(key) if s is not None else None
                    grid.keep(part, owners[-1], g, column, scale, born.get((metric, key), 0.0))
            if part is None and m.points:
                for lab in m.labels:  # some versions keep __name__ in *_over_time
                    lab["__name__"] = metric
                etables.append(engine_table(m, owners, source))
        tables = grid.tables()
        for host in c.batch:
            w = BucketWriter(bucket, host)
            gt = tables.get(host)
            if gt is not None and gt.num_rows:
                gt = gt.select([x for x in gt.column_names if x in columns])
                stats.files += len(w.write("gpu_samples", gt))
                stats.add(host, "gpu_samples", gt.num_rows)
            mine = [e.filter(pc.equal(e["host"], host)) for e in etables]
            mine = [x.drop_columns(["host"]) for x in mine if x.num_rows]
            if mine:
                mt = pa.concat_tables(mine)
                stats.files += len(w.write("metric_samples", mt))
                stats.add(host, "metric_samples", mt.num_rows)
        say(
            f"[batch {c.b}/{len(batches)}] {_iso(c.t0)[:16]} .. {_iso(c.t1)[:16]}: "
            f"{stats.samples:,} samples read, {time.perf_counter() - t_begin:.0f}s"
        )

    # the next chunk's queries run (on the server, and decoding here) while this one is
    # stored: at most --concurrency requests in flight, two chunks in memory
    with ThreadPoolExecutor(max_workers=opts.concurrency) as pool:
        pending: deque[tuple[_Chunk, dict[tuple[str, str], Future[Matrix]]]] = deque()
        try:
            for c in chunks():
                fut = {
                    g: pool.submit(fetcher.fetch, g[0], g[1], v, c.t0, c.t1)
                    for g, v in c.groups.items()
                }
                pending.append((c, fut))
                if len(pending) > 1:
                    store(*pending.popleft())
            while pending:
                store(*pending.popleft())
        finally:
            for _c, fut in pending:
                for f in fut.values():
                    f.cancel()
    now = dt.datetime.now(dt.UTC)
    owner = {(x.metric, x.by, x.value): x.host for x in plan.series}
    lost: dict[str, list[str]] = {}
    for (metric, by, vals), line in zip(sorted(stats.gaps), stats.skipped, strict=True):
        for h in {owner.get((metric, by, v)) for v in vals}:
            lost.setdefault(str(h), []).append(line)
    for host in hosts:
        BucketWriter(bucket, host).write(
            "collector_runs",
            [
                {
                    "ts": dt.datetime.fromtimestamp(opts.start, dt.UTC),
                    "run_id": promruns.run_id(opts.start, opts.end, now),
                    "source": source,
                    "status": "failed" if host in lost else "ok",
                    "rows": stats.per_host.get(host, 0),
                    "error": "; ".join(lost.get(host, []))[:2000] or None,
                    "duration_s": time.perf_counter() - t_begin,
                    "finished": now,
                }
            ],
        )
    stats.seconds = time.perf_counter() - t_begin
    return stats
