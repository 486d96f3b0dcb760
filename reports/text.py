"""Words and numbers for the report: values with units, first remedies, merged log lines."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from analyzer.findings import Event

MAX_LOG_LINES = 20


@dataclass
class LogLine:
    ts: str
    kind: str
    text: str
    count: int = 1
    last_ts: str = ""


def _human_bytes(v: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= size:
            return f"{v / size:,.2f} {unit}"
    return f"{v:,.0f} B"


def format_value(key: str, v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple)):
        return ", ".join(format_value(key, x) for x in v) or "—"
    if isinstance(v, (int, float)):
        if key == "pid" or key.endswith(("_pid", "pids")):
            return str(v)  # an id, not a quantity: no thousands separator
        if key.endswith("_bytes"):
            return _human_bytes(float(v))
        if key.endswith("_mib"):
            return f"{v:,.0f} MiB"
        if "_mib_per_h" in key:  # rate_mib_per_h, rate_mib_per_h_before, ...
            return f"{v:,.1f} MiB/h"
        if key.endswith("_pct"):
            return f"{v:.1f} %"
        if key.startswith("hours") or key.endswith("_h"):
            return f"{v:,.2f} h"
        if isinstance(v, float):
            return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
        return f"{v:,}"
    return str(v)


def _label(key: str) -> str:
    return key.replace("_", " ").replace(" mib", "").replace(" pct", "").replace(" bytes", "")


_OPTION = re.compile(r"^([A-Z])\.\s")
_ACTION = re.compile(
    r"\b(restart|upgrade|set|lower|reuse|disable|no action|take|check|keep|look|plan|pin)",
    re.I,
)


def options(text: str) -> list[str]:
    """Remedies listed as 'A. ...', 'B. ...' (each with its cost), one string each."""
    out: list[str] = []
    for line in text.splitlines():
        if _OPTION.match(line.strip()):
            out.append(line.strip())
        elif out and line.strip():
            out[-1] += " " + line.strip()
    return out if len(out) >= 2 else []


def first_remedy(text: str, limit: int = 110) -> str:
    """The first thing to do, short: option A where options are listed, else the first
    clause that starts with an action ("restart ...", "upgrade ...") and what follows it
    up to about 25 characters; else the first sentence naming an action."""
    opts = options(text)
    if opts:
        return opts[0].split(":")[0]
    flat = " ".join(text.split())
    sentences = re.split(r"(?<=[.!?])\s+", flat)
    for sentence in sentences:
        clauses = re.split(r"(?<=[,;:])\s+", sentence)
        for i, clause in enumerate(clauses):
            if not _ACTION.match(clause.lstrip("-")):
                continue
            out = clause
            for more in clauses[i + 1 :]:
                if len(out.rstrip(",;:")) >= 25:
                    break
                out += " " + more
            out = out.rstrip(",;:")
            if out.count("(") > out.count(")"):  # never end inside a parenthesis
                out = out[: out.rindex("(")].rstrip()
            return _cut(out[:1].upper() + out[1:], limit)
    s = next((x for x in sentences if _ACTION.search(x)), sentences[0] if sentences else "")
    return _cut(s, limit)


def _cut(s: str, limit: int) -> str:
    return s if len(s) <= limit else s[: limit - 1].rsplit(" ", 1)[0] + " …"


def _merged_logs(events: list[Event]) -> list[LogLine]:
    """The newest lines, identical ones (timestamps and numbers aside) merged with a count."""
    out: list[LogLine] = []
    last: dict[tuple[str, str], LogLine] = {}
    for e in events:
        sig = (e.kind, re.sub(r"\d+", "#", re.sub(r"^\[[^\]]*\]\s*", "", e.text)))
        if sig in last:
            ll = last[sig]
            ll.count += 1
            ll.last_ts = e.ts
            continue
        last[sig] = LogLine(e.ts, e.kind, e.text)
        out.append(last[sig])
    return out[-MAX_LOG_LINES:]
