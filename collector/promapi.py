"""A small client for the Prometheus HTTP API (``/api/v1/series``, ``/api/v1/query_range``).

Standard library only. Requests are POSTed form-encoded (long selectors never hit a
URL length limit), retried with backoff on connection errors, timeouts, 429 and 5xx,
and every failure becomes a :class:`PromError` whose message is one line that says
what to do: wrong URL, authentication, timeout, or the server's sample limit.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from collector.promdecode import Matrix, MatrixFormatError, fast_matrix, slow_matrix

MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses query_range resolutions above this
MAX_BODY = 512 << 20


class PromError(Exception):
    """A request that failed for good; ``kind`` is one of unreachable, auth, timeout,
    not_prometheus, bad_query, too_many_samples, server."""

    def __init__(self, kind: str, msg: str) -> None:
        super().__init__(msg)
        self.kind = kind


@dataclass
class PromClient:
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 60.0
    retries: int = 4
    backoff_s: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    requests: int = 0
    bytes_read: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise PromError("unreachable", f"{self.url}: not an http(s) URL of a Prometheus server")

    def _once(self, path: str, form: Sequence[tuple[str, str]], matrix: bool = False) -> Any:
        body = urllib.parse.urlencode(list(form)).encode()
        req = urllib.request.Request(
            self.url + path,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
                "User-Agent": "leakcollect-import",
                **self.headers,
            },
        )
        with self._lock:
            self.requests += 1
        with urllib.request.urlopen(req, timeout=self.timeout) as r:  # noqa: S310 - operator-given URL
            raw = r.read(MAX_BODY + 1)
        with self._lock:
            self.bytes_read += len(raw)
        if len(raw) > MAX_BODY:
            raise PromError("server", f"{self.url}{path}: response larger than {MAX_BODY} bytes")
        if matrix:
            try:
                return fast_matrix(raw)
            except MatrixFormatError:
                pass  # another shape (or an error): decoded in full below
        data = _decode(self.url + path, 200, raw)
        if matrix:
            if not isinstance(data, dict) or data.get("resultType") != "matrix":
                raise PromError("not_prometheus", f"{self.url}{path}: not a matrix result")
            return slow_matrix(data)
        return data

    def call(self, path: str, form: Sequence[tuple[str, str]], matrix: bool = False) -> Any:
        """``data`` of a successful API response; retries what may pass on a second try."""
        last: PromError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                self.sleep(min(self.backoff_s * 2 ** (attempt - 1), 30.0))
            try:
                return self._once(path, form, matrix)
            except urllib.error.HTTPError as e:
                err = _http_error(self.url + path, e)
                if err.kind not in ("server", "timeout") and e.code != 429:
                    raise err from None
                last = err
            except TimeoutError:
                last = PromError(
                    "timeout",
                    f"{self.url}{path}: no answer within {self.timeout:g} s "
                    "(raise --timeout, or use a shorter --chunk)",
                )
            except urllib.error.URLError as e:
                reason = e.reason
                if isinstance(reason, (TimeoutError, socket.timeout)):
                    last = PromError(
                        "timeout", f"{self.url}{path}: no answer within {self.timeout:g} s"
                    )
                else:
                    last = PromError(
                        "unreachable", f"{self.url}: cannot connect ({reason}); is --url right?"
                    )
            except (ConnectionError, OSError) as e:
                last = PromError("unreachable", f"{self.url}: connection failed ({e})")
        assert last is not None
        if self.retries:
            last.args = (f"{last.args[0]} [after {self.retries + 1} tries]",)
        raise last

    def series(self, matchers: Sequence[str], start: float, end: float) -> list[dict[str, str]]:
        form = [("match[]", m) for m in matchers] + [("start", _num(start)), ("end", _num(end))]
        data = self.call("/api/v1/series", form)
        if not isinstance(data, list):
            raise PromError("not_prometheus", f"{self.url}/api/v1/series: unexpected answer")
        return [dict(x) for x in data]

    def query_range(self, query: str, start: float, end: float, step: float) -> Matrix:
        """The matrix of a range query, its points as Arrow arrays."""
        form = [("query", query), ("start", _num(start)), ("end", _num(end)), ("step", _num(step))]
        data = self.call("/api/v1/query_range", form, matrix=True)
        assert isinstance(data, Matrix)
        return data


def _num(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _decode(where: str, code: int, raw: bytes) -> Any:
    try:
        doc = json.loads(raw)
    except ValueError:
        raise PromError(
            "not_prometheus",
            f"{where}: HTTP {code} but not JSON; is --url the Prometheus server (http://HOST:9090)?",
        ) from None
    if not isinstance(doc, dict) or "status" not in doc:
        raise PromError("not_prometheus", f"{where}: not a Prometheus API answer")
    if doc["status"] != "success":
        etype, msg = str(doc.get("errorType", "")), str(doc.get("error", "")).strip()
        if "too many samples" in msg:
            raise PromError("too_many_samples", f"{where}: the server's sample limit: {msg}")
        if etype == "timeout":
            raise PromError("timeout", f"{where}: the query timed out on the server: {msg}")
        if etype == "bad_data":
            raise PromError("bad_query", f"{where}: the server refused the query: {msg}")
        raise PromError("server", f"{where}: {etype or 'error'}: {msg}")
    return doc.get("data")


def _http_error(where: str, e: urllib.error.HTTPError) -> PromError:
    if e.code in (401, 403):
        return PromError(
            "auth",
            f"{where}: HTTP {e.code} {e.reason}: the server wants credentials "
            "(pass --header 'Authorization: Bearer TOKEN' or 'Authorization: Basic ...')",
        )
    if e.code == 404:
        return PromError(
            "not_prometheus",
            f"{where}: HTTP 404: no Prometheus API here; --url is the server's base URL "
            "(e.g. http://HOST:9090, with any path prefix it is served under)",
        )
    try:
        raw = e.read(1 << 20)
    except OSError:
        raw = b""
    if raw:
        try:
            _decode(where, e.code, raw)
        except PromError as pe:
            if pe.kind != "not_prometheus":
                return pe
    kind = "timeout" if e.code in (503, 504) else "server" if e.code >= 500 else "bad_query"
    return PromError(kind, f"{where}: HTTP {e.code} {e.reason}")
