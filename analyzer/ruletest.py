"""The rule test harness, shipped to pack authors.

Test cases are data: ``tests/<RULE>.toml`` in a pack, each ``[[case]]`` with
trace rows (literal ``[[case.rows.<table>]]`` and/or generated ``[[case.gpu]]``
load/idle cycles) and the findings it expects. The same cases run under
pytest (``pytest_generate_tests``) and ``leakreport rules test``.
"""

from __future__ import annotations

import datetime as dt
import tempfile
import threading
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb

from analyzer.findings import Finding
from analyzer.packs import Pack, Rule
from collector.writer import BucketWriter

MIB = 1024 * 1024
GEN_DEFAULTS: dict[str, Any] = {
    "host": "host-a",
    "gpu": 0,
    "start": dt.datetime(2026, 1, 5, tzinfo=dt.UTC),
    "step_s": 10,
    "total_mib": 16000,
    "base_mib": 12000,
    "cycles": 10,
    "busy_s": 300,
    "idle_s": 120,
    "growth_mib_per_cycle": 0.0,
    "saturate_cycles": 0,  # growth stops after this many cycles; 0 = never
    "busy_extra_mib": 300.0,
    "restart_every_cycles": 0,  # new pid and memory back to base every N cycles; 0 = never
    "pid": 0,  # 0 = no gpu_processes rows
    "running_busy": 8,
    # engine metrics, emitted every 30 s when set (0 = not emitted)
    "kv_idle": -1.0,  # KV usage at idle (sglang:token_usage); < 0 = no KV metric
    "kv_idle_rise_per_cycle": 0.0,
    "requests_per_cycle": 0,  # sglang:num_requests_total counter
    "requests_rise_per_cycle": 0,  # requests_per_cycle grows by this each cycle
    "rss_mib": 0.0,  # process_resident_memory_bytes
    "rss_growth_mib_per_cycle": 0.0,
    "proc_rss_mib": 0.0,  # VmRSS of the main pid in gpu_processes (needs pid), same growth
    "latency_s": 0.0,  # sglang:e2e_request_latency_seconds histogram (needs requests_per_cycle)
    "latency_growth_per_cycle": 0.0,
    # a dynamic process pool: a worker every N cycles whose context stays after it exits
    "worker_every_cycles": 0,
    "worker_mib": 500.0,
    "map_growth_per_cycle": 0,  # /dev/nvidia* mappings of the main pid (needs pid)
    # the allocator probe (allocator_samples of the main pid, every 30 s); < 0 = none
    "alloc_mib": -1.0,  # torch allocated at idle, first cycle
    "alloc_growth_per_cycle": 0.0,
    "alloc_busy_mib": 200.0,  # allocated on top while busy
    "cache_mib": 500.0,  # reserved minus allocated at idle, first cycle
    "cache_growth_per_cycle": 0.0,
    # the request-latency probe (http_probes every 60 s); 0 = none
    "probe_latency_s": 0.0,
    "probe_latency_growth_per_cycle": 0.0,
    "idle_util_pct": 1.0,  # GPU utilisation while idle (busy is 85 %)
}
# A rule's status in a case: fired (findings), clean (ran, none), skipped, errored.
STATUSES = ("fired", "clean", "skipped", "errored")
_STATUS_WORDS = {"passed": "clean", "failed": "fired"}  # the older names


@dataclass
class Case:
    id: str
    rule_id: str
    path: Path
    data: dict[str, Any]
    expect_count: int | None = None
    expect: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    # None: the rule must run (fired or clean); a case about a rule that cannot
    # run says so with expect_status = "skipped" (or "errored")
    expect_status: str | None = None


