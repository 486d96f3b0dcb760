"""The default pack over an S3-compatible store: moto in server mode on 127.0.0.1,
behind a small TCP proxy that counts the bytes the analyzer receives."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CountingProxy:
    """Forwards 127.0.0.1:port to the target and counts bytes sent back to clients."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.down = 0
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
                if count:
                    with self.lock:
                        self.down += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.sock.close()


def run(bucket: Path, k: int, opts: dict[str, Any], measure: Callable[..., Any]) -> dict[str, Any]:
    exe = Path(sys.executable).with_name("moto_server")
    moto = str(exe) if exe.exists() else shutil.which("moto_server")
    if not moto:
        return {"skipped": "moto_server not installed"}
    port = _free_port()
    proc = subprocess.Popen(
        [moto, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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
        from pyarrow import fs

        s3 = fs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{port}",
            scheme="http",
            access_key="bench",
            secret_key="bench",
            region="us-east-1",
            allow_bucket_creation=True,
        )
        s3.create_dir("fleet")
        # twice the hosts analysed are uploaded: host pruning must leave half unread
        hosts = sorted({p.name for p in (bucket / "gpu_samples").glob("date=*/host=*")})
        upload, analysed = set(hosts[: 2 * k]), set(hosts[:k])
        stored = stored_all = 0
        for f in sorted(bucket.rglob("*.parquet")):
            if f.parent.name not in upload:
                continue
            key = "fleet/week/" + str(f.relative_to(bucket))
            data = f.read_bytes()
            with s3.open_output_stream(key) as out:
                out.write(data)
            stored_all += len(data)
            stored += len(data) if f.parent.name in analysed else 0
        proxy = CountingProxy(port)
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_REGION": "us-east-1",
        }
        r = measure("s3", "s3://fleet/week", k, 1, {**opts, "env": env, "batch_hosts": k})
        r.pop("env", None)
        r.update(bytes_stored=stored_all, bytes_of_hosts_analysed=stored, bytes_read=proxy.down)
        r["hosts"], r["hosts_stored"] = k, len(upload)
        r["read_over_stored"] = round(proxy.down / max(stored, 1), 3)
        proxy.close()
        return r
    finally:
        proc.terminate()
        proc.wait(timeout=10)
