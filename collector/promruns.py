"""Earlier imports from the same Prometheus, as the bucket's collector_runs rows record them.

Every import writes one ``collector_runs`` row per host whose ``run_id`` names the
window it fetched. Importing an overlapping window again would store those samples
twice (and double every sum over them), so the import refuses, naming the earlier one.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds

PREFIX = "prometheus"


def run_id(start: float, end: float, now: dt.datetime) -> str:
    return f"{PREFIX} {_iso(start)} {_iso(end)} {now:%Y%m%dT%H%M%SZ}"


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat().replace("+00:00", "Z")


def overlapping(
    bucket: str | os.PathLike[str], source: str, hosts: set[str], start: float, end: float
) -> str | None:
    """A line naming an earlier import of these hosts from ``source`` that overlaps
    [start, end]; None when there is none (or the bucket is not a local folder)."""
    folder = Path(bucket) / "collector_runs"
    if str(bucket).startswith("s3://") or not folder.is_dir():
        return None
    data = ds.dataset(folder, format="parquet", partitioning=None, exclude_invalid_files=True)
    rows = data.to_table(
        columns=["host", "run_id"], filter=pc.field("source") == source
    ).to_pylist()
    for r in rows:
        parts = str(r["run_id"]).split()
        if len(parts) != 4 or parts[0] != PREFIX or r["host"] not in hosts:
            continue
        t0 = dt.datetime.fromisoformat(parts[1].replace("Z", "+00:00")).timestamp()
        t1 = dt.datetime.fromisoformat(parts[2].replace("Z", "+00:00")).timestamp()
        if t0 <= end and start <= t1:
            return (
                f"{bucket} already holds {parts[1]} .. {parts[2]} of host {r['host']} from "
                f"{source.partition(':')[2]} (imported {parts[3]}): importing it again would "
                f"count those samples twice; start after {parts[2]} or use another bucket"
            )
    return None
