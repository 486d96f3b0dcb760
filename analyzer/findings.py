"""The findings document: what the analyzer concludes, and all a report needs.

Reports are built from this document alone (never from the bucket), so it also
carries host inventory, downsampled memory series and log events for charts.
This module imports nothing heavy: reports depend on it.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

from analyzer.categories import CATEGORIES, SEVERITIES, severity_rank
from analyzer.progress import plural
from collector.layout import encode_host, host_folders_in

FINDINGS_SCHEMA_VERSION = 1

# fired: found something; clean: ran, found nothing; skipped: an input was missing
# (reason says which); errored: the rule could not run (reason says why).
RULE_STATUSES = ("fired", "clean", "skipped", "errored")


def iso_utc(v: Any) -> str | None:
    """ISO-8601 UTC text (``...Z``) for a datetime; other values as text."""
    if v is None:
        return None
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.UTC)
        return v.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return str(v)


def iso_time(t: str) -> dt.datetime:
    """The datetime of an ISO-8601 text as :func:`iso_utc` writes it (``...Z``)."""
    return dt.datetime.fromisoformat(t.replace("Z", "+00:00"))


def iso_not_after(when: str | None, now: str | None) -> bool:
    """Is ISO time ``when`` at or before ``now`` (both given and readable)?"""
    if not when or not now:
        return False
    try:
        return iso_time(when) <= iso_time(now)
    except ValueError:
        return False


# the words of a data-gap line that says rows were quarantined (analyzer.bucket writes
# them; the week store refuses a week that has one)
QUARANTINED = " row(s) quarantined, stamped "
RUNS_TABLE = "collector_runs"  # the collector's own records of its runs (not traces)


@dataclass
class Finding:
    rule_id: str
    category: str
    severity: str
    host: str
    gpu: int | None
    pid: int | None
    start: str | None
    end: str | None
    summary: str
    evidence: dict[str, Any]
    remediation: str
    title: str = ""
    references: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}")
        severity_rank(self.severity)

    def sort_key(self) -> tuple[Any, ...]:
        """The document's order; total over what a finding shows first (end and summary
        last), so no rule's row order can change a document."""
        return (
            -severity_rank(self.severity),
            self.host,
            -1 if self.gpu is None else self.gpu,
            self.rule_id,
            self.start or "",
            -1 if self.pid is None else self.pid,
            self.end or "",
            self.summary,
        )


@dataclass
class RuleStatus:
    rule_id: str
    name: str
    pack: str
    status: str
    reason: str | None = None
    duration_s: float = 0.0
    findings: int = 0
    hint: str | None = None  # skipped: how to collect the missing input (rule's missing_hint)


@dataclass
class PackInfo:
    name: str
    version: str
    path: str


@dataclass
class RunInfo:
    bucket: str
    since: str | None
    until: str | None
    hosts: list[str]
    generated_at: str
    analyzer_version: str
    packs: list[PackInfo] = field(default_factory=list)
    rules: list[RuleStatus] = field(default_factory=list)
    tables: dict[str, int] = field(default_factory=dict)  # table -> files read
    data_start: str | None = None
    data_end: str | None = None
    gaps: list[str] = field(
        default_factory=list
    )  # hosts that stopped reporting, sources that failed
    # what this analysis could not check (unreadable files, no data in scope, ...);
    # errored rules are added by FindingsDocument.incomplete_reasons()
    incomplete: list[str] = field(default_factory=list)


@dataclass
class HostInfo:
    host: str
    engine: str | None = None
    engine_version: str | None = None
    model: str | None = None
    gpu_name: str | None = None
    gpus: int = 0
    flags: dict[str, Any] = field(default_factory=dict)
    first_ts: str | None = None
    last_ts: str | None = None


