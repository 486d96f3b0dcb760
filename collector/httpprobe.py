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
import urllib.error
import urllib.request
from typing import Any

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
) -> dict[str, Any]:
    """One request; a row for the ``http_probes`` table. Never raises."""
    data = body if body is not None else default_body(url, model)
    headers = {"Content-Type": "application/json"} if data is not None else {}
    row: dict[str, Any] = {"ts": now, "host": host, "url": url, "status": None}
    t0 = time.perf_counter()
    try:
        req = urllib.request.Request(url, data=data, headers=headers)
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - operator-given URL
            r.read(READ_LIMIT)
            row["status"] = int(r.status)
    except urllib.error.HTTPError as e:
        row["status"] = int(e.code)
        row["error"] = f"HTTP {e.code} {e.reason}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        row["error"] = str(getattr(e, "reason", e))[:500] or type(e).__name__
    row["latency_s"] = round(time.perf_counter() - t0, 6)
    return row
