"""Name the Kubernetes workload behind a finding.

Where the device samples carry the pod on the GPU (``gpu_samples.namespace/pod``,
from dcgm-exporter through ``leakcollect import prometheus``), each finding gets
``evidence["pods"]``: the ``namespace/pod`` names on its GPU (on its host, for a
host-level finding) during the finding's time span, in order of appearance.
"""

from __future__ import annotations

import datetime as dt

import duckdb

from analyzer.findings import Finding


def _when(v: str | None) -> dt.datetime | None:
    if not v:
        return None
    try:
        t = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def annotate(con: duckdb.DuckDBPyConnection, findings: list[Finding]) -> int:
    """Add ``pods`` to the evidence of findings on GPUs with known pods; returns how many."""
    if not findings:
        return 0
    rows = con.execute(
        """SELECT host, gpu_index, namespace, pod, min(ts) AS t0, max(ts) AS t1
           FROM gpu_pod_samples WHERE pod IS NOT NULL
           GROUP BY ALL ORDER BY host, gpu_index, t0, t1, namespace, pod"""
    ).fetchall()
    if not rows:
        return 0
    lives: dict[str, list[tuple[int, str, dt.datetime, dt.datetime]]] = {}
    for host, gpu, ns, pod, t0, t1 in rows:
        lives.setdefault(host, []).append((int(gpu), f"{ns}/{pod}" if ns else pod, t0, t1))
    named = 0
    for f in findings:
        start, end = _when(f.start), _when(f.end)
        pods: list[str] = []
        for gpu, name, t0, t1 in lives.get(f.host, []):
            if f.gpu is not None and gpu != f.gpu:
                continue
            if end is not None and (t0 > end or (t0 == end and start != end)):
                continue  # a pod that starts as the finding's span ends (its successor)
            if start is not None and t1 < start:
                continue
            if name not in pods:
                pods.append(name)
        if pods:
            f.evidence["pods"] = pods
            named += 1
    return named
