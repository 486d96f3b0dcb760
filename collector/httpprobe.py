"""The request-latency probe: one tiny request to the server per collector run.

``GET`` for health-style URLs (``/health``, ``/v1/models``); ``POST`` of a
one-token completion when a body is given (or the URL ends in
``/chat/completions`` or ``/completions``). An HTTP error status is a result
(recorded with its latency), not a failure of the collector; a timeout or a
refused connection is recorded with ``status`` null and the error.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

from collector.scrape import Fetch

READ_LIMIT = 1 << 20


def default_body(url: str, model: str | None) -> bytes | None:
    path = url.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        msg = {"messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    elif path.endswith("/completions"):
        msg = {"prompt": "ping", "max_tokens": 1}
    else:
        return None
    if model:
        msg["model"] = model
    return json.dumps(msg).encode()


def probe(
    url: str,
    now: dt.datetime,
    host: str,
    timeout: float = 10.0,
    body: bytes | None = None,
    model: str | None = None,
    deadline: float | None = None,
    fetch: Fetch | None = None,
) -> dict[str, Any]:
    """One request, over by ``timeout`` (or ``deadline``); a row for ``http_probes``. Never raises."""
    data = body if body is not None else default_body(url, model)
    headers = {"Content-Type": "application/json"} if data is not None else {}
    row: dict[str, Any] = {"ts": now, "host": host, "url": url, "status": None}
    t0 = time.perf_counter()
    end = time.monotonic() + timeout
    end = min(end, deadline) if deadline is not None else end
    got = (fetch or Fetch())(url, end, READ_LIMIT, data=data, headers=headers)
    if got.status is not None and (got.error is None or "too large" in got.error):
        row["status"] = got.status
        if got.status >= 400:
            row["error"] = f"HTTP {got.status} {got.reason}".rstrip()
    else:
        row["error"] = (got.error or "no answer")[:500]
    row["latency_s"] = round(time.perf_counter() - t0, 6)
    return row
