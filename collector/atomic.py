"""Write a file so that a reader sees the old content or the new, never half of it.

The one home of the temp-file-then-rename pattern for everything we write (bucket
files, cursors, HTML, JSON, textfile metrics). Standard library only: the collector
uses it too. A failure leaves no temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, fsync: bool = True) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and rename it.

    Creates missing parent folders. Raises OSError (full disk, no permission) after
    removing the temporary file.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target
