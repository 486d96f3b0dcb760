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
from analyzer.sampling import IDLE_UNTOLD
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
NEVER_IDLE_LACK = "idle windows: the server always had a request running"
NEVER_IDLE_SPAN_H = 6  # hours of samples from which a GPU without idle windows is named
NEVER_IDLE_WINDOWS = 4  # fewer idle windows than GM001 needs in a lifetime (its min_windows)
NEVER_IDLE_SHARE = 0.1  # ... and idle for less than this share of its samples' span
PROBE_BINS = 8  # allocator-probe bins from which AP001-AP003 judge a GPU (GM001's probe_min_bins)


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
    idle_rules = _idle_rules(rules, ran)
    if not idle_rules:
        return
    for host, gpus in blind:
        mine = _unjudged(doc, host, idle_rules)
        if not mine:
            continue
        _not_judged(
            doc,
            host,
            f"{IDLE_UNTOLD} on GPU {', '.join(map(str, gpus))} "
            f"(no GPU utilisation in its samples, no request activity): "
            f"{', '.join(r.id for r in mine)} read no idle window there, so leak or "
            "cache is not judged; add utilization.gpu to the nvidia-smi query, or import "
            "the server log",
            mine,
            IDLE_LACK,
        )
    _never_idle(con, doc, idle_rules, {h for h, _ in blind})


def _idle_rules(rules: Iterable[Rule], ran: set[str]) -> list[Rule]:
    """The rules that ran and judge by idle windows."""
    return sorted(
        (r for r in rules if r.id in ran and IDLE_INPUTS.search(r.sql)), key=attrgetter("id")
    )


def _unjudged(doc: FindingsDocument, host: str, idle_rules: list[Rule]) -> list[Rule]:
    """``idle_rules`` less those with a finding on ``host``: they found something to judge."""
    fired = {f.rule_id for f in doc.findings if f.host == host}
    return [r for r in idle_rules if r.id not in fired]


def _not_judged(
    doc: FindingsDocument, host: str, reason: str, idle_rules: list[Rule], lacked: str
) -> None:
    """Name ``host`` as incomplete, and move ``idle_rules`` to its not-checked list."""
    doc.run.incomplete.append(host_reason(host, reason))
    entry = next((c for c in doc.coverage if c["host"] == host), None)
    if entry is None:
        return
    for r in idle_rules:
        if r.id in entry["checked"]:
            entry["checked"].remove(r.id)
            entry["not_checked"].append(
                {"rule_id": r.id, "title": r.title, "lacked": [lacked], "hint": None}
            )
    entry["complete"] = False


def _never_idle(
    con: duckdb.DuckDBPyConnection,
    doc: FindingsDocument,
    idle_rules: list[Rule],
    blind: set[str],
) -> None:
    """GPUs with hours of samples and a utilisation reading (or request activity) that
    were idle too seldom to judge: a server that always has a request running never shows
    its memory at rest, so the rules that compare idle windows read nothing there and
    their silence would read as "no leak". Where the allocator probe covers the GPU, its
    rules judge instead; else the host is named and the run is incomplete."""
    try:
        rows = con.execute(
            f"""
            SELECT i.host, list(i.gpu_index ORDER BY i.gpu_index),
                   max(epoch(i.last_ts) - epoch(i.first_ts)) / 3600,
                   max(coalesce(w.n, 0))
            FROM gpu_info i
            LEFT JOIN (SELECT host, gpu_index, max(n) AS n FROM idle_trend GROUP BY ALL) w
                   USING (host, gpu_index)
            LEFT JOIN (SELECT host, gpu_index, sum(epoch("end") - epoch(start)) AS idle_s
                       FROM idle_windows GROUP BY ALL) t USING (host, gpu_index)
            WHERE epoch(i.last_ts) - epoch(i.first_ts) >= {NEVER_IDLE_SPAN_H} * 3600
              AND coalesce(w.n, 0) < {NEVER_IDLE_WINDOWS}
              -- a GPU idle throughout is one long window: nothing moved, nothing to judge
              AND coalesce(t.idle_s, 0)
                  < {NEVER_IDLE_SHARE} * (epoch(i.last_ts) - epoch(i.first_ts))
              AND NOT EXISTS (SELECT 1 FROM alloc_trend a WHERE a.host = i.host
                              AND a.gpu_index = i.gpu_index AND a.bins >= {PROBE_BINS})
            GROUP BY i.host ORDER BY i.host
            """
        ).fetchall()
    except duckdb.Error:
        return  # no device samples or no idle windows derived: nothing to say here
    for host, gpus, hours, most in rows:
        mine = _unjudged(doc, host, idle_rules)
        told = any(IDLE_UNTOLD in r for r in doc.host_reasons(host))  # sampled too sparsely
        if host in blind or told or not mine:
            continue
        _not_judged(
            doc,
            host,
            f"GPU {', '.join(map(str, gpus))} had {'at most ' if len(gpus) > 1 else ''}"
            f"{plural(int(most), 'idle window')} (the GPU near idle with no request running) "
            f"in a process lifetime, and was idle under {NEVER_IDLE_SHARE * 100:.0f} % of "
            f"{hours:.1f} h of samples: "
            f"a server that is never idle never shows its memory at rest, so "
            f"{', '.join(r.id for r in mine)} read too few idle windows there and leak "
            "or cache is not judged; `leakcollect probe env` records PyTorch's allocated "
            "memory, which the allocator-probe rules (AP001-AP003) judge without idle windows",
            mine,
            NEVER_IDLE_LACK,
        )
