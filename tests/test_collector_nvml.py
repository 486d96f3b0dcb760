"""NVML is the one thing tests replace: a fake pynvml with the same function names."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from collector.nvml import Nvml, NvmlUnavailable

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
GIB = 1 << 30


class NotSupported(Exception):
    pass


class FakeNvml:
    """Two GPUs by default; knobs for the failure modes seen on real hosts."""

    nvmlMemory_v2 = 2

    def __init__(
        self,
        gpus: int = 2,
        lost: set[int] | None = None,
        no_driver: bool = False,
        procs_unsupported: bool = False,
        v2: bool = True,
    ) -> None:
        self.gpus, self.lost, self.no_driver = gpus, lost or set(), no_driver
        self.procs_unsupported, self.v2, self.shutdown = procs_unsupported, v2, False

    def nvmlInit(self) -> None:
        if self.no_driver:
            raise OSError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i in self.lost:
            raise RuntimeError("GPU is lost")
        return i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-{h:04d}".encode()

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> SimpleNamespace:
        if version is not None and not self.v2:
            raise NotSupported("v2 not supported")
        mem = SimpleNamespace(total=80 * GIB, used=(10 + h) * GIB, free=(70 - h) * GIB)
        if version is not None:
            mem.reserved = 512 << 20
        return mem

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=90 - h, memory=40)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        if self.procs_unsupported:
            raise NotSupported("Not Supported")
        return [SimpleNamespace(pid=1000 + h, usedGpuMemory=(9 + h) * GIB)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=1000 + h, usedGpuMemory=None)]  # same pid: counted once


def _sample(lib: FakeNvml):
    n = Nvml(lib)
    n.open()
    try:
        return n.sample(NOW, "h")
    finally:
        n.close()


def test_two_gpus() -> None:
    s = _sample(FakeNvml())
    assert [g["gpu_index"] for g in s.gpus] == [0, 1]
    assert (
        s.gpus[1]["memory_used_bytes"] == 11 * GIB
        and s.gpus[0]["memory_reserved_bytes"] == 512 << 20
    )
    assert s.gpus[0]["gpu_uuid"] == "GPU-0000" and s.gpus[0]["utilization_gpu_pct"] == 90
    assert [(p["pid"], p["used_gpu_memory_bytes"]) for p in s.processes] == [
        (1000, 9 * GIB),
        (1001, 10 * GIB),
    ]
    assert not s.errors


def test_lost_gpu_is_skipped_the_other_written() -> None:
    s = _sample(FakeNvml(gpus=3, lost={1}))
    assert [g["gpu_index"] for g in s.gpus] == [0, 2]
    assert any("gpu 1" in e for e in s.errors)


def test_process_info_unsupported_keeps_device_rows() -> None:
    s = _sample(FakeNvml(procs_unsupported=True))
    assert len(s.gpus) == 2 and s.gpus[0]["memory_used_bytes"] == 10 * GIB
    assert {p["pid"] for p in s.processes} == {1000, 1001}  # graphics list still answered
    assert any("processes" in e for e in s.errors)


def test_no_v2_memory_info_falls_back() -> None:
    s = _sample(FakeNvml(v2=False))
    assert (
        s.gpus[0]["memory_reserved_bytes"] is None and s.gpus[0]["memory_total_bytes"] == 80 * GIB
    )


def test_no_driver() -> None:
    with pytest.raises(NvmlUnavailable, match="NVML unavailable"):
        Nvml(FakeNvml(no_driver=True)).open()


def test_only_nvml_module_imports_pynvml() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    users = [
        p.relative_to(root).as_posix()
        for d in ("collector", "analyzer", "reports")
        for p in (root / d).rglob("*.py")
        if "import pynvml" in p.read_text()
    ]
    assert users == ["collector/nvml.py"]
