"""The log signature catalogue: which server log lines the collector keeps.

The collector stores facts; this module only tags a line with the first
signature it matches (cheap, no parsing). Interpretation of the fields happens
in the analyzer, so old traces benefit from new parsers. A record that a
terminal or a shipper wrapped over several lines is kept whole: :class:`Matcher`
also keeps the lines that continue a kept line (signature ``continuation``).

:func:`line_time` reads a line's own time with the analyzer's policy: the
engine's stamp wins over a shipper's stamp in front of it, offsets are honoured,
naive stamps are read in the given zone. Standard library only.
"""

from __future__ import annotations

import datetime as dt
import gzip
import re
from pathlib import Path
from typing import BinaryIO, cast

# Priority order: the first signature that matches names the line.
SIGNATURES: tuple[tuple[str, str], ...] = (
    (
        "kv_leak_check",
        r"(?i:pool\w* (?:mem(?:ory)? )?leak detected)|Warning: available_size=\d+, max_total_num_token",
    ),
    (
        "oom",
        r"(?i:out of memory|OutOfMemoryError|cuda runtime error \(2\))|Tried to allocate [\d.]+ ?\w+ \(GPU \d+;",
    ),
    (
        "server_args",
        r"ServerArgs\(|non-default args: \{|\bargs: Namespace\(|LLM engine (?:\(v[^)]*\) )?with config:",
    ),
    (
        "engine_version",
        r"API server version|vLLM server version|LLM engine \(v\d|vLLM version|█ +version \d|sglang==\d|(?i:sglang version)",
    ),
    (
        "image_processor",
        r"fast (?:image )?processor|slow (?:image )?processor|use_fast=|disable.fast.image.processor",
    ),
    ("batch_stats", r"(?:Prefill|Decode) batch[.,]|new fill batch|Avg prompt throughput:"),
    (
        "kv_capacity",
        r"KV Cache is allocated|max_total_num_tokens=|(?:GPU|cuda|npu|xpu|hpu) blocks:|kv_cache_size="
        r"|KV cache (?:memory|size)|kv cache memory in use|full_layer_tokens=|Maximum concurrency for|reserved for KV Cache"
        r"|stored in KV cache \(",
    ),
    (
        "memory_info",
        r"[Aa]vail mem=|mem usage=|Memory profiling|Loading model weights took|Model loading took",
    ),
    ("traceback", r"Traceback \(most recent call last\)"),
    (
        "restart",
        r"SIGQUIT received|Started server process|Uvicorn running on|The server is fired up|Application startup complete|Killed process",
    ),
)

_COMPILED = tuple((name, re.compile(rx)) for name, rx in SIGNATURES)
_ANY = re.compile("|".join(f"(?:{rx})" for _, rx in SIGNATURES))

MAX_LINE_BYTES = 64 * 1024

# Lines that may continue the line before them: not a new record (no stamp, prefix,
# indentation, exception name or traceback header). Kept after these signatures only.
_NEW_RECORD = re.compile(
    r"^(?:\[|\(|\{|#|\d{4}-\d\d-\d\d|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b|Traceback"
    r"|[\w.]*(?:Error|Exception|Warning|Interrupt)\b|[\w.-]+ +\| "
    # an indented line continues unless it is traceback or source (or a prefixed record)
    r"|\s+(?:[\[({]|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b|\d|File \"|[\^~]|\S*\.py\b|.*[(=,]\s*$))"
)
_CONTINUED = {"kv_leak_check", "oom", "server_args", "kv_capacity", "batch_stats"}
MAX_CONTINUATION = 5


# a terminal's colour and cursor codes (CSI sequences), as a coloured logger writes them
ANSI = r"\x1b\[[0-?]*[ -/]*[@-~]"
_ANSI = re.compile(ANSI)


def plain(text: str) -> str:
    """The line without terminal colour codes (vLLM colours its level and its stamp) and
    without leading NULs: the hole a copytruncate leaves before a server's next line
    when it writes its log without O_APPEND (``server > log``)."""
    text = text.lstrip("\0")
    return _ANSI.sub("", text) if "\x1b" in text else text


GZIP_MAGIC = b"\x1f\x8b"


def open_log(path: str | Path) -> BinaryIO:
    """A saved log for reading, gzip-compressed (a rotated ``server.log.1.gz``) or not.
    Opened once and its first bytes peeked at, so a pipe (``/dev/stdin``) loses nothing."""
    raw = open(path, "rb")  # noqa: SIM115 - the caller's to close
    if raw.peek(2)[:2] != GZIP_MAGIC:
        return raw
    packed = gzip.GzipFile(fileobj=raw, mode="rb")
    packed.myfileobj = raw  # type: ignore[assignment]  # closed with it, as gzip.open does
    return cast(BinaryIO, packed)


# a request log line (user text; never stored): the analyzer's REQUEST_LINE
_REQUEST = re.compile(
    r"\b(?:Receive|Finish): obj=\w+\(|\bReceived request \S+: |\bGenerated response \S+: "
)
REQUEST_HEAD = 400


def match(line: str) -> str | None:
    """The name of the first signature the line matches, or None (also for a request
    log line, which quotes users' text)."""
    if not _ANY.search(line) or _REQUEST.search(line, 0, REQUEST_HEAD):
        return None
    for name, rx in _COMPILED:
        if rx.search(line):
            return name
    return None  # pragma: no cover - _ANY matched, so one of them does


