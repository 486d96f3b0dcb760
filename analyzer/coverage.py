"""What an analysis could and could not check, per host, and why.

A host that sent only device samples and a server log gets no process-level
verdicts; silence there must not read as "healthy". For every host this lists
the inputs found, the rules that could not look at it (with the input they
lacked and how to collect it, from the rule's ``missing_hint``), and where its
process lifetimes came from (process table, server log, memory resets).
"""

from __future__ import annotations

from typing import Any

import duckdb

from analyzer.findings import FindingsDocument
from analyzer.packs import Pack
from collector.schema import TABLES

# What each input adds, in words, for the "could not check" block.
INPUTS: dict[str, str] = {
    "gpu_samples": "device memory samples (nvidia-smi or NVML)",
    "gpu_processes": "per-process GPU memory",
    "processes": "the server's process table (engine, version, flags)",
    "proc_maps": "/proc/PID/maps summaries",
    "metric_samples": "the server's /metrics",
    "log_lines": "the server log",
    "allocator_samples": "the allocator probe",
    "http_probes": "the latency probe",
}


def _hosts_with(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    try:
        return {r[0] for r in con.execute(f"SELECT DISTINCT host FROM {table}").fetchall()}
    except duckdb.Error:
        return set()


def build(
    con: duckdb.DuckDBPyConnection,
    doc: FindingsDocument,
    packs: list[Pack],
    known: dict[str, set[str]] | None = None,
) -> None:
    """Fill ``doc.coverage`` and each skipped rule's ``hint``. ``known``: table -> the
    hosts it has rows of, where the files' footers already tell (no scan of those)."""
    rules = {r.id: r for p in packs for r in p.rules}
    for st in doc.run.rules:
        rule = rules.get(st.rule_id)
        if st.status == "skipped" and rule is not None and rule.missing_hint:
            st.hint = rule.missing_hint
    known = known or {}
    present = {t: known[t] if t in known else _hosts_with(con, t) for t in TABLES if t in INPUTS}
    try:
        sources = con.execute(
            "SELECT host, list(DISTINCT lifetime_source ORDER BY lifetime_source) FROM gpu_lifetimes "
            "GROUP BY host"
        ).fetchall()
    except duckdb.Error:
        sources = []
    lifetimes = {h: list(s) for h, s in sources}
    hosts = sorted(set().union(*present.values()) | {h.host for h in doc.hosts})
    ran = {st.rule_id for st in doc.run.rules if st.status in ("fired", "clean")}
    out: list[dict[str, Any]] = []
    for host in hosts:
        have = sorted(t for t, hs in present.items() if host in hs)
        missing: list[dict[str, Any]] = []
        for rule in rules.values():
            if rule.id not in ran and not any(s.rule_id == rule.id for s in doc.run.rules):
                continue  # not part of this run (--rule filter)
            lacking = [g for g in rule.requires if not any(t in have for t in g.split("|"))]
            if lacking:
                missing.append(
                    {
                        "rule_id": rule.id,
                        "title": rule.title,
                        "lacked": [
                            " or ".join(INPUTS.get(t, t) for t in g.split("|")) for g in lacking
                        ],
                        "hint": rule.missing_hint or None,
                    }
                )
        checked = sorted(
            r.id
            for r in rules.values()
            if r.id in ran and r.id not in {m["rule_id"] for m in missing}
        )
        out.append(
            {
                "host": host,
                "inputs": have,
                "absent_inputs": sorted(t for t in INPUTS if t not in have),
                "checked": checked,
                "not_checked": missing,
                "lifetime_source": lifetimes.get(host, []),
                "complete": not missing,
            }
        )
    doc.coverage = out
