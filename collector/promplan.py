"""What to fetch from Prometheus: the mapping (data, in TOML) and the series plan.

The mapping says which metric becomes which column (``[[gpu]]``, into
``gpu_samples``) or is kept as scraped (``[[engine]]``, into ``metric_samples``), and
which labels play which role (host, GPU, Kubernetes workload). The plan lists the
series that exist in the window (``/api/v1/series``), resolves each one's host, and
cuts the hosts into batches small enough to fetch and write in bounded memory.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.metrics import DEFAULT_PREFIXES

BUILTIN = Path(__file__).with_name("prom_mapping.toml")
UNITS = {
    "bytes": 1.0,
    "kib": 1024.0,
    "mib": 1024.0**2,
    "gib": 1024.0**3,
    "percent": 1.0,
    "ratio": 100.0,
}
GPU_COLUMNS = (
    "memory_used_bytes",
    "memory_free_bytes",
    "memory_reserved_bytes",
    "utilization_gpu_pct",
    "utilization_memory_pct",
)
ROLES = ("host", "gpu_index", "gpu_uuid", "gpu_name", "namespace", "pod", "container")
# an engine series proper (not process_*): its target's process_* series are the server's
ENGINE_PREFIXES = tuple(p for p in DEFAULT_PREFIXES if not p.startswith("process"))
_METRIC = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


class MappingError(ValueError):
    pass


@dataclass
class Mapping:
    labels: dict[str, list[str]] = field(default_factory=dict)
    gpu: dict[str, tuple[str, float]] = field(default_factory=dict)  # metric -> (column, scale)
    engine: dict[str, bool] = field(default_factory=dict)  # metric -> only with an engine


def _merge(m: Mapping, path: Path) -> None:
    try:
        doc: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise MappingError(f"{path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise MappingError(f"{path}: {e}") from None
    unknown = set(doc) - {"labels", "gpu", "engine"}
    if unknown:
        raise MappingError(f"{path}: unknown section(s) {', '.join(sorted(unknown))}")
    for role, names in (doc.get("labels") or {}).items():
        if role not in ROLES:
            raise MappingError(f"{path}: [labels] {role}: not one of {', '.join(ROLES)}")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise MappingError(f"{path}: [labels] {role} must be a list of label names")
        m.labels[role] = [*names, *[n for n in m.labels.get(role, []) if n not in names]]
    for i, ent in enumerate(doc.get("gpu") or [], 1):
        where = f"{path}: [[gpu]] entry {i}"
        metric, column = ent.get("metric"), ent.get("column")
        unit = str(ent.get("unit", "bytes"))
        if not isinstance(metric, str) or not _METRIC.match(metric):
            raise MappingError(f"{where}: metric must be a Prometheus metric name")
        if column not in GPU_COLUMNS:
            raise MappingError(f"{where}: column must be one of {', '.join(GPU_COLUMNS)}")
        if unit.lower() not in UNITS:
            raise MappingError(f"{where}: unit must be one of {', '.join(UNITS)}")
        m.gpu[metric] = (column, UNITS[unit.lower()])
    for i, ent in enumerate(doc.get("engine") or [], 1):
        metric = ent.get("metric")
        if not isinstance(metric, str) or not _METRIC.match(metric):
            raise MappingError(f"{path}: [[engine]] entry {i}: metric must be a metric name")
        m.engine[metric] = bool(ent.get("with_engine", False))


def load_mapping(extra: str | Path | None = None) -> Mapping:
    """The built-in mapping, extended by ``extra`` (its entries win)."""
    m = Mapping()
    _merge(m, BUILTIN)
    if extra is not None:
        _merge(m, Path(extra))
    if "DCGM_FI_DEV_FB_USED" not in m.gpu and "memory_used_bytes" not in {
        c for c, _ in m.gpu.values()
    }:
        raise MappingError("the mapping has no metric for memory_used_bytes")
    return m


def role(labels: dict[str, str], mapping: Mapping, name: str) -> tuple[str | None, str | None]:
    """(label name, value) of the first label that plays ``name``; (None, None) if none."""
    for lab in mapping.labels.get(name, []):
        v = labels.get(lab)
        if v:
            return lab, v
    return None, None


def host_of(label: str, value: str) -> str:
    if label == "instance":
        # host:port, [v6]:port
        if value.startswith("["):
            return value[1 : value.index("]")] if "]" in value else value
        return value.rsplit(":", 1)[0] if value.count(":") == 1 else value
    return value


@dataclass(frozen=True)
class Series:
    metric: str
    labels: tuple[tuple[str, str], ...]  # less __name__, sorted
    host: str
    by: str  # the label whose value selects this series' host in a query
    value: str


@dataclass(frozen=True)
class GpuId:
    """What a device series says about its GPU and the workload on it."""

    gpu_index: int
    uuid: str | None
    name: str | None
    namespace: str | None
    pod: str | None
    container: str | None


@dataclass
class Plan:
    series: list[Series] = field(default_factory=list)
    gpu: dict[tuple[tuple[str, str], ...], GpuId] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # why some series were left out

    def hosts(self) -> list[str]:
        return sorted({s.host for s in self.series})

    def batches(self, max_series: int) -> list[list[str]]:
        """Hosts in groups of about ``max_series`` series (one host never splits)."""
        count: dict[str, int] = {}
        for s in self.series:
            count[s.host] = count.get(s.host, 0) + 1
        out: list[list[str]] = []
        cur: list[str] = []
        n = 0
        for h in sorted(count):
            if cur and n + count[h] > max_series:
                out.append(cur)
                cur, n = [], 0
            cur.append(h)
            n += count[h]
        if cur:
            out.append(cur)
        return out


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


def make_plan(
    gpu_sets: list[dict[str, str]],
    engine_sets: list[dict[str, str]],
    mapping: Mapping,
    hosts: set[str] | None = None,
) -> Plan:
    """Resolve every discovered series' host and GPU; keep those of ``hosts`` (all if None)."""
    plan = Plan()
    pod_host: dict[tuple[str | None, str], str] = {}
    no_gpu = 0
    by: str | None
    val: str | None
    host: str | None
    for lab in gpu_sets:
        by, val = role(lab, mapping, "host")
        _, idx = role(lab, mapping, "gpu_index")
        if by is None or val is None or idx is None or not idx.isdigit():
            no_gpu += 1
            continue
        host = host_of(by, val)
        ns = role(lab, mapping, "namespace")[1]
        pod = role(lab, mapping, "pod")[1]
        if pod:
            pod_host[(ns, pod)] = host
            pod_host.setdefault((None, pod), host)
        key = _key(lab)
        plan.gpu[key] = GpuId(
            int(idx),
            role(lab, mapping, "gpu_uuid")[1],
            role(lab, mapping, "gpu_name")[1],
            ns,
            pod,
            role(lab, mapping, "container")[1],
        )
        plan.series.append(Series(lab["__name__"], key, host, by, val))
    if no_gpu:
        plan.dropped.append(
            f"{no_gpu} device series without a host or GPU label "
            f"(tried {', '.join(mapping.labels.get('host', []))} / "
            f"{', '.join(mapping.labels.get('gpu_index', []))})"
        )
    engine_targets = {
        (lab.get("job"), lab.get("instance"))
        for lab in engine_sets
        if lab.get("__name__", "").startswith(ENGINE_PREFIXES)
    }
    no_host = 0
    for lab in engine_sets:
        name = lab.get("__name__", "")
        if mapping.engine.get(name) and (lab.get("job"), lab.get("instance")) not in engine_targets:
            continue  # process_* of a target that is not an inference server
        by, val = None, None
        for lab_name in mapping.labels.get("host", []):
            if lab_name != "instance" and lab.get(lab_name):
                by, val = lab_name, lab[lab_name]
                break
        host = val
        if by is None:
            _, ns = role(lab, mapping, "namespace")
            pod_l, pod = role(lab, mapping, "pod")
            if pod_l and pod and (pod_host.get((ns, pod)) or pod_host.get((None, pod))):
                by, val = pod_l, pod
                host = pod_host.get((ns, pod)) or pod_host[(None, pod)]
        if by is None and lab.get("instance"):
            by, val = "instance", lab["instance"]
            host = host_of(by, val)
        if by is None or val is None or host is None:
            no_host += 1
            continue
        plan.series.append(Series(name, _key(lab), host, by, val))
    if no_host:
        plan.dropped.append(f"{no_host} engine series without a host label")
    plan.series = list(dict.fromkeys(plan.series))  # replicas of one series, once
    if hosts:
        plan.series = [s for s in plan.series if s.host in hosts]
    return plan
