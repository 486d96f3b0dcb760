"""Parse Prometheus exposition text into metric samples, tolerantly.

Uses prometheus_client's maintained parser. A scrape with a broken line is
not thrown away: the text is re-parsed family by family, then line by line,
and only what cannot be read is skipped (and counted).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

ENGINE_PREFIXES = ("sglang:", "sglang_", "vllm:")
DEFAULT_PREFIXES = (*ENGINE_PREFIXES, "process_")


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class ParseResult:
    samples: list[Sample]
    skipped_lines: int
    timed_out: bool = False  # the deadline came during the line-by-line retry
    left_out: int = 0  # readable samples whose names no prefix kept


def _parse_strict(text: str) -> list[Sample]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append(Sample(s.name, dict(s.labels), float(s.value)))
    return out


_FAMILY_START = re.compile(r"^# (?:HELP|TYPE) ")
_NAME = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", re.M)


def _blocks(lines: list[str]) -> Iterable[list[str]]:
    block: list[str] = []
    last_help_type: str | None = None
    for line in lines:
        if _FAMILY_START.match(line):
            parts = line.split(None, 3)
            name = parts[2] if len(parts) > 2 else ""
            if block and name != last_help_type:
                yield block
                block = []
            last_help_type = name
        block.append(line)
    if block:
        yield block


def parse(
    text: str, prefixes: Iterable[str] | None = DEFAULT_PREFIXES, deadline: float | None = None
) -> ParseResult:
    """Samples whose name starts with one of ``prefixes`` (all when None).

    The retry of a broken page family by family and line by line stops at
    ``deadline`` (``time.monotonic()``): a page of garbage cannot hold a run.
    """
    keep = tuple(prefixes) if prefixes is not None else None
    skipped = 0
    timed_out = False
    try:
        samples = _parse_strict(text)
    except Exception:
        samples = []
        for block in _blocks(text.splitlines()):
            if deadline is not None and time.monotonic() > deadline:
                timed_out = True
                break
            try:
                samples.extend(_parse_strict("\n".join(block) + "\n"))
                continue
            except Exception:
                pass
            header = [ln for ln in block if ln.startswith("# TYPE ")]
            for line in block:
                if not line.strip() or line.startswith("#"):
                    continue
                if deadline is not None and time.monotonic() > deadline:
                    timed_out = True
                    break
                try:
                    samples.extend(_parse_strict("\n".join([*header, line]) + "\n"))
                except Exception:
                    try:
                        samples.extend(_parse_strict(line + "\n"))
                    except Exception:
                        skipped += 1
    # the parser appends "_total" to counter samples that lack it: keep names as scraped
    written = set(_NAME.findall(text))
    samples = [
        Sample(s.name[: -len("_total")], s.labels, s.value)
        if s.name not in written
        and s.name.endswith("_total")
        and s.name[: -len("_total")] in written
        else s
        for s in samples
    ]
    seen = len(samples)
    if keep is not None:
        samples = [s for s in samples if s.name.startswith(keep)]
    return ParseResult(samples, skipped, timed_out, seen - len(samples))
