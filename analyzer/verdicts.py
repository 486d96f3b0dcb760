"""One verdict per GPU from a findings document: the single source of its leak rate and
time to OOM, which the host report and the fleet page both show. Light: reports use it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from analyzer.categories import LEAK_CATEGORIES, severity_rank
from analyzer.findings import Finding, FindingsDocument, iso_time

# (category, short verdict), most decisive first: a GPU's verdict is its first match.
VERDICTS: tuple[tuple[str, str], ...] = (
    ("known_bug.fast_image_processor", "known bug"),
    ("leak.gpu", "leak"),
    ("leak.kv_pool", "KV-pool leak"),
    ("leak.outside_allocator", "leak outside the allocator"),
    ("leak.cuda_context", "CUDA-context leak"),
    ("restart.masked_leak", "leak hidden by restarts"),
    ("leak.host_rss", "host RAM leak"),
    ("skew.rank", "one rank grows"),
    ("oom.event", "out of memory"),
    ("cache.growth", "cache (not a leak)"),
    ("oom.forecast", "OOM forecast"),
    ("memory.threshold", "near full"),
    ("latency.pressure", "latency rises"),
)
# Where a GPU's one leak rate comes from, first found wins. NVML-based rates first: NVML
# memory is what runs out, and OF001 projects the OOM from the same number.
RATE_SOURCES: tuple[tuple[str, str], ...] = (
    ("GM001", "rate_mib_per_h"),
    ("OF001", "rate_mib_per_h"),
    ("MT001", "rate_mib_per_h"),
    ("AP001", "rate_mib_per_h"),
    ("OE001", "rate_mib_per_h_before"),
    ("KB001", "growth_mib_per_h"),
    ("HR001", "rate_mib_per_h"),  # host RAM: the report says so beside the number
)
# Categories whose GPU gets a leak rate at all (a cache GPU's growth is not a leak rate).
RATED = LEAK_CATEGORIES | {"restart.masked_leak", "oom.forecast", "oom.event", "skew.rank"}


@dataclass
class GpuVerdict:
    host: str
    gpu: int | None  # None: a host finding on a host without GPU samples
    verdict: str
    severity: str
    categories: list[str]
    rate_mib_per_h: float | None
    rate_rule: str | None
    hours_to_oom: float | None
    oom_at: str | None  # UTC, ISO-8601: the end of the data plus hours_to_oom
    oom_rule: str | None  # "OF001" (the forecast) or the rule whose figures gave the estimate
    confidence: str | None
    findings: list[int]  # indexes into the document's findings

    @property
    def is_leak(self) -> bool:
        return any(c in RATED for c in self.categories)

    @property
    def host_ram(self) -> bool:
        """Its rate is the server's host RAM growth (HR001), not the GPU's memory."""
        return self.rate_rule == "HR001"

    @property
    def gpu_rate(self) -> float | None:
        """The GPU memory leak rate: None where the rate is host RAM's."""
        return None if self.host_ram else self.rate_mib_per_h


def _owner_gpu(f: Finding, gpus: list[int]) -> list[int | None]:
    """The GPUs a finding belongs to: its own, the one its evidence names, a host's only GPU,
    or every GPU of the host (a KV pool or host RSS leak of a tensor-parallel server)."""
    if f.gpu is not None:
        return [f.gpu]
    for key in ("leaking_gpu", "rank_gpu"):
        g = f.evidence.get(key)
        if isinstance(g, int) and not isinstance(g, bool):
            return [g]
    return list(gpus) if gpus else [None]


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _oom_clock(end: float | None, hours: float | None) -> str | None:
    """The end of this GPU's data plus the hours left, as UTC clock time."""
    if end is None or hours is None:
        return None
    t = dt.datetime.fromtimestamp(end, dt.UTC) + dt.timedelta(hours=hours)
    return t.strftime("%Y-%m-%dT%H:%MZ")


def _epoch(ts: str | None) -> float | None:
    return None if ts is None else iso_time(ts).timestamp()


def _data_ends(doc: FindingsDocument) -> dict[tuple[str, int | None], float | None]:
    """Where each GPU's data ends (its own samples, else its host's, else the run's): a
    forecast counts from there, not from the end of the fleet's data."""
    run_end = _epoch(doc.run.data_end)
    out: dict[tuple[str, int | None], float | None] = {
        (h.host, None): _epoch(h.last_ts) or run_end for h in doc.hosts
    }
    out.update({(s.host, s.gpu): s.data_end for s in doc.series if s.data_end is not None})
    return out


