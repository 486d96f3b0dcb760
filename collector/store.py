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
