"""Where a bucket lives: a local folder, or an S3-compatible store (``s3://bucket/prefix``).

S3 settings come from the usual AWS environment variables (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``) through
pyarrow's own S3 filesystem, so the collector needs nothing beyond pyarrow.
"""

from __future__ import annotations

import os
from typing import Any


def is_s3(bucket: str | os.PathLike[str]) -> bool:
    return str(bucket).startswith("s3://")


def s3_filesystem() -> Any:
    from pyarrow import fs

    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3")
    kw: dict[str, Any] = {
        "region": os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or "us-east-1"
    }
    if endpoint:
        scheme, _, rest = endpoint.partition("://")
        kw["endpoint_override"] = rest or endpoint
        kw["scheme"] = scheme if rest else "https"
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        kw["access_key"] = os.environ["AWS_ACCESS_KEY_ID"]
        kw["secret_key"] = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    return fs.S3FileSystem(**kw)


def s3_root(bucket: str) -> str:
    """'s3://name/prefix/' -> 'name/prefix' (pyarrow's path form)."""
    return str(bucket)[len("s3://") :].strip("/")


def root_of(bucket: str | os.PathLike[str], fs: Any) -> str:
    """Where a bucket's listings start: ``name/prefix`` on S3 (``fs`` given), else the
    absolute folder."""
    return s3_root(str(bucket)) if fs is not None else os.path.abspath(bucket)


def _absent(e: OSError) -> bool:
    """An error that only says the file or object is not there (pyarrow's S3 says it as
    an OSError whose text names it, not always as FileNotFoundError)."""
    if isinstance(e, (FileNotFoundError, NotADirectoryError)):
        return True
    text = str(e).lower()
    return any(s in text for s in ("not found", "nosuchkey", "no such"))


def read_small(path: str, fs: Any = None) -> bytes | None:
    """A small file of the bucket (an index, a stored document) whole: ``path`` is local,
    or a key of ``fs`` (pyarrow's S3 filesystem). None when it is not there; OSError for
    any other failure."""
    try:
        if fs is not None:
            with fs.open_input_stream(path) as f:
                return bytes(f.read())
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as e:
        if _absent(e):
            return None
        raise


def write_small(path: str, data: bytes, fs: Any = None) -> None:
    """Write a small file of the bucket so a reader sees the old content or the new:
    locally a temporary file renamed over it (collector.atomic), on S3 one PUT."""
    if fs is None:
        from collector.atomic import write_atomic

        write_atomic(path, data)
        return
    with fs.open_output_stream(path) as f:
        f.write(data)


def remove(path: str, fs: Any = None, *, prune: bool = False) -> None:
    """Delete a file of the bucket (``path`` local, or a key of ``fs``); one already gone
    is no error (another rollup or compact took it). ``prune``: also remove its folder and
    the one above when that leaves them empty (a local date/host folder would otherwise
    be listed by every analysis; S3 has no folders)."""
    try:
        if fs is not None:
            fs.delete_file(path)
        else:
            os.unlink(path)
    except OSError as e:
        if not _absent(e):
            raise
    if prune and fs is None:
        folder = os.path.dirname(path)
        for d in (folder, os.path.dirname(folder)):
            try:
                os.rmdir(d)
            except OSError:  # not empty (or gone): kept
                break
