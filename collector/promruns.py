"""Earlier imports from the same Prometheus, as the bucket's collector_runs rows record them.

Every import writes one ``collector_runs`` row per host whose ``run_id`` names the
window it fetched. Importing an overlapping window again would store those samples
twice (and double every sum over them), so the import refuses, naming the earlier one.
The check lists only the ``collector_runs`` files of the imported hosts dated up to the
window's end (one listing on S3), then reads those.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds

from collector import layout
from collector.store import is_s3, s3_filesystem, s3_root

PREFIX = "prometheus"


def run_id(start: float, end: float, now: dt.datetime) -> str:
    return f"{PREFIX} {_iso(start)} {_iso(end)} {now:%Y%m%dT%H%M%SZ}"


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat().replace("+00:00", "Z")


def overlapping(
    bucket: str | os.PathLike[str], source: str, hosts: set[str], start: float, end: float
) -> str | None:
    """A line naming an earlier import of these hosts from ``source`` that overlaps
    [start, end]; None when there is none. ``bucket`` is a folder or ``s3://...``."""
    last_day = dt.datetime.fromtimestamp(end, dt.UTC).date()
    fs: Any = None
    root = str(bucket)
    if is_s3(bucket):
        fs, root = s3_filesystem(), s3_root(root)
    entries = layout.list_entries(
        root,
        "collector_runs",
        fs,
        date_ok=lambda d: d <= last_day,
        host_ok=layout.host_folders(hosts).__contains__,
    )
    if not entries:
        return None
    data = ds.dataset(
        [e.path for e in entries], filesystem=fs, format="parquet", exclude_invalid_files=True
    )
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
