"""What an analysis could and could not check, per host, and why.

A host that sent only device samples and a server log gets no process-level
verdicts; silence there must not read as "healthy". For every host this lists
the inputs found, the rules that could not look at it (with the input they
lacked and how to collect it, from the rule's ``missing_hint``), and where its
process lifetimes came from (process table, server log, memory resets).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from operator import attrgetter
from typing import Any

import duckdb

from analyzer.findings import FindingsDocument, host_reason
from analyzer.packs import Pack, Rule
from analyzer.progress import plural
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


def hosts_with_data(con: duckdb.DuckDBPyConnection, known: dict[str, set[str]]) -> set[str]:
    """Every host with rows in a trace table (``known``: where the footers tell)."""
    return set().union(*(known[t] if t in known else _hosts_with(con, t) for t in TABLES))


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
    _idle_blind(con, doc, rules.values(), ran)
    _runs_only(con, doc, set(hosts))
    _container_pids(con, doc)


def _container_pids(con: duckdb.DuckDBPyConnection, doc: FindingsDocument) -> None:
    """Hosts with allocator records whose container PIDs the collector could not turn
    into the host's: those processes match no NVML process, so what lies outside
    PyTorch's allocator (AP003) was not compared for them."""
    try:
        rows = con.execute(
            "SELECT host, count(DISTINCT (pid_ns, pid)) FROM allocator_samples "
            "WHERE pid_ns IS NOT NULL GROUP BY host ORDER BY host"
        ).fetchall()
    except duckdb.Error:
        return
    for host, n in rows:
        doc.run.incomplete.append(
            host_reason(
                host,
                f"the allocator probe's records of {plural(n, 'process', 'processes')} carry "
                "PIDs of a container "
                "that the collector could not turn into the host's (their /proc/PID/ns is "
                "another user's, or they had ended): NVML's figures are not compared with "
                "PyTorch's for them (AP003); run leakcollect as root, with the host's /proc",
            )
        )


def _runs_only(con: duckdb.DuckDBPyConnection, doc: FindingsDocument, seen: set[str]) -> None:
    """Hosts whose collector ran in scope but wrote no row of any trace (NVML broken on
    that host, say): nothing of theirs was checked; the run is incomplete, with what
    their failed sources said."""
    try:
        rows = con.execute(
            "SELECT host, max(runs), list(format('{} failed in {} of {} runs (last: {})', "
            "source, failed, runs, left(coalesce(error, ''), 200)) ORDER BY source) "
            "FILTER (WHERE failed > 0) FROM source_runs GROUP BY host ORDER BY host"
        ).fetchall()
    except duckdb.Error:
        return
    for host, runs, failed in rows:
        if host in seen:
            continue
        said = "; ".join(failed) if failed else "no source failed, and none wrote a row"
        doc.run.incomplete.append(
            host_reason(host, f"{runs} collector runs in scope wrote no samples ({said})")
        )


# where a rule reads one of these, its verdict rests on idle windows
IDLE_INPUTS = re.compile(r"\bidle_(?:trend|segments|runs|windows)\b")
IDLE_LACK = "GPU utilisation or request activity (the server log's batch lines or /metrics)"


def _idle_blind(
    con: duckdb.DuckDBPyConnection, doc: FindingsDocument, rules: Iterable[Rule], ran: set[str]
) -> None:
    """Hosts whose idle windows cannot be told: no GPU utilisation in any sample and no
    request activity, so every minute would pass for idle. The rules that judge by idle
    windows did not check them: said per host, and the run is incomplete."""
    try:  # GPUs without a utilisation reading first (gpu_info knows): usually none
        quiet = con.execute(
            "SELECT host, list(gpu_index ORDER BY gpu_index) FROM gpu_info "
            "WHERE util_samples = 0 GROUP BY host ORDER BY host"
        ).fetchall()
        busy = quiet and {
            h
            for (h,) in con.execute(
                "SELECT DISTINCT host FROM activity WHERE list_contains($1, host)",
                [[h for h, _ in quiet]],
            ).fetchall()
        }
        blind = [(h, gpus) for h, gpus in quiet if h not in (busy or set())]
    except duckdb.Error:
        return  # no device samples, or no activity table: nothing to judge by idle windows
    idle_rules = sorted(
        (r for r in rules if r.id in ran and IDLE_INPUTS.search(r.sql)), key=attrgetter("id")
    )
    if not blind or not idle_rules:
        return
    by_host = {c["host"]: c for c in doc.coverage}
    for host, gpus in blind:
        doc.run.incomplete.append(
            host_reason(
                host,
                f"idle windows cannot be told on GPU {', '.join(map(str, gpus))} "
                f"(no GPU utilisation in its samples, no request activity): "
                f"{', '.join(r.id for r in idle_rules)} read no idle window there, so leak or "
                "cache is not judged; add utilization.gpu to the nvidia-smi query, or import "
                "the server log",
            )
        )
        entry = by_host.get(host)
        if entry is None:
            continue
        for r in idle_rules:
            if r.id in entry["checked"]:
                entry["checked"].remove(r.id)
                entry["not_checked"].append(
                    {"rule_id": r.id, "title": r.title, "lacked": [IDLE_LACK], "hint": None}
                )
        entry["complete"] = False
