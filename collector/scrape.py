"""Scrape Prometheus /metrics endpoints with a short timeout; each fails alone."""

from __future__ import annotations

import datetime as dt
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from collector import metrics

MAX_BYTES = 32 << 20


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
) -> ScrapeResult:
    res = ScrapeResult(url)
    try:
        req = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - operator-given URL
            body = r.read(MAX_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as e:
        res.error = f"{url}: {getattr(e, 'reason', e)}"
        return res
    if len(body) > MAX_BYTES:
        res.error = f"{url}: response larger than {MAX_BYTES} bytes"
        return res
    parsed = metrics.parse(body.decode("utf-8", errors="replace"), prefixes)
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
    if not res.rows and parsed.skipped_lines:
        res.error = f"{url}: no readable samples ({parsed.skipped_lines} lines skipped)"
    return res