def generate_gpu(spec: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Rows for gpu_samples, metric_samples and gpu_processes from a cycle spec."""
    unknown = set(spec) - set(GEN_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown [[case.gpu]] keys: {', '.join(sorted(unknown))}")
    p = {**GEN_DEFAULTS, **spec}
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    step, host, gpu = int(p["step_s"]), p["host"], int(p["gpu"])
    t = p["start"]
    leak = orphans = requests = latency_sum = 0.0
    pid = int(p["pid"])
    total = int(p["total_mib"]) * MIB

    def metric(name: str, value: float, labels: dict[str, str] | None = None) -> None:
        rows["metric_samples"].append(
            {"ts": t, "host": host, "name": name, "labels": labels or {}, "value": value}
        )

    for c in range(int(p["cycles"])):
        if p["restart_every_cycles"] and c and c % int(p["restart_every_cycles"]) == 0:
            leak, pid = 0.0, (pid + 1 if pid else 0)
        growing = not p["saturate_cycles"] or c < int(p["saturate_cycles"])
        worker = bool(p["worker_every_cycles"]) and c > 0 and c % int(p["worker_every_cycles"]) == 0
        for phase, length in (("busy", int(p["busy_s"])), ("idle", int(p["idle_s"]))):
            busy = phase == "busy"
            for k in range(0, length, step):
                if busy and growing:
                    leak += float(p["growth_mib_per_cycle"]) * step / max(int(p["busy_s"]), 1)
                alive = worker and busy and k < 60
                if worker and busy and k == 60:
                    orphans += float(p["worker_mib"])
                extra = float(p["busy_extra_mib"]) if busy else 0.0
                used = (
                    float(p["base_mib"])
                    + leak
                    + orphans
                    + extra
                    + (float(p["worker_mib"]) if alive else 0.0)
                )
                u = min(int(used * MIB), total)
                rows["gpu_samples"].append(
                    {
                        "ts": t,
                        "host": host,
                        "gpu_index": gpu,
                        "memory_total_bytes": total,
                        "memory_used_bytes": u,
                        "memory_free_bytes": total - u,
                        "utilization_gpu_pct": 85.0 if busy else float(p["idle_util_pct"]),
                    }
                )
                per_cycle = float(p["requests_per_cycle"]) + c * float(p["requests_rise_per_cycle"])
                done = per_cycle * step / max(int(p["busy_s"]), 1) if busy else 0.0
                requests += done
                latency_sum += done * (
                    float(p["latency_s"]) + c * float(p["latency_growth_per_cycle"])
                )
                if k % 30 == 0:
                    metric(
                        "sglang:num_running_reqs",
                        float(p["running_busy"]) if busy else 0.0,
                        {"tp_rank": str(gpu)},
                    )
                    if p["kv_idle"] >= 0:
                        kv = (
                            float(p["kv_idle"])
                            + c * float(p["kv_idle_rise_per_cycle"])
                            + (0.3 if busy else 0.0)
                        )
                        metric("sglang:token_usage", min(kv, 1.0), {"tp_rank": str(gpu)})
                    if p["requests_per_cycle"]:
                        metric("sglang:num_requests_total", requests)
                    if p["latency_s"]:
                        metric("sglang:e2e_request_latency_seconds_sum", latency_sum)
                        metric("sglang:e2e_request_latency_seconds_count", requests)
                    if p["rss_mib"]:
                        rss = (float(p["rss_mib"]) + c * float(p["rss_growth_mib_per_cycle"])) * MIB
                        metric("process_resident_memory_bytes", rss)
                    if pid:
                        own = u - int((orphans + (float(p["worker_mib"]) if alive else 0.0)) * MIB)
                        prow = {
                            "ts": t,
                            "host": host,
                            "gpu_index": gpu,
                            "pid": pid,
                            "used_gpu_memory_bytes": own,
                        }
                        if p["proc_rss_mib"]:
                            prow["vm_rss_bytes"] = int(
                                (
                                    float(p["proc_rss_mib"])
                                    + c * float(p["rss_growth_mib_per_cycle"])
                                )
                                * MIB
                            )
                        rows["gpu_processes"].append(prow)
                        if p["map_growth_per_cycle"] and k == 0:
                            n = 40 + c * int(p["map_growth_per_cycle"])
                            rows["proc_maps"].append(
                                {"ts": t, "host": host, "pid": pid, "nvidia_device_count": n}
                            )
                    if p["alloc_mib"] >= 0:
                        held = float(p["alloc_mib"]) + c * float(p["alloc_growth_per_cycle"])
                        cached = float(p["cache_mib"]) + c * float(p["cache_growth_per_cycle"])
                        live = held + (float(p["alloc_busy_mib"]) if busy else 0.0)
                        rows["allocator_samples"].append(
                            {
                                "ts": t,
                                "host": host,
                                "pid": pid or 4242,
                                "device": 0,
                                "role": "scheduler",
                                "allocated_bytes": int(live * MIB),
                                "reserved_bytes": int(max(live, held + cached) * MIB),
                                "max_allocated_bytes": int(live * MIB),
                            }
                        )
                    if p["probe_latency_s"] and k % 60 == 0:
                        rows["http_probes"].append(
                            {
                                "ts": t,
                                "host": host,
                                "url": "http://127.0.0.1:30000/health",
                                "status": 200,
                                "latency_s": float(p["probe_latency_s"])
                                + c * float(p["probe_latency_growth_per_cycle"]),
                            }
                        )
                    if alive:
                        rows["gpu_processes"].append(
                            {
                                "ts": t,
                                "host": host,
                                "gpu_index": gpu,
                                "pid": 90000 + c,
                                "used_gpu_memory_bytes": int(float(p["worker_mib"]) * MIB),
                            }
                        )
                t = t + dt.timedelta(seconds=step)
    return rows


def load_cases(path: Path, pack: str) -> list[Case]:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: {e}") from e
    rule_id = str(doc.get("rule", path.stem))
    cases = []
    for i, c in enumerate(doc.get("case", []), 1):
        name = str(c.get("name", f"case{i}"))
        want = c.get("expect_status")
        if want is not None and want not in STATUSES:
            raise ValueError(
                f"{path}: case {name!r}: expect_status {want!r} is not one of {', '.join(STATUSES)}"
            )
        cases.append(
            Case(
                id=f"{pack}/{rule_id}/{name}",
                rule_id=rule_id,
                path=path,
                data=c,
                expect_count=c.get("expect_count"),
                expect=list(c.get("expect", [])),
                params=dict(c.get("params", {})),
                expect_status=want,
            )
        )
    return cases


def collect_cases(packs: list[Pack]) -> list[Case]:
    out: list[Case] = []
    for p in packs:
        for f in sorted((p.path / "tests").glob("*.toml")):
            out.extend(load_cases(f, p.name))
    return out


def write_case_bucket(case: Case, bucket: Path) -> None:
    tables: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for spec in case.data.get("gpu", []):
        for table, rows in generate_gpu(spec).items():
            for r in rows:
                tables[(table, r["host"])].append(r)
    for table, rows in case.data.get("rows", {}).items():
        for r in rows:
            r = dict(r)
            r.setdefault("host", GEN_DEFAULTS["host"])
            tables[(table, r["host"])].append(r)
    for (table, host), rows in sorted(tables.items()):
        BucketWriter(bucket, host).write(table, rows)


def status_word(status: str) -> str:
    return _STATUS_WORDS.get(status, status)


def _matches(f: Finding, want: dict[str, Any]) -> list[str]:
    bad = []
    for k, v in want.items():
        if k in ("min", "max"):
            for ek, ev in v.items():
                got = f.evidence.get(ek)
                if got is None or (got < ev if k == "min" else got > ev):
                    bad.append(f"evidence {ek}={got} not {'>=' if k == 'min' else '<='} {ev}")
        elif k == "summary_contains":
            if str(v) not in f.summary:
                bad.append(f"summary {f.summary!r} lacks {v!r}")
        elif getattr(f, k, f.evidence.get(k)) != v:
            bad.append(f"{k}={getattr(f, k, f.evidence.get(k))!r}, want {v!r}")
    return bad


def check_result(case: Case, status: str, reason: str, found: list[Finding]) -> list[str]:
    """Problems with one rule run against a case's expectations (empty = passed)."""
    status = status_word(status)
    problems = []
    if case.expect_status is None:
        if status in ("skipped", "errored"):
            problems.append(
                f"rule {status}: {reason} (a case whose rule did not run proves nothing; "
                f'write expect_status = "{status}" if that is what it tests)'
            )
    elif status != case.expect_status:
        problems.append(f"rule {status} ({reason or 'no reason given'}), want {case.expect_status}")
    if case.expect_count is not None and len(found) != case.expect_count:
        problems.append(
            f"expected {case.expect_count} findings, got {len(found)}: "
            + "; ".join(f.summary for f in found)
        )
    for want in case.expect:
        if not any(not _matches(f, want) for f in found):
            detail = "; ".join(", ".join(_matches(f, want)) for f in found) or "no findings"
            problems.append(f"no finding matches {want}: {detail}")
    return problems


def run_case(case: Case, packs: list[Pack]) -> list[str]:
    """Problems found (empty list = the case passed), through the full analysis."""
    from analyzer.runner import analyze

    rules = {r.id: r for p in packs for r in p.rules}
    if case.rule_id not in rules:
        errors = [str(e) for p in packs for e in p.errors if e.rule_id == case.rule_id]
        return errors or [f"{case.path}: no rule {case.rule_id!r} is loaded"]
    with tempfile.TemporaryDirectory(prefix="leakreport-case-") as tmp:
        try:
            write_case_bucket(case, Path(tmp))
        except (ValueError, TypeError, KeyError) as e:
            return [f"{case.path}: bad case data: {e}"]
        doc = analyze(
            tmp,
            packs,
            only_rules={case.rule_id},
            overrides={case.rule_id: case.params},
            with_series=False,
        )
    mine = [s for s in doc.run.rules if s.rule_id == case.rule_id]
    if not mine:
        return [f"{case.path}: the analysis reported no status for {case.rule_id}"]
    return check_result(case, mine[0].status, mine[0].reason or "", doc.findings)


class CaseBucket:
    """One case's bucket, opened once with its rollups built, to run many
    versions of a rule against (the mutation check). A context manager."""

    def __init__(self, case: Case, rollup_params: dict[str, Any] | None = None) -> None:
        self.case = case
        self.rollup_params = rollup_params  # rollup.DEFAULTS overrides (tests of the rollups)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.con: duckdb.DuckDBPyConnection | None = None
        self.files: dict[str, int] = {}

    def __enter__(self) -> CaseBucket:
        from analyzer import logevents, rollup
        from analyzer.bucket import open_bucket

        self._tmp = tempfile.TemporaryDirectory(prefix="leakreport-case-")
        try:
            write_case_bucket(self.case, Path(self._tmp.name))
            self.con, self.files = open_bucket(self._tmp.name)
            logevents.build(self.con)
            rollup.build(self.con, self.rollup_params)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def run(self, rule: Rule, timeout_s: float = 20.0) -> tuple[str, str, list[Finding]]:
        """(status, reason, findings) of one rule, as the analysis would report them;
        a rule still running after timeout_s is interrupted and counts as errored."""
        from analyzer.runner import RuleOutputError, run_rule

        assert self.con is not None, "CaseBucket.run outside its with-block"
        if not rule.enabled:
            return "skipped", "disabled in its metadata", []
        absent = [t for t in rule.requires if not any(self.files.get(x) for x in t.split("|"))]
        if absent:
            return "skipped", f"no data in table(s) {', '.join(absent)}", []
        timer = threading.Timer(timeout_s, self.con.interrupt)
        timer.start()
        try:
            found = run_rule(self.con, rule, self.case.params)
        except (duckdb.Error, RuleOutputError, ValueError, TypeError) as e:
            return "errored", f"{rule.path}: {e}", []
        finally:
            timer.cancel()
        return ("fired" if found else "clean"), "", found