@dataclass
class GpuSeries:
    """Device memory of one GPU over time, downsampled for drawing (peaks kept)."""

    host: str
    gpu: int
    gpu_name: str | None
    total_bytes: int | None
    t: list[float]  # epoch seconds
    used_max: list[int]
    used_min: list[int]
    idle_windows: list[list[float]] = field(default_factory=list)  # [start, end, baseline_bytes]
    trend: list[list[float]] = field(default_factory=list)  # [t0, bytes0, t1, bytes1]
    # epoch seconds of the GPU's last sample (t[-1] is its last point's chunk start)
    last_t: float | None = None

    @property
    def data_end(self) -> float | None:
        """Where its samples end, as a forecast counts from: its last sample (in a
        document written without ``last_t``, its last point)."""
        if self.last_t is not None:
            return self.last_t
        return self.t[-1] if self.t else None


@dataclass
class KvSeries:
    """The engine's KV-cache usage (0-1) of one host over time, downsampled."""

    host: str
    t: list[float]
    kv: list[float]


@dataclass
class AllocSeries:
    """One process's PyTorch allocator (allocated, reserved) beside NVML, per bin floor."""

    host: str
    pid: int
    device: int
    gpu: int | None
    role: str | None
    t: list[float]
    allocated: list[int]
    reserved: list[int]
    nvml: list[int | None]


# the server-log signatures shown as chart events (analyzer.series), and how many of each
# kind the document keeps per host: the last ones
EVENT_SIGNATURES = (
    "oom",
    "kv_leak_check",
    "restart",
    "server_args",
    "image_processor",
    "engine_version",
)
MAX_EVENTS_PER_KIND = 60


@dataclass
class Event:
    host: str
    ts: str
    kind: str
    text: str
    gpu: int | None = None


