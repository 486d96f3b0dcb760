"""Times for the lines a log already held when the collector first read it.

While it watches a log, the collector stamps each line with the time it read it, within
a run of the line being written. The lines a log held before the collector first read
it (a server that ran for days before the collector was installed) were written
earlier, some of them days earlier: stamped at that first read, a two-day-old
out-of-memory error read as one at the install, and a week of KV-usage lines as one
instant. Those lines take the time they state (:func:`collector.logsig.line_time`): a
stamp with an offset as it says; a naive one in the zone the log's last line shows (the
file's last write, its mtime, against that line's stamp, to a quarter hour), else in
this machine's local zone. A line that states no time takes the time of the stamped
line before it (before any, the first stamped one's); one stating none at all keeps
the read time. No line is put after the read. Standard library only.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import IO, Any

from collector import logsig

QUARTER = 900  # seconds: zone offsets are whole quarter hours
# how far the last line's stamp may lie from the file's last write (a buffered writer
# flushes late) for the difference to name a zone
SLACK_S = 420
MAX_OFFSET_S = 14 * 3600
TAIL_BYTES = 16 << 10  # of the file, for its last stamped line
_PLUS_ONE = dt.timezone(dt.timedelta(hours=1))


def stated(text: str) -> tuple[dt.datetime, bool] | None:
    """The time a line states, its naive stamp read as UTC, and whether it gave its own
    offset; None where it states none."""
    t = logsig.line_time(text)
    if t is None:
        return None
    return t, logsig.line_time(text, tz=_PLUS_ONE) == t  # an offset: the zone changed nothing


def zone_of(f: IO[bytes], size: int, mtime: float) -> dt.tzinfo | None:
    """The zone of the log's naive stamps, from its last line that states one and the
    file's last write; None where it cannot be told."""
    f.seek(max(0, size - TAIL_BYTES))
    tail = f.read(TAIL_BYTES).decode("utf-8", errors="replace")
    for line in reversed(tail.splitlines()[1:] if size > TAIL_BYTES else tail.splitlines()):
        got = stated(logsig.plain(line))
        if got is None:
            continue
        t, aware = got
        if aware:
            return None  # the log gives offsets: its last line tells no zone
        delta = t.timestamp() - mtime  # the wall clock ahead of UTC by the offset
        k = round(delta / QUARTER)
        if abs(delta - k * QUARTER) > SLACK_S or abs(k * QUARTER) > MAX_OFFSET_S:
            return None
        return dt.timezone(dt.timedelta(seconds=k * QUARTER))
    return None


def backdate(rows: list[dict[str, Any]], f: IO[bytes], now: dt.datetime) -> None:
    """Give ``rows`` (a log's lines read from its start, at its first read) the times
    they state, as the module says."""
    if not rows:
        return
    st = os.fstat(f.fileno())
    zone = zone_of(f, st.st_size, st.st_mtime) or dt.datetime.now().astimezone().tzinfo
    times: list[dt.datetime | None] = []
    for r in rows:
        got = stated(r["text"])
        if got is None:
            times.append(None)
            continue
        t, aware = got
        if not aware:
            t = t.replace(tzinfo=zone).astimezone(dt.UTC) if zone else t
        times.append(min(t, now))
    known = [t for t in times if t is not None]
    if not known:
        return
    last = known[0]
    for r, when in zip(rows, times, strict=True):
        if when is not None:
            last = when
        r["ts"] = last
