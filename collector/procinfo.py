"""Recognise inference servers from their command lines and pull out key flags."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

# flag -> (field name, type). Both engines' spellings; --flag=value and --flag value.
_FLAGS: dict[str, tuple[str, type]] = {
    "--model-path": ("model", str),
    "--model": ("model", str),
    "--mem-fraction-static": ("mem_fraction_static", float),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--tp-size": ("tp_size", int),
    "--tp": ("tp_size", int),
    "--tensor-parallel-size": ("tp_size", int),
    "-tp": ("tp_size", int),
}
_BOOL_FLAGS = {"--disable-fast-image-processor": "disable_fast_image_processor"}


@dataclass
class ServerInfo:
    engine: str | None = None
    model: str | None = None
    mem_fraction_static: float | None = None
    gpu_memory_utilization: float | None = None
    disable_fast_image_processor: bool | None = None
    tp_size: int | None = None
    flags: dict[str, Any] = field(default_factory=dict)

    def flags_json(self) -> str:
        return json.dumps(self.flags, sort_keys=True)


def detect_engine(argv: list[str]) -> str | None:
    joined = " ".join(argv)
    if re.search(r"\bsglang\.launch_server\b|\bsglang(?:\.srt)?\b.*\bserve\b|sglang::", joined):
        return "sglang"
    if re.search(r"\bvllm\.entrypoints\b|(?:^|/|\s)vllm\s+serve\b|VLLM::", joined):
        return "vllm"
    return None


def parse_cmdline(argv: list[str] | str) -> ServerInfo:
    if isinstance(argv, str):
        argv = shlex.split(argv)
    info = ServerInfo(engine=detect_engine(argv))
    if info.engine is None:
        return info
    if info.engine == "sglang":
        info.disable_fast_image_processor = False  # the engine's default
    # vLLM: "vllm serve MODEL" gives the model as a positional argument.
    for i, a in enumerate(argv):
        if a == "serve" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            info.model = argv[i + 1]
            break
    i = 0
    while i < len(argv):
        a = argv[i]
        key, eq, val = a.partition("=")
        if key in _BOOL_FLAGS:
            setattr(info, _BOOL_FLAGS[key], True)
            info.flags[key.lstrip("-")] = True
        elif key in _FLAGS:
            if not eq:
                if i + 1 >= len(argv):
                    break
                val = argv[i + 1]
                i += 1
            name, typ = _FLAGS[key]
            with contextlib.suppress(ValueError):
                setattr(info, name, typ(val))
            info.flags[key.lstrip("-")] = val
        elif a.startswith("--"):
            if eq:
                info.flags[key[2:]] = val
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                info.flags[a[2:]] = argv[i + 1]
                i += 1
            else:
                info.flags[a[2:]] = True
        i += 1
    return info
