"""Scrape Prometheus /metrics endpoints under a total deadline and a byte cap.

``fetch`` is the one HTTP GET/POST of the collector (the scrape and the latency
probe): the deadline covers connecting, the headers and the whole body, not
each read, so an endpoint that trickles a byte a second cannot hold a run; a
body past ``max_bytes`` is dropped unread ("too large") instead of filling
memory. ``cancel`` closes the socket from another thread, for a caller that
abandons a fetch stuck in the kernel.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import socket
import threading
import time
import urllib.parse
import zlib
from dataclasses import dataclass, field
from typing import Any

from collector import metrics

MAX_BYTES = 4 << 20  # a big SGLang/vLLM /metrics page is well under 1 MiB
READ = 64 << 10


@dataclass
class Fetched:
    status: int | None = None
    reason: str = ""
    body: bytes = b""
    error: str | None = None


class Fetch:
    """One HTTP request that ends by ``deadline`` (``time.monotonic()``), whatever the server does."""

    def __init__(self) -> None:
        self._conn: http.client.HTTPConnection | None = None
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def __call__(
        self,
        url: str,
        deadline: float,
        max_bytes: int = MAX_BYTES,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Fetched:
        out = Fetched()
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            out.error = "not an http(s) URL"
            return out
        left = deadline - time.monotonic()
        if left <= 0:
            out.error = "timed out (no time left in the run)"
            return out
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        try:
            conn = cls(u.hostname, u.port, timeout=left)
        except ValueError as e:  # a bad port
            out.error = str(e)
            return out
        self._conn = conn
        # the socket timeout bounds each read; this bounds the whole exchange (trickled headers)
        alarm = threading.Timer(left, self.cancel)
        alarm.daemon = True
        alarm.start()
        target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        try:
            conn.request("POST" if data is not None else "GET", target, data, headers or {})
            if self._cancelled:
                raise TimeoutError("abandoned")
            resp = conn.getresponse()
            out.status, out.reason = resp.status, resp.reason
            declared = resp.getheader("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                out.error = (
                    f"response too large ({int(declared)} bytes declared, limit {max_bytes})"
                )
                return out
            buf = bytearray()
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or self._cancelled:
                    raise TimeoutError(f"timed out after {len(buf)} bytes of body")
                if conn.sock is not None:
                    conn.sock.settimeout(left)
                chunk = resp.read1(READ)
                if not chunk:
                    break
                buf += chunk
                if len(buf) > max_bytes:
                    out.error = f"response too large (over {max_bytes} bytes): not parsed"
                    return out
            out.body = bytes(buf)
            coding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
            if coding in ("gzip", "x-gzip", "deflate"):  # a proxy compressed it anyway
                out.body, out.error = _decoded(out.body, coding, max_bytes)
            elif coding != "identity":
                out.error = f"response in {coding} encoding: not read"
        except TimeoutError as e:
            msg = str(e)
            out.error = msg if msg.startswith("timed out") else f"timed out ({msg or 'no answer'})"
        except (OSError, http.client.HTTPException, ValueError) as e:
            if self._cancelled:
                out.error = f"timed out: no complete answer in time ({type(e).__name__})"
                return out
            out.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        finally:
            alarm.cancel()
            conn.close()
        return out


def _decoded(body: bytes, coding: str, max_bytes: int) -> tuple[bytes, str | None]:
    """A gzip or deflate body, decoded up to ``max_bytes`` (a small bomb stays small).
    "deflate" is zlib-wrapped by the standard, raw from some servers: both are read."""
    tries = [16 + zlib.MAX_WBITS] if "gzip" in coding else [zlib.MAX_WBITS, -zlib.MAX_WBITS]
    for wbits in tries:
        d = zlib.decompressobj(wbits)
        try:
            out = d.decompress(body, max_bytes + 1)
            break
        except zlib.error as e:
            err = e
    else:
        return b"", f"{coding} body could not be decoded ({err})"
    if len(out) > max_bytes:
        return b"", f"response too large once decoded (over {max_bytes} bytes): not parsed"
    if not d.eof:  # a cut connection: the page would read as if metrics were gone
        return b"", f"{coding} body ends before its compressed stream does: not parsed"
    return out, None


@dataclass
class ScrapeResult:
    url: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped_lines: int = 0
    error: str | None = None


def scrape(
    url: str,
    now: dt.datetime,
    host: str,
    timeout: float = 2.0,
    prefixes: tuple[str, ...] = metrics.DEFAULT_PREFIXES,
    deadline: float | None = None,
    max_bytes: int = MAX_BYTES,
    fetch: Fetch | None = None,
) -> ScrapeResult:
    """One scrape, over by ``timeout`` seconds from now (or ``deadline``, if sooner)."""
    res = ScrapeResult(url)
    end = time.monotonic() + timeout
    end = min(end, deadline) if deadline is not None else end
    got = (fetch or Fetch())(url, end, max_bytes, headers={"Accept": "text/plain;version=0.0.4"})
    if got.error is None and got.status != 200:
        got.error = f"HTTP {got.status} {got.reason}".rstrip()
    if got.error is not None:
        res.error = f"{url}: {got.error}"
        return res
    parsed = metrics.parse(got.body.decode("utf-8", errors="replace"), prefixes, deadline=end)
    res.skipped_lines = parsed.skipped_lines
    res.rows = [
        {
            "ts": now,
            "host": host,
            "source": url,
            "name": s.name,
            "labels": s.labels,
            "value": s.value,
        }
        for s in parsed.samples
    ]
    if parsed.timed_out:
        res.error = f"{url}: parsing stopped at the deadline ({parsed.skipped_lines} lines skipped)"
    elif not res.rows and parsed.skipped_lines:
        res.error = f"{url}: no readable samples ({parsed.skipped_lines} lines skipped)"
    elif prefixes == metrics.DEFAULT_PREFIXES and not any(
        r["name"].startswith(metrics.ENGINE_PREFIXES) for r in res.rows
    ):  # a node exporter, a proxy's page, an engine started without its metrics
        res.error = (
            f"{url}: no SGLang or vLLM metrics on the page "
            f"({len(res.rows) + parsed.left_out} other samples): is it the inference server's "
            "/metrics (SGLang needs --enable-metrics)?"
        )
    return res
