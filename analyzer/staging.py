"""S3 objects staged in a local folder: every rollup scans some tables more than once, and
over the network each scan would fetch the objects again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def stage(fs: Any, keys: list[str], stage_dir: str | os.PathLike[str]) -> list[str]:
    """Copy objects into a local folder (same relative layout); their local paths."""
    from pyarrow import fs as pafs

    local = pafs.LocalFileSystem()
    out = []
    for k in keys:
        dst = Path(stage_dir) / k
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            pafs.copy_files(k, str(dst), source_filesystem=fs, destination_filesystem=local)
        out.append(str(dst))
    return out


_TEMP: list[str] = []


def temp_stage() -> str:
    """A temporary folder to stage objects in, removed when the process ends (or by
    :func:`remove_temp`, for an exit that skips the interpreter's teardown)."""
    import atexit
    import tempfile

    d = tempfile.mkdtemp(prefix="leakreport-s3-")
    _TEMP.append(d)
    atexit.register(remove_temp)
    return d


def remove_temp() -> None:
    """Remove the temporary staging folders made so far."""
    import shutil

    while _TEMP:
        shutil.rmtree(_TEMP.pop(), True)
