"""Read GPU and server processes from procfs (root injectable; vanished PIDs skipped)."""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collector.probe_hook.leakprobe import boot_time, start_seconds
from collector.procinfo import detect_engine, parse_cmdline

# start-end perms offset dev inode [path]; found anywhere in a line (gVisor / CRIU prefixes)
MAPS_LINE = re.compile(
    r"([0-9a-f]+)-([0-9a-f]+)\s+([-r][-w][-xs][-sp])\s+[0-9a-f]+\s+[0-9a-f]+:[0-9a-f]+\s+\d+\s*(.*)$"
)
CATEGORIES = ("nvidia_device", "nvidia_uvm", "libcuda", "other")


def classify(path: str) -> str:
    if path.startswith("/dev/nvidia-uvm"):
        return "nvidia_uvm"
    if re.match(r"/dev/nvidia(ctl|\d+|-caps|-modeset)?", path):
        return "nvidia_device"
    if re.search(r"/libcuda\.so", path):
        return "libcuda"
    return "other"


def summarize_maps(lines: Iterable[str]) -> dict[str, int]:
    out = {f"{c}_{k}": 0 for c in CATEGORIES for k in ("count", "bytes")}
    for line in lines:
        m = MAPS_LINE.search(line)
        if not m:
            continue
        size = int(m.group(2), 16) - int(m.group(1), 16)
        cat = classify(m.group(4).strip())
        out[f"{cat}_count"] += 1
        out[f"{cat}_bytes"] += max(size, 0)
    return out


@dataclass
class ProcFS:
    root: Path = Path("/proc")

    def _read(self, pid: int, name: str) -> str:
        return (self.root / str(pid) / name).read_text(encoding="utf-8", errors="replace")

    def pids(self) -> list[int]:
        """Raises OSError when the procfs root itself cannot be listed (a wrong --proc-root)."""
        return sorted(int(p.name) for p in self.root.iterdir() if p.name.isdigit())

    def cmdline(self, pid: int) -> list[str]:
        raw = (self.root / str(pid) / "cmdline").read_bytes()
        return [a.decode(errors="replace") for a in raw.split(b"\0") if a]

    def boot_time(self) -> float | None:
        return boot_time(str(self.root))

    def start_time(self, pid: int) -> dt.datetime | None:
        btime = self.boot_time()
        if btime is None:
            return None
        stat = self._read(pid, "stat")  # a vanished pid raises, for describe() to skip
        try:
            return dt.datetime.fromtimestamp(start_seconds(stat, btime), dt.UTC)
        except (ValueError, IndexError):  # a stat line of another shape: start unknown
            return None

    def pid_namespace(self, pid: int | str) -> int:
        """The process's PID namespace (the inode of its ``ns/pid``; ``"self"`` for this
        process). OSError: gone, or another user's (reading it needs root)."""
        return os.stat(self.root / str(pid) / "ns" / "pid").st_ino

    def nspid(self, pid: int) -> list[int]:
        """The process's PID in each PID namespace it is in, this procfs's first and its
        own (a container's) last; one value outside containers. OSError: gone."""
        for line in self._read(pid, "status").splitlines():
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:] if x.isdigit()]
        return []

    def status(self, pid: int) -> dict[str, int | None]:
        out: dict[str, int | None] = {"vm_rss_bytes": None, "vm_size_bytes": None}
        for line in self._read(pid, "status").splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmSize"):
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out["vm_rss_bytes" if key == "VmRSS" else "vm_size_bytes"] = (
                        int(parts[0]) * 1024
                    )
        return out

    def servers(self) -> list[int]:
        found = []
        for pid in self.pids():
            try:
                if detect_engine(self.cmdline(pid)):
                    found.append(pid)
            except OSError:
                continue
        return found

    def versions(self, pid: int, argv: list[str]) -> dict[str, str | None]:
        """Installed versions of the engine and torch, from the process's own environment."""
        out: dict[str, str | None] = {"sglang": None, "vllm": None, "torch": None}
        try:
            exe = os.readlink(self.root / str(pid) / "exe")
        except OSError:
            exe = argv[0] if argv else ""
        proc_root = self.root / str(pid) / "root"
        prefix = Path(exe).parent.parent
        candidates = [prefix / "lib"]
        for lib in candidates:
            base = proc_root / str(lib).lstrip("/")
            try:
                for sp in base.glob("python3*/site-packages"):
                    for dist in sp.glob("*.dist-info"):
                        name = dist.name.split("-")[0].lower()
                        if name in out and out[name] is None:
                            out[name] = dist.name[len(name) + 1 : -len(".dist-info")] or None
            except OSError:
                continue
        return out

    def describe(self, pid: int, now: dt.datetime, host: str) -> dict[str, Any] | None:
        """Rows for processes, proc_maps and host figures of one pid; None if it vanished."""
        try:
            argv = self.cmdline(pid)
            status = self.status(pid)
            start = self.start_time(pid)
        except (OSError, ValueError, IndexError):
            return None
        maps: dict[str, Any] | None = None
        maps_error = None
        try:  # another user's process: cmdline and status are readable, maps are not
            maps = summarize_maps(self._read(pid, "maps").splitlines())
        except PermissionError as e:
            maps_error = (
                f"pid {pid}: maps not readable ({e.strerror}): run as the server's user or root"
            )
        except (OSError, ValueError, IndexError):
            return None
        info = parse_cmdline(argv) if argv else None
        versions = self.versions(pid, argv) if info and info.engine else {}
        proc = {
            "ts": now,
            "host": host,
            "pid": pid,
            "process_start": start,
            "cmdline": " ".join(argv)[:8192],
            "engine": info.engine if info else None,
            "engine_version": versions.get(info.engine) if info and info.engine else None,
            "torch_version": versions.get("torch"),
            "model": info.model if info else None,
            "mem_fraction_static": info.mem_fraction_static if info else None,
            "gpu_memory_utilization": info.gpu_memory_utilization if info else None,
            "disable_fast_image_processor": info.disable_fast_image_processor if info else None,
            "tp_size": info.tp_size if info else None,
            "flags_json": info.flags_json() if info else None,
        }
        return {
            "process": proc,
            "maps": None
            if maps is None
            else {"ts": now, "host": host, "pid": pid, "process_start": start, **maps},
            "maps_error": maps_error,
            "status": status,
            "start": start,
        }
