"""Host batches of a local analysis (``--batch-hosts``), weighed by what each host brings.

A batch is one DuckDB connection: memory is bounded by the batch, not the fleet, and each
batch pays the fixed cost of an analysis (opening the bucket, some 50 statements, the chart
series). A host whose samples are derived from raw samples weighs 1; a host-day read from
the stored rollup tier weighs :data:`TIER_WEIGHT` of one read raw, so a host with its
finished days stored weighs a fraction of a host, and a fleet with a tier needs fewer
batches. On the 125-host fleet week at ``--memory-limit 1GB`` (``make bench``): each host-day
read raw added about 2.3 MiB to the peak RSS of a batch and each stored one about 0.21 MiB;
the full pack over a full tier took 3.7 s in four batches of 32 and 1.6 s in one (0.50 GiB
peak); over the tier of six days and the seventh raw, 5.5 s against 3.7 s in one (0.75 GiB).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from collector import layout

TIER_WEIGHT = 1 / 8  # a stored host-day against one derived from raw samples
Weights = dict[str, float]  # host -> its weight in a batch


def host_weights(bucket: str, scope: Any) -> Weights:
    """Each host's weight: the share of its host-days (with device samples, in ``scope``)
    derived from raw samples, plus :data:`TIER_WEIGHT` of the share read from a current
    rollup tier; 1 for a host with no tier (and where the tier cannot be read)."""
    from analyzer import tier, tierindex
    from collector.store import is_s3, root_of, s3_filesystem

    fs = s3_filesystem() if is_s3(bucket) else None
    root = root_of(bucket, fs)
    days: dict[str, set[dt.date]] = {}
    for e in layout.list_entries(root, "gpu_samples", fs, scope.date_ok, scope.host_ok):
        days.setdefault(e.host, set()).add(e.day)
    try:
        index = tierindex.stored(root, fs)
        current = tier.current_tier(
            root, fs, scope.date_ok, scope.host_ok, tier._width(None), index
        )
    except (OSError, RuntimeError):
        return {h: 1.0 for h in days}
    stored: dict[str, int] = {}
    for (day, host_dir), tables in current.items():
        host = layout.decode_host(host_dir)
        if "tier_gpu_buckets" in tables and day in days.get(host, ()):
            stored[host] = stored.get(host, 0) + 1
    return {h: 1.0 - (1.0 - TIER_WEIGHT) * stored.get(h, 0) / len(ds) for h, ds in days.items()}


def split(hosts: list[str], weights: Weights, batch_hosts: int) -> list[list[str]]:
    """``hosts`` in order, cut into batches of at most ``batch_hosts`` in weight (a host
    with no weight weighs 1; every batch holds at least one host)."""
    out: list[list[str]] = []
    load = 0.0
    for h in hosts:
        w = weights.get(h, 1.0)
        if out and load + w <= batch_hosts + 1e-9:
            out[-1].append(h)
            load += w
        else:
            out.append([h])
            load = w
    return out