RECENT_S = 1800.0  # as OF001's recent_minutes: the peak a forecast counts from


def _recent_peak_mib(doc: FindingsDocument, host: str, gpu: int) -> float | None:
    """The GPU's peak memory over its last half hour of samples, from its chart series
    (which keeps peaks); None without one."""
    s = next((s for s in doc.series if s.host == host and s.gpu == gpu), None)
    end = s.data_end if s is not None else None
    if s is None or end is None:
        return None
    recent = [u for t, u in zip(s.t, s.used_max, strict=False) if t >= end - RECENT_S]
    return max(recent) / 2**20 if recent else None


def _verdict(
    host: str, gpu: int | None, idx: list[int], doc: FindingsDocument, end: float | None
) -> GpuVerdict:
    fs = [doc.findings[i] for i in idx]
    cats = sorted({f.category for f in fs})
    label = next((v for c, v in VERDICTS if c in cats), "findings")
    severity = max((f.severity for f in fs), key=severity_rank)
    by_rule = {f.rule_id: f for f in fs}
    rate = rate_rule = None
    if any(c in RATED for c in cats):
        for rule, key in RATE_SOURCES:
            v = _num(by_rule[rule].evidence.get(key)) if rule in by_rule else None
            if v is not None:
                rate, rate_rule = round(v, 1), rule
                break
    hours = oom_rule = None
    if "OF001" in by_rule and _num(by_rule["OF001"].evidence.get("hours_to_oom")) is not None:
        hours, oom_rule = _num(by_rule["OF001"].evidence["hours_to_oom"]), "OF001"
    elif rate and rate > 0:
        # beyond the forecast rule's window: the same arithmetic on the rules' own figures,
        # from the peak (the idle baseline leaves out the working set: a forecast late by
        # the working set over the rate, 10 h at 2000 MiB and 200 MiB/h)
        for rule, used in (("MT001", "recent_peak_mib"), ("GM001", "last_idle_mib")):
            ev = by_rule[rule].evidence if rule in by_rule else {}
            total, now = _num(ev.get("total_mib")), _num(ev.get(used))
            peak = _recent_peak_mib(doc, host, gpu) if rule == "GM001" and gpu is not None else None
            if peak is not None:
                now = peak if now is None else max(now, peak)
            if total is not None and now is not None:
                hours, oom_rule = round(max(total - now, 0.0) / rate, 2), rule
                break
    conf = next((str(f.evidence["confidence"]) for f in fs if f.evidence.get("confidence")), None)
    if conf is None and "known_bug.fast_image_processor" in cats:
        conf = "high (known bug)"
    elif (
        conf is None
        and "KV001" in by_rule
        and (_num(by_rule["KV001"].evidence.get("leak_checks")) or 0) > 0
    ):
        conf = "high (engine check)"
    return GpuVerdict(
        host, gpu, label, severity, cats, rate, rate_rule, hours,
        _oom_clock(end, hours), oom_rule, conf, idx,
    )  # fmt: skip


def gpu_verdicts(doc: FindingsDocument) -> list[GpuVerdict]:
    """One verdict per GPU with findings, soonest OOM first (then severity, rate): the one
    place the host report and the fleet page take a GPU's rate and time to OOM from."""
    gpus: dict[str, list[int]] = {}
    for s in doc.series:
        gpus.setdefault(s.host, []).append(s.gpu)
    owned: dict[tuple[str, int | None], list[int]] = {}
    for i, f in enumerate(doc.findings):
        for g in _owner_gpu(f, sorted(gpus.get(f.host, []))):
            owned.setdefault((f.host, g), []).append(i)
    ends = _data_ends(doc)
    run_end = _epoch(doc.run.data_end)
    out = [
        _verdict(h, g, idx, doc, ends.get((h, g)) or ends.get((h, None)) or run_end)
        for (h, g), idx in owned.items()
    ]
    out.sort(key=verdict_order)
    return out


def verdict_order(v: GpuVerdict) -> tuple[float, int, float, str, int]:
    return (
        v.hours_to_oom if v.hours_to_oom is not None else float("inf"),
        -severity_rank(v.severity) - (10 if v.is_leak else 0),
        -(v.rate_mib_per_h or 0.0),
        v.host,
        -1 if v.gpu is None else v.gpu,
    )
