"""`leakcollect run --probe-url`: one tiny request per run to a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import socket
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from collector import exitcodes
from collector.httpprobe import probe
from collector.run import Config, collect

SEEN: list[tuple[str, str, dict[str, object] | None]] = []


class _Server(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        SEEN.append(("GET", self.path, None))
        if self.path == "/slow":
            time.sleep(0.3)
        if self.path == "/broken":
            self.send_error(503, "loading model")
            return
        self._reply(b'{"status": "ok"}')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append(("POST", self.path, body))
        self._reply(b'{"choices": [{"message": {"content": "p"}}]}')

    def _reply(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def url():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def test_health_latency_and_status(url: str) -> None:
    fast = probe(f"{url}/health", NOW, "h")
    slow = probe(f"{url}/slow", NOW, "h")
    assert fast["status"] == slow["status"] == 200 and "error" not in fast
    assert slow["latency_s"] >= 0.3 > fast["latency_s"]


def test_one_token_chat_completion(url: str) -> None:
    SEEN.clear()
    r = probe(f"{url}/v1/chat/completions", NOW, "h", model="m")
    assert r["status"] == 200
    method, path, body = SEEN[-1]
    assert (method, path) == ("POST", "/v1/chat/completions")
    assert body == {
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
        "model": "m",
    }


def test_http_error_is_a_result_and_refused_is_recorded(url: str) -> None:
    r = probe(f"{url}/broken", NOW, "h")
    assert r["status"] == 503 and "503" in r["error"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    r = probe(f"http://127.0.0.1:{port}/health", NOW, "h", timeout=1)
    assert r["status"] is None and r["error"] and r["latency_s"] < 1.5


def test_timeout_is_bounded(url: str) -> None:
    r = probe(f"{url}/slow", NOW, "h", timeout=0.1)
    assert r["status"] is None and "timed out" in r["error"]


def test_collector_run_writes_one_probe_per_url(tmp_path: Path, url: str) -> None:
    cfg = Config(
        bucket=str(tmp_path / "b"),
        host="gpu-01",
        state_dir=tmp_path / "st",
        no_gpu=True,
        interval=0.1,
        duration=0.35,  # several samples, still one request per URL
        probe_urls=[f"{url}/health", f"{url}/v1/models"],
    )
    assert collect(cfg, say=lambda m: None) == exitcodes.OK
    rows = [
        r
        for f in (tmp_path / "b").glob("http_probes/*/*/*.parquet")
        for r in pq.read_table(f).to_pylist()
    ]
    assert sorted(r["url"].rsplit("/", 1)[1] for r in rows) == ["health", "models"]
    assert all(r["status"] == 200 and r["latency_s"] > 0 for r in rows)
