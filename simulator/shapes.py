"""The shapes a host's data arrives in, written as the real tools write them.

- ``native``: the collector's own tables (written by :mod:`simulator.generate`);
- ``nvidia-smi-csv``: ``nvidia-smi --query-gpu=timestamp,index,name,uuid,memory.total,
  memory.used,memory.free,utilization.gpu --format=csv -l 10`` (units in the header
  and the values, local time with milliseconds) plus the server's log;
- ``memory-log``: a ``while true; do date; nvidia-smi --query-gpu=memory.used
  --format=csv,noheader; sleep 10; done`` loop (``date`` in the C locale, one line
  per GPU, no utilisation) plus the server's log;
- ``logs-only``: the server's log alone.

Non-native files go through the collector's real importers into the bucket, so
a shape exercises exactly what a user running ``leakcollect import`` gets.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from collector.importers import read_nvidia_smi_csv, zone
from collector.logimport import server_log
from collector.memlog import read_gpu_memory_log
from collector.writer import BucketWriter

SHAPES = ("native", "nvidia-smi-csv", "memory-log", "logs-only")
MIB = 1 << 20

# The tables each shape fills (what a rule can use).
PROVIDES: dict[str, frozenset[str]] = {
    "native": frozenset(
        {
            "gpu_samples",
            "gpu_processes",
            "processes",
            "proc_maps",
            "metric_samples",
            "log_lines",
            "allocator_samples",
            "http_probes",
            "collector_runs",
        }
    ),
    "nvidia-smi-csv": frozenset({"gpu_samples", "log_lines"}),
    "memory-log": frozenset({"gpu_samples", "log_lines"}),
    "logs-only": frozenset({"log_lines"}),
}

__all__ = ["PROVIDES", "SHAPES", "import_files", "write_files", "zone"]


def _csv(path: Path, samples: list[dict[str, Any]], tz: dt.tzinfo) -> None:
    lines = [
        "timestamp, index, name, uuid, memory.total [MiB], memory.used [MiB], "
        "memory.free [MiB], utilization.gpu [%]"
    ]
    for r in sorted(samples, key=lambda r: (r["ts"], r["gpu_index"])):
        # every -l interval prints one row per GPU, read one after the other: ms apart
        t = (r["ts"] + dt.timedelta(milliseconds=101 + 8 * r["gpu_index"])).astimezone(tz)
        total, used = r["memory_total_bytes"] // MIB, r["memory_used_bytes"] // MIB
        lines.append(
            f"{t:%Y/%m/%d %H:%M:%S}.{t.microsecond // 1000:03d}, {r['gpu_index']}, "
            f"{r['gpu_name']}, {r['gpu_uuid']}, {total} MiB, {used} MiB, {total - used} MiB, "
            f"{round(r['utilization_gpu_pct'])} %"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _date(t: dt.datetime) -> str:
    """``date`` in the C locale: ``Mon Nov 23 00:00:10 UTC 2026`` (day space-padded)."""
    return f"{t:%a %b} {t.day:2d} {t:%H:%M:%S} {t.tzname()} {t.year}"


def _memory_log(path: Path, samples: list[dict[str, Any]], tz: dt.tzinfo) -> None:
    by_ts: dict[dt.datetime, list[dict[str, Any]]] = {}
    for r in samples:
        by_ts.setdefault(r["ts"], []).append(r)
    lines = []
    for ts in sorted(by_ts):
        lines.append(_date(ts.astimezone(tz)))
        for r in sorted(by_ts[ts], key=lambda r: r["gpu_index"]):
            lines.append(f"{r['memory_used_bytes'] // MIB} MiB")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_files(
    shape: str, folder: Path, samples: list[dict[str, Any]], log_text: list[str], tz: str
) -> dict[str, Path]:
    """Write one host's files for ``shape``; returns {kind: path}."""
    if shape not in SHAPES or shape == "native":
        raise ValueError(f"unknown file shape {shape!r}; choose one of {', '.join(SHAPES[1:])}")
    zone_ = zone(tz)
    folder.mkdir(parents=True, exist_ok=True)
    files = {"server_log": folder / "server.log"}
    files["server_log"].write_text("\n".join(log_text) + "\n", encoding="utf-8")
    if shape == "nvidia-smi-csv":
        files["nvidia_smi_csv"] = folder / "nvidia-smi.csv"
        _csv(files["nvidia_smi_csv"], samples, zone_)
    elif shape == "memory-log":
        files["memory_log"] = folder / "gpu-memory.log"
        _memory_log(files["memory_log"], samples, zone_)
    return files


def import_files(
    shape: str,
    files: dict[str, Path],
    out: str | Path,
    host: str,
    year: int,
    tz: str,
    total_mib: float,
) -> dict[str, int]:
    """Import one host's files through the collector's importers; rows per table."""
    tables: dict[str, list[dict[str, Any]]] = {
        "log_lines": server_log(files["server_log"], host, year=year, tz=tz)
    }
    if "nvidia_smi_csv" in files:
        got = read_nvidia_smi_csv(files["nvidia_smi_csv"], host, tz=tz)
        tables["gpu_samples"], tables["gpu_processes"] = got.rows, got.processes
    if "memory_log" in files:
        # the loop records memory.used only: the user names the card's size
        tables["gpu_samples"] = read_gpu_memory_log(
            files["memory_log"], host, total_mib=total_mib, tz=tz
        ).rows
    writer = BucketWriter(out, host)
    for name, rows in tables.items():
        if rows:
            writer.write(name, rows)
    counts = {name: len(rows) for name, rows in tables.items()}
    counts.setdefault("gpu_samples", 0)
    return counts
