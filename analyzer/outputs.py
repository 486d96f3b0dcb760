"""Machine outputs of a findings document: Markdown for chat/tickets, and
Prometheus textfile-collector metrics for node_exporter (written atomically)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path

from analyzer.categories import CATEGORIES, SEVERITIES
from analyzer.findings import Finding, FindingsDocument
from analyzer.progress import plural
from collector.atomic import write_atomic as _write_atomic

PREFIX = "leakreport"


def markdown(doc: FindingsDocument, limit: int = 20) -> str:
    counts = {s: sum(1 for f in doc.findings if f.severity == s) for s in reversed(SEVERITIES)}
    head = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no findings"
    lines = [
        f"**leakreport**: {head} over {plural(len(doc.hosts), 'host')} ({data_span(doc, 'to')})",
        "",
    ]
    for f in doc.findings[:limit]:
        where = f.host + (f" GPU {f.gpu}" if f.gpu is not None else "")
        lines.append(
            f"- **{f.severity}** `{f.rule_id}` {CATEGORIES[f.category]} on {where}: {f.summary}"
        )
        remedy = first_remedy(f.remediation)
        if remedy:
            lines.append(f"  - what to do: {remedy}")
    if len(doc.findings) > limit:
        lines.append(f"- ... and {len(doc.findings) - limit} more")
    reasons = doc.incomplete_reasons()
    if reasons:
        lines += ["", "**Not checked** (the analysis is incomplete):"]
        lines += [f"- {r}" for r in reasons]
    return "\n".join(lines) + "\n"


def data_span(doc: FindingsDocument, sep: str, none: str = "no GPU memory samples") -> str:
    """The span the device samples cover, or ``none`` where there were none (logs or
    allocator-probe samples alone)."""
    if not (doc.run.data_start or doc.run.data_end):
        return none
    return f"{doc.run.data_start or '?'} {sep} {doc.run.data_end or '?'}"


def first_remedy(remediation: str) -> str:
    """The first remedy of a rule's remediation text, on one line."""
    text = " ".join(remediation.split())
    if not text:
        return ""
    # remediations list options as "A: ... B: ..." or as sentences; keep the first one
    m = re.split(r"\s(?=B[.:)]\s)", text, maxsplit=1)
    first = m[0]
    if len(first) > 240:
        cut = first.find(". ", 0, 240)
        first = first[: cut + 1] if cut > 0 else first[:237] + "..."
    return first


def _label(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name: str, help_: str) -> list[str]:
    return [f"# HELP {PREFIX}_{name} {help_}", f"# TYPE {PREFIX}_{name} gauge"]


def _per_gpu(
    doc: FindingsDocument, name: str, help_: str, value: Callable[[Finding], float | None]
) -> list[str]:
    out = _family(name, help_)
    for f in doc.findings:
        v = value(f)
        if v is not None:
            out.append(f'{PREFIX}_{name}{{host="{_label(f.host)}",gpu="{f.gpu}"}} {v:.0f}')
    return out


def _number(f: Finding, key: str, when: bool, scale: float) -> float | None:
    v = f.evidence.get(key)
    return v * scale if when and isinstance(v, (int, float)) and not isinstance(v, bool) else None


def textfile(doc: FindingsDocument, now: dt.datetime | None = None) -> str:
    """Prometheus exposition text: when the analysis ran and whether it was complete, then
    per host/GPU leak rate and time to OOM, findings by severity."""
    stamp = (now or dt.datetime.now(dt.UTC)).timestamp()
    out = _family(
        "last_run_timestamp_seconds",
        "When this analysis finished (alert when it gets old: the cron job stopped).",
    )
    out.append(f"{PREFIX}_last_run_timestamp_seconds {stamp:.0f}")
    out += _family(
        "last_run_success",
        "1 when the last analysis checked everything in scope, 0 when it was incomplete.",
    )
    out.append(f"{PREFIX}_last_run_success {0 if doc.incomplete_reasons() else 1}")
    out += _family("findings", "Findings of the last analysis by host, severity and category.")
    per: dict[tuple[str, str, str], int] = {}
    for f in doc.findings:
        key = (f.host, f.severity, f.category)
        per[key] = per.get(key, 0) + 1
    for (host, sev, cat), n in sorted(per.items()):
        out.append(
            f'{PREFIX}_findings{{host="{_label(host)}",severity="{sev}",category="{cat}"}} {n}'
        )
    out += _per_gpu(
        doc,
        "leak_rate_bytes_per_hour",
        "GPU memory leak rate across idle windows.",
        lambda f: _number(f, "rate_mib_per_h", f.rule_id == "GM001", 2**20),
    )
    out += _per_gpu(
        doc,
        "time_to_oom_seconds",
        "Forecast time until the GPU runs out of memory.",
        lambda f: _number(f, "hours_to_oom", f.category == "oom.forecast", 3600),
    )
    out += _family("rules", "Rules of the last analysis by status.")
    for status in ("fired", "clean", "skipped", "errored"):
        out.append(
            f'{PREFIX}_rules{{status="{status}"}} {sum(1 for r in doc.run.rules if r.status == status)}'
        )
    return "\n".join(out) + "\n"


def check_textfile_name(path: str | Path) -> None:
    """Raise ValueError unless ``path`` is a *.prom file (node_exporter ignores others)."""
    if not re.search(r"\.prom$", Path(path).name):
        raise ValueError(f"{path}: node_exporter's textfile collector reads only *.prom files")


def write_atomic(path: str | Path, text: str) -> Path:
    """Write a textfile-collector file (*.prom only: node_exporter ignores other names)."""
    check_textfile_name(path)
    return _write_atomic(Path(path), text)
