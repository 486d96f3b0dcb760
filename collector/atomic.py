"""Write a file so that a reader sees the old content or the new, never half of it.

The one home of the temp-file-then-rename pattern for everything we write (bucket
files, cursors, HTML, JSON, textfile metrics). Standard library only: the collector
uses it too. A failure leaves no temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def write_atomic(
    path: str | os.PathLike[str], data: str | bytes, *, fsync: bool = True, mode: int | None = None
) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and rename it.

    Creates missing parent folders. Raises OSError (full disk, no permission) after
    removing the temporary file. A symlink is followed (the file it names is replaced, the
    link stays); a device, FIFO or socket (``--out /dev/stdout``) is written to, never
    replaced. ``mode``: the file's permissions whatever the umask, set before it is in place.
    """
    target = Path(os.path.realpath(path))
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if target.exists() and not target.is_file() and not target.is_dir():
        with open(target, "wb") as special:
            special.write(raw)
        return Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # created like open() would (0666 less the umask: readable by whoever reads the bucket),
    # not mkstemp's 0600; under a fresh random name, so no writer ever opens another's
    tmp = str(target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            fh.write(raw)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(path)
