"""A real S3-compatible server (moto in server mode) on 127.0.0.1, for tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_BESIDE = Path(sys.executable).with_name("moto_server")
MOTO: str | None = str(_BESIDE) if _BESIDE.exists() else shutil.which("moto_server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def s3_with_bucket(host: str, port: int, bucket: str) -> Any:
    """A pyarrow S3 filesystem on the server at host:port, with ``bucket`` created."""
    from pyarrow import fs

    s3 = fs.S3FileSystem(
        endpoint_override=f"{host}:{port}",
        scheme="http",
        access_key="test",
        secret_key="test",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    s3.create_dir(bucket)
    return s3


@contextlib.contextmanager
def moto_s3(bucket: str) -> Iterator[dict[str, str]]:
    """Start moto on a free port, create ``bucket``, yield the AWS_* variables that
    point a client at it; the server stops on exit."""
    if MOTO is None:
        raise RuntimeError("moto[server] is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [MOTO, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    }
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        s3_with_bucket("127.0.0.1", port, bucket)
        yield env
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def s3_environ(bucket: str) -> Iterator[dict[str, str]]:
    """:func:`moto_s3` with its AWS_* variables set in ``os.environ`` (child processes
    inherit them), put back as they were on exit."""
    with moto_s3(bucket) as env:
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield env
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