_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]")  # not \t \n \r \f \v ESC


def _text(line: str) -> bool:
    """Is the line text, as a message's continuation is? Bytes that decode to control
    characters (a core dump, a binary pasted into the log, the zeros of a preallocated
    file), or mostly to replacement marks, are none; a few marks are text in another
    encoding (Latin-1 accents) or a character torn at a cut."""
    head = line[:4096]
    marks = head.count("\ufffd")
    return len(_CONTROL.findall(head)) <= 2 and (marks <= 2 or marks <= len(head) // 3)


class Matcher:
    """:func:`match` for one file read in order, which also tags the (at most three)
    lines that continue a kept event line as ``continuation``."""

    def __init__(self) -> None:
        self._open = 0

    def match(self, line: str) -> str | None:
        sig = match(line)
        if sig is not None:
            self._open = MAX_CONTINUATION if sig in _CONTINUED else 0
            return sig
        if self._open and line and not _NEW_RECORD.match(line) and _text(line):
            self._open -= 1
            return "continuation"
        self._open = 0
        return None


# --- the line's own time ---------------------------------------------------------

_OUTER = re.compile(
    r"^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,]\d+)?(Z|[+-]\d\d:?\d\d)?"
    r"(?: +(?:stdout|stderr) [FP])?(?: +\|)? "
)
_FULL = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,]\d+)?(?: ?(Z|[+-]\d\d:?\d\d)\b)?")
_MONTH_DAY = re.compile(r"\b(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d)-(\d\d) (\d\d:\d\d:\d\d)")


def _offset(text: str | None, tz: dt.tzinfo) -> dt.tzinfo:
    if not text:
        return tz
    if text == "Z":
        return dt.UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return dt.timezone(sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4])))


def _stamps(text: str) -> tuple[re.Match[str] | None, re.Match[str] | None, re.Match[str] | None]:
    """A line's shipper stamp at its start, the engine's full stamp after it, else its
    ``MM-DD`` one: one pass of the three patterns over the line's head."""
    head = text[:200]
    outer = _OUTER.match(head)
    rest = head[outer.end() :] if outer else head
    full = _FULL.search(rest)
    return outer, full, None if full else _MONTH_DAY.search(rest)


def line_time(
    text: str,
    year: int | None = None,
    tz: dt.tzinfo = dt.UTC,
    *,
    fallback_year: int | None = None,
) -> dt.datetime | None:
    """The time a server log line states, as UTC; None when it states none.

    The engine's own stamp wins over a shipper's stamp at the start of the line
    (docker ``--timestamps``, CRI, a viewer's ``date | ``), which lends its year to
    vLLM's ``MM-DD``; a stamp with an offset is read with it, a naive one in ``tz``.
    ``year`` (given by a person) wins for ``MM-DD`` stamps; ``fallback_year`` (a file's
    mtime, say) is used only when neither it nor a dated prefix gives one."""
    return _time(*_stamps(text), year or fallback_year, tz, year is not None)


_PLUS_ONE = dt.timezone(dt.timedelta(hours=1))  # any zone but UTC


def line_time_stated(text: str) -> tuple[dt.datetime, bool] | None:
    """:func:`line_time` of a naive stamp read as UTC, and whether the stamp gave its own
    offset (one pass of the patterns); None where the line states no time."""
    stamps = _stamps(text)
    t = _time(*stamps, None, dt.UTC, False)
    if t is None:
        return None
    return t, _time(*stamps, None, _PLUS_ONE, False) == t  # an offset: the zone changed nothing


def line_stamp(text: str, tz: dt.tzinfo = dt.UTC) -> dt.datetime | tuple[int, int, dt.time] | None:
    """:func:`line_time` with no year given, but for an engine's ``MM-DD`` stamp with no
    dated prefix to lend a year (vLLM's): then (month, day, time), for the caller to
    date; None where the line states no time (or not a real one)."""
    outer, full, md = _stamps(text)
    if md is None or outer is not None:
        return _time(outer, full, md, None, tz, False)
    try:
        dt.date(2000, int(md.group(1)), int(md.group(2)))  # a leap year: 02-29 passes
        return int(md.group(1)), int(md.group(2)), dt.time.fromisoformat(md.group(3))
    except ValueError:
        return None


def _time(
    outer: re.Match[str] | None,
    full: re.Match[str] | None,
    md: re.Match[str] | None,
    year: int | None,
    tz: dt.tzinfo,
    given: bool,
) -> dt.datetime | None:
    """The UTC time of :func:`_stamps`'s matches; ``year`` for ``MM-DD``, which a dated
    prefix's year overrides unless the year was ``given`` by a person."""
    try:
        if full:
            t = dt.datetime.fromisoformat(f"{full.group(1)}T{full.group(2)}")
            return t.replace(tzinfo=_offset(full.group(3), tz)).astimezone(dt.UTC)
        lent = int(outer.group(1)[:4]) if outer else None
        y = year if given else lent or year
        if md and y:
            t = dt.datetime.fromisoformat(f"{y}-{md.group(1)}-{md.group(2)}T{md.group(3)}")
            return t.replace(tzinfo=tz).astimezone(dt.UTC)
        if outer:
            t = dt.datetime.fromisoformat(f"{outer.group(1)}T{outer.group(2)}")
            return t.replace(tzinfo=_offset(outer.group(3), tz)).astimezone(dt.UTC)
    except ValueError:
        return None
    return None
