"""Host batches of a local analysis (``--batch-hosts``), weighed by what each host brings.

A batch is one DuckDB connection: memory is bounded by the batch, not the fleet, and each
batch pays the fixed cost of an analysis (opening the bucket, some 50 statements, the chart
series). A host weighs 1 for up to a week of host-days derived from raw samples, and a
week's worth more for each further week; a host-day read from the stored rollup tier counts
:data:`TIER_WEIGHT` of one read raw (:func:`weight`). So a fleet whose finished days are
stored needs fewer batches, and a long span of raw samples more.

Measured with ``--memory-limit 1GB`` on 2 cores, each pair side by side: on the 125-host
fleet week, each host-day read raw added about 2.3 MiB to a batch's peak RSS and each stored
one about 0.21 MiB. Over a full tier the pack took 3.7 s in four batches of 32 and 1.6 s in
one (0.50 GiB); with six days stored and the seventh raw, 5.5 s against 3.7 s in one
(0.75 GiB). The 125-host month with 29 days stored peaked at 0.96 GiB in one batch; by
weight it is three of 42 hosts (11.6 s, 0.56 GiB; 13.1 s and 0.51 GiB in four of 32). The
25-host month with no tier took 19 s in one batch (0.91 GiB) and 14 s in four of 7 hosts,
as weighed (0.73 GiB).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from collector import layout

TIER_WEIGHT = 1 / 8  # a stored host-day against one derived from raw samples
WEEK = 7  # host-days read raw that weigh one host
Weights = dict[str, float]  # host -> its weight in a batch


def weight(raw_days: int, stored_days: int) -> float:
    """A host's weight in a batch: its host-days read raw, plus :data:`TIER_WEIGHT` of
    those read from the stored tier, over its host-days up to a week (a host of raw samples
    weighs 1 up to a week, more past it; 1 for a host with none)."""
    days = raw_days + stored_days
    return (raw_days + TIER_WEIGHT * stored_days) / min(days, WEEK) if days else 1.0


def host_weights(bucket: str, scope: Any) -> Weights:
    """Each host's :func:`weight`, from its host-days with device samples in ``scope`` and
    those of them with a current rollup tier (none where the tier cannot be read)."""
    from analyzer import tier, tiercurrent, tierindex
    from collector.store import is_s3, root_of, s3_filesystem

    fs = s3_filesystem() if is_s3(bucket) else None
    root = root_of(bucket, fs)
    days: dict[str, set[dt.date]] = {}
    for e in layout.list_entries(root, "gpu_samples", fs, scope.date_filter, scope.host_filter):
        days.setdefault(e.host, set()).add(e.day)
    stored: dict[str, int] = {}
    try:
        index = tierindex.stored(root, fs)
        current = tiercurrent.current_tier(
            root, fs, scope.date_filter, scope.host_filter, tier._width(None), index
        )
    except (OSError, RuntimeError):
        current = tiercurrent.Current()
    for (day, host_dir), tables in current.items():
        host = layout.decode_host(host_dir)
        if "tier_gpu_buckets" in tables and day in days.get(host, ()):
            stored[host] = stored.get(host, 0) + 1
    return {h: weight(len(ds) - stored.get(h, 0), stored.get(h, 0)) for h, ds in days.items()}


def split(hosts: list[str], weights: Weights, batch_hosts: int) -> list[list[str]]:
    """``hosts`` in order, cut into the fewest batches of at most ``batch_hosts`` in weight
    (a host with no weight weighs 1; a host heavier than that is a batch alone), as even in
    weight as that allows: a batch's peak memory follows its weight."""
    fewest = _fill(hosts, weights, batch_hosts)
    total = sum(weights.get(h, 1.0) for h in hosts)
    cap = min(float(batch_hosts), total / max(len(fewest), 1))
    while cap < batch_hosts:  # the least even cap that needs no more batches
        even = _fill(hosts, weights, cap)
        if len(even) <= len(fewest):
            return even
        cap = min(float(batch_hosts), cap * 1.02)
    return fewest


def _fill(hosts: list[str], weights: Weights, cap: float) -> list[list[str]]:
    """``hosts`` in order, each batch filled up to ``cap`` in weight."""
    out: list[list[str]] = []
    load = 0.0
    for h in hosts:
        w = weights.get(h, 1.0)
        if out and load + w <= cap + 1e-9:
            out[-1].append(h)
            load += w
        else:
            out.append([h])
            load = w
    return out
