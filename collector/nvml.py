"""The one module that touches NVML (nvidia-ml-py's ``pynvml``).

Every call may fail on its own: a field that fails is None, a GPU that fails
is skipped with its error noted, and the rest is still returned. Tests pass a
fake module with the same function names as ``lib``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    gpus: list[dict[str, Any]] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class NvmlUnavailable(Exception):
    """nvmlInit failed: no driver, no GPU, or no library."""


def _load() -> Any:
    import pynvml  # the only import of pynvml in the project

    return pynvml


class Nvml:
    def __init__(self, lib: Any | None = None) -> None:
        self._lib: Any = lib
        self._ok = False

    def open(self) -> None:
        try:
            self._lib = self._lib or _load()
            self._lib.nvmlInit()
        except Exception as e:  # NVMLError, ImportError, OSError: all mean "no NVML here"
            raise NvmlUnavailable(f"NVML unavailable: {e}") from e
        self._ok = True

    def close(self) -> None:
        if self._ok:
            with contextlib.suppress(Exception):
                self._lib.nvmlShutdown()
            self._ok = False

    def _try(self, errors: list[str], what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:
            errors.append(f"{what}: {e}")
            return None

    def sample(self, now: dt.datetime, host: str) -> Sample:
        lib: Any = self._lib
        out = Sample()
        count = self._try(out.errors, "device count", lib.nvmlDeviceGetCount)
        for i in range(count or 0):
            h = self._try(out.errors, f"gpu {i}", lib.nvmlDeviceGetHandleByIndex, i)
            if h is None:
                continue
            uuid = self._try(out.errors, f"gpu {i} uuid", lib.nvmlDeviceGetUUID, h)
            name = self._try(out.errors, f"gpu {i} name", lib.nvmlDeviceGetName, h)
            if isinstance(uuid, bytes):
                uuid = uuid.decode()
            if isinstance(name, bytes):
                name = name.decode()
            mem = reserved = None
            v2 = getattr(lib, "nvmlMemory_v2", None)
            if v2 is not None:
                try:
                    mem = lib.nvmlDeviceGetMemoryInfo(h, version=v2)
                    reserved = getattr(mem, "reserved", None)
                except Exception:
                    mem = None
            if mem is None:
                mem = self._try(out.errors, f"gpu {i} memory", lib.nvmlDeviceGetMemoryInfo, h)
            util = self._try(
                out.errors, f"gpu {i} utilization", lib.nvmlDeviceGetUtilizationRates, h
            )
            out.gpus.append(
                {
                    "ts": now,
                    "host": host,
                    "gpu_index": i,
                    "gpu_uuid": uuid,
                    "gpu_name": name,
                    "memory_total_bytes": getattr(mem, "total", None),
                    "memory_used_bytes": getattr(mem, "used", None),
                    "memory_free_bytes": getattr(mem, "free", None),
                    "memory_reserved_bytes": reserved,
                    "utilization_gpu_pct": getattr(util, "gpu", None),
                    "utilization_memory_pct": getattr(util, "memory", None),
                }
            )
            seen: set[int] = set()
            for fn_name in (
                "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetGraphicsRunningProcesses",
            ):
                fn = getattr(lib, fn_name, None)
                procs = self._try(out.errors, f"gpu {i} processes", fn, h) if fn else None
                for p in procs or []:
                    pid = getattr(p, "pid", None)
                    if pid is None or pid in seen:
                        continue
                    seen.add(pid)
                    used = getattr(p, "usedGpuMemory", None)
                    out.processes.append(
                        {
                            "ts": now,
                            "host": host,
                            "gpu_index": i,
                            "gpu_uuid": uuid,
                            "pid": int(pid),
                            "used_gpu_memory_bytes": used
                            if isinstance(used, int) and used >= 0
                            else None,
                        }
                    )
        return out
