"""The trace schema: the contract between the collector and the analyzer.

Every table the collector (or an importer, or the simulator) writes is declared
here, with its Arrow schema. The analyzer reads the same declarations to build
its views, so a column renamed here is renamed everywhere.

Conventions: timestamps are UTC with microsecond precision; byte counts are
int64 bytes (never MiB); everything that a source may fail to provide is
nullable. Every table carries ``host``; partitioning is by date and host.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = 1

TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class Table:
    name: str
    schema: pa.Schema
    time_column: str
    doc: str
    # rows that repeat these columns are the same fact written twice (a run killed
    # between writing its files and saving its log cursor); readers keep one
    key: tuple[str, ...] = ()
    # columns added later: files written before them lack them; read as NULL
    optional: tuple[str, ...] = ()

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)


def _schema(*fields: tuple[str, pa.DataType, bool]) -> pa.Schema:
    return pa.schema([pa.field(n, t, nullable=nul) for n, t, nul in fields])


GPU_SAMPLES = Table(
    "gpu_samples",
    _schema(
        ("ts", TS, False),
        ("host", pa.string(), False),
        ("gpu_index", pa.int32(), False),
        ("gpu_uuid", pa.string(), True),
        ("gpu_name", pa.string(), True),
        ("memory_total_bytes", pa.int64(), True),
        ("memory_used_bytes", pa.int64(), True),
        ("memory_free_bytes", pa.int64(), True),
        ("memory_reserved_bytes", pa.int64(), True),
        ("utilization_gpu_pct", pa.float32(), True),
        ("utilization_memory_pct", pa.float32(), True),
        # the Kubernetes workload on the GPU where the source knows it (dcgm-exporter)
        ("namespace", pa.string(), True),
        ("pod", pa.string(), True),
        ("container", pa.string(), True),
    ),
    "ts",
    "Device memory and utilisation per GPU, one row per sample.",
    optional=("namespace", "pod", "container"),
)

GPU_PROCESSES = Table(
    "gpu_processes",
    _schema(
        ("ts", TS, False),
        ("host", pa.string(), False),
        ("gpu_index", pa.int32(), True),
        ("gpu_uuid", pa.string(), True),
        ("pid", pa.int64(), False),
        ("used_gpu_memory_bytes", pa.int64(), True),
        ("vm_rss_bytes", pa.int64(), True),
        ("vm_size_bytes", pa.int64(), True),
        ("process_start", TS, True),
    ),
    "ts",
    "GPU memory per process with host-side figures of the same process.",
)

PROC_MAPS = Table(
    "proc_maps",
    _schema(
        ("ts", TS, False),
        ("host", pa.string(), False),
        ("pid", pa.int64(), False),
        ("nvidia_device_count", pa.int32(), True),
        ("nvidia_device_bytes", pa.int64(), True),
        ("nvidia_uvm_count", pa.int32(), True),
        ("nvidia_uvm_bytes", pa.int64(), True),
        ("libcuda_count", pa.int32(), True),
        ("libcuda_bytes", pa.int64(), True),
        ("other_count", pa.int32(), True),
        ("other_bytes", pa.int64(), True),
        ("process_start", TS, True),
    ),
    "ts",
    "Summary of /proc/PID/maps by mapping category.",
    optional=("process_start",),
)

PROCESSES = Table(
    "processes",
    _schema(
        ("ts", TS, False),
        ("host", pa.string(), False),
        ("pid", pa.int64(), False),
        ("process_start", TS, True),
        ("cmdline", pa.string(), True),
        ("engine", pa.string(), True),
        ("engine_version", pa.string(), True),
        ("torch_version", pa.string(), True),
        ("model", pa.string(), True),
        ("mem_fraction_static", pa.float64(), True),
        ("gpu_memory_utilization", pa.float64(), True),
        ("disable_fast_image_processor", pa.bool_(), True),
        ("tp_size", pa.int32(), True),
        ("tp_rank", pa.int32(), True),
        ("flags_json", pa.string(), True),
    ),
    "ts",
    "Inventory of server processes: engine, versions, model and key flags.",
)

METRIC_SAMPLES = Table(
    "metric_samples",
    _schema(
        ("ts", TS, False),
        ("host", pa.string(), False),
        ("source", pa.string(), True),
        ("name", pa.string(), False),
        ("labels", pa.map_(pa.string(), pa.string()), True),
        ("value", pa.float64(), True),
    ),
    "ts",
    "Prometheus samples as scraped (names and labels untouched).",
)

LOG_LINES = Table(
    "log_lines",
    _schema(
        ("ts", TS, False),
        ("host", pa.string(), False),
        ("file", pa.string(), False),
        ("inode", pa.int64(), True),
        ("offset", pa.int64(), False),
        ("line_id", pa.string(), True),
        ("text", pa.string(), False),
        ("signature", pa.string(), True),
        ("truncated", pa.bool_(), True),
    ),
    "ts",
    "Server log lines that matched a signature; ts is when they were read. line_id hashes the "
    "file's first line, the offset and the line: a line read twice counts once, a new line at a "
    "reused inode and offset (copytruncate, a recreated file) stays distinct.",
    key=("host", "file", "inode", "offset", "line_id"),
    optional=("line_id",),
)

ALLOCATOR_SAMPLES = Table(
    "allocator_samples",
    _schema(
        ("ts", TS, False),
        ("host", pa.string(), False),
        ("pid", pa.int64(), False),
        ("process_start", TS, True),
        ("device", pa.int32(), False),
        ("gpu_uuid", pa.string(), True),
        ("role", pa.string(), True),
        ("allocated_bytes", pa.int64(), True),
        ("reserved_bytes", pa.int64(), True),
        ("max_allocated_bytes", pa.int64(), True),
        ("alloc_retries", pa.int64(), True),
        ("ooms", pa.int64(), True),
        ("inactive_split_bytes", pa.int64(), True),
        ("gc_collections", pa.int64(), True),
        ("dropped", pa.int64(), True),
        ("pid_ns", pa.int64(), True),
    ),
    "ts",
    "PyTorch caching-allocator figures per process and device, from the in-process probe. "
    "process_start (as /proc gives it) tells a reused PID's processes apart; NULL from "
    "probes older than the column. pid is the host's; pid_ns is set (the PID namespace) "
    "only where a container's PID could not be turned into the host's.",
    key=("host", "pid", "device", "ts"),
    optional=("process_start", "pid_ns"),
)

ALLOCATOR_SNAPSHOTS = Table(
    "allocator_snapshots",
    _schema(
        ("ts", TS, False),
        ("host", pa.string(), False),
        ("pid", pa.int64(), False),
        ("path", pa.string(), False),
        ("size_bytes", pa.int64(), True),
    ),
    "ts",
    "PyTorch memory snapshots the probe wrote on request, and where they are in the bucket.",
)

HTTP_PROBES = Table(
    "http_probes",
    _schema(
        ("ts", TS, False),
        ("host", pa.string(), False),
        ("url", pa.string(), False),
        ("status", pa.int32(), True),
        ("latency_s", pa.float64(), True),
        ("error", pa.string(), True),
    ),
    "ts",
    "One tiny request to the server per collector run: latency and HTTP status.",
)

COLLECTOR_RUNS = Table(
    "collector_runs",
    _schema(
        ("ts", TS, False),
        ("host", pa.string(), False),
        ("run_id", pa.string(), False),
        ("collector_version", pa.string(), True),
        ("source", pa.string(), False),
        ("status", pa.string(), False),
        ("rows", pa.int64(), True),
        ("error", pa.string(), True),
        ("duration_s", pa.float64(), True),
        ("finished", TS, True),
    ),
    "ts",
    "One row per collector run and source: what it wrote or why it failed.",
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        GPU_SAMPLES,
        GPU_PROCESSES,
        PROC_MAPS,
        PROCESSES,
        METRIC_SAMPLES,
        LOG_LINES,
        ALLOCATOR_SAMPLES,
        ALLOCATOR_SNAPSHOTS,
        HTTP_PROBES,
        COLLECTOR_RUNS,
    )
}

RUN_STATUSES = ("ok", "failed", "skipped")


def table(name: str) -> Table:
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown trace table {name!r}; known: {', '.join(TABLES)}") from None
