"""S3 objects staged in a local folder: every rollup scans some tables more than once, and
over the network each scan would fetch the objects again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

STAGE_THREADS = 8  # objects fetched at once: each copy waits on the network, not the CPU


def stage(fs: Any, keys: list[str], stage_dir: str | os.PathLike[str]) -> list[str]:
    """Copy objects into a local folder (same relative layout), :data:`STAGE_THREADS` at
    a time; their local paths. Each lands under a temporary name and is renamed, so a
    copy cut short is never taken for a staged object."""
    from concurrent.futures import ThreadPoolExecutor

    from pyarrow import fs as pafs

    local = pafs.LocalFileSystem()
    dsts = [Path(stage_dir) / k for k in keys]

    def fetch(key: str, dst: Path) -> None:
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            part = dst.with_name(f".{dst.name}.part")
            pafs.copy_files(key, str(part), source_filesystem=fs, destination_filesystem=local)
            os.replace(part, dst)
        except OSError as e:
            raise StageError(key, e) from e

    todo = dict.fromkeys((k, d) for k, d in zip(keys, dsts, strict=True) if not d.exists())
    if len(todo) <= 1:
        for k, d in todo:
            fetch(k, d)
    else:
        ex = ThreadPoolExecutor(min(STAGE_THREADS, len(todo)))
        try:
            for done in [ex.submit(fetch, k, d) for k, d in todo]:
                done.result()  # the first error, as a copy in turn would raise it
        finally:  # after an error, the copies not begun are dropped: a frozen server
            ex.shutdown(wait=True, cancel_futures=True)  # would make each wait its timeout
    return [str(d) for d in dsts]


class StageError(OSError):
    """An object that could not be copied: ``key`` names it."""

    def __init__(self, key: str, error: OSError) -> None:
        super().__init__(f"{key}: {error}")
        self.key = key


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