def _plain(v: Any) -> Any:
    """Like dataclasses.asdict, without deep-copying every number of every series
    (asdict took seconds on a fleet's charts). Lists and dicts are copied shallowly."""
    if hasattr(v, "__dataclass_fields__"):
        return {f: _plain(getattr(v, f)) for f in v.__dataclass_fields__}
    if isinstance(v, list):
        return [_plain(x) for x in v] if v and _nested(v[0]) else list(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _nested(x: Any) -> bool:
    return hasattr(x, "__dataclass_fields__") or isinstance(x, (list, dict))


def host_reason(host: str, what: str) -> str:
    """A reason the run is incomplete that is about one host: 'host H: what'."""
    return f"host {host}: {what}"


REPEATED = "repeating another row exactly, given once"  # a rule status' reason: N rows ...


def repeated_rows(n: int) -> str:
    """A rule status' reason: ``n`` of its rows repeated another row exactly."""
    return f"{plural(n, 'row')} {REPEATED}"


LEFT_OUT = "file left out: "  # + "path: why", a reason of ``run.incomplete``


def _left_out_of(reason: str, host: str) -> bool:
    """Is this reason a file left out that may hold rows of ``host``: in its host folder,
    or in no host folder at all (a table or date folder, loose data)?"""
    if not reason.startswith(LEFT_OUT):
        return False
    folders = host_folders_in(reason[len(LEFT_OUT) :].split(": ", 1)[0])
    return not folders or encode_host(host) in folders


@dataclass
class FindingsDocument:
    run: RunInfo
    findings: list[Finding] = field(default_factory=list)
    hosts: list[HostInfo] = field(default_factory=list)
    series: list[GpuSeries] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    kv: list[KvSeries] = field(default_factory=list)
    alloc: list[AllocSeries] = field(default_factory=list)
    # per host: what could and could not be checked, from which inputs (analyzer.coverage)
    coverage: list[dict[str, Any]] = field(default_factory=list)
    schema_version: int = FINDINGS_SCHEMA_VERSION

    def worst_severity(self) -> str | None:
        if not self.findings:
            return None
        return max((f.severity for f in self.findings), key=severity_rank)

    def count_at_or_above(self, severity: str) -> int:
        floor = severity_rank(severity)
        return sum(1 for f in self.findings if severity_rank(f.severity) >= floor)

    def has_data(self) -> bool:
        """Whether any trace file was in scope (a host with logs only counts; the
        collector's own run records do not: they say what it tried, not what it saw)."""
        return bool(self.hosts) or any(n for t, n in self.run.tables.items() if t != RUNS_TABLE)

    def host_reasons(self, host: str) -> list[str]:
        """The reasons in ``run.incomplete`` about one host: written by :func:`host_reason`,
        or a file left out that may hold its rows."""
        head = host_reason(host, "")
        return [r for r in self.run.incomplete if r.startswith(head) or _left_out_of(r, host)]

    def incomplete_reasons(self) -> list[str]:
        """Why this analysis did not check everything in scope (empty: it did)."""
        reasons = list(self.run.incomplete)
        if not self.has_data() and not any("no data" in r for r in reasons):
            reasons.append("no data in scope: no trace files in it")
        for r in self.run.rules:
            if r.status == "errored":
                reasons.append(f"rule {r.rule_id} errored: {r.reason}")
        return list(dict.fromkeys(reasons))

    def to_dict(self) -> dict[str, Any]:
        d = _plain(self)
        # schema_version first, for people reading the file
        return {"schema_version": d.pop("schema_version"), **d}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False, default=str)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FindingsDocument:
        if not isinstance(d, dict) or not isinstance(d.get("run"), dict):
            raise ValueError(
                "expected a JSON object with a 'run' object (leakreport analyze --format json)"
            )
        version = d.get("schema_version")
        if version != FINDINGS_SCHEMA_VERSION:
            raise ValueError(
                f"findings schema_version {version!r} is not supported "
                f"(this leakreport reads {FINDINGS_SCHEMA_VERSION})"
            )
        run = dict(d["run"])
        run["packs"] = _each(PackInfo, run, "packs", "run.")
        run["rules"] = _each(RuleStatus, run, "rules", "run.")
        return cls(
            run=_one(RunInfo, run, "run"),
            findings=_each(Finding, d, "findings"),
            hosts=_each(HostInfo, d, "hosts"),
            series=_each(GpuSeries, d, "series"),
            events=_each(Event, d, "events"),
            kv=_each(KvSeries, d, "kv"),
            alloc=_each(AllocSeries, d, "alloc"),
            coverage=list(d.get("coverage", [])),
        )

    @classmethod
    def from_json(cls, text: str) -> FindingsDocument:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not JSON: {e}") from None
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError) as e:
            raise ValueError(f"{type(e).__name__}: {e}") from None


T = TypeVar("T")


def _one(cls: type[T], v: Any, where: str) -> T:
    """A dataclass from one JSON object, naming where in the document a field is
    unknown or missing (a document of another leakreport, or edited by hand)."""
    if not isinstance(v, dict):
        raise ValueError(f"{where}: expected an object, got {type(v).__name__}")
    fields = getattr(cls, "__dataclass_fields__", {})
    unknown = sorted(set(v) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")
    try:
        return cls(**v)
    except TypeError as e:  # a required field missing
        raise ValueError(f"{where}: {str(e).split('__init__() ', 1)[-1]}") from None


def _each(cls: type[T], d: dict[str, Any], key: str, prefix: str = "") -> list[T]:
    items = d.get(key, [])
    if not isinstance(items, list):
        raise ValueError(f"{prefix}{key}: expected a list, got {type(items).__name__}")
    return [_one(cls, x, f"{prefix}{key}[{i}]") for i, x in enumerate(items)]


__all__ = [
    "AllocSeries",
    "FINDINGS_SCHEMA_VERSION",
    "SEVERITIES",
    "Event",
    "Finding",
    "FindingsDocument",
    "GpuSeries",
    "HostInfo",
    "KvSeries",
    "PackInfo",
    "RuleStatus",
    "RunInfo",
]
