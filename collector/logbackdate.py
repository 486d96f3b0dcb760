"""Times for the lines a log already held when the collector first read it.

While it watches a log, the collector stamps each line with the time it read it, within
a run of the line being written. The lines a log held before the collector first read
it (a server that ran for days before the collector was installed) were written
earlier, some of them days earlier: stamped at the read, a two-day-old out-of-memory
error read as one at the install, and a week of KV-usage lines as one instant. Those
lines (up to the log's size at its first read, kept in the cursor until read, however
many runs that takes) take the time they state (:func:`collector.logsig.line_time`): a
stamp with an offset as it says; a naive one in the zone the log's last line shows (the
file's last write, its mtime, against that line's stamp, to a quarter hour), else in
this machine's local zone. A line that states no time takes the time of the stamped
line before it (before any, the read's). No line is put after the read. Standard
library only.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import IO

from collector import logsig

QUARTER = 900  # seconds: zone offsets are whole quarter hours
# how far the last line's stamp may lie from the file's last write (a buffered writer
# flushes late) for the difference to name a zone
SLACK_S = 420
MAX_OFFSET_S = 14 * 3600
TAIL_BYTES = 16 << 10  # of the file, for its last stamped line


def zone_of(f: IO[bytes]) -> dt.tzinfo | None:
    """The zone of the log's naive stamps, from its last line that states one and the
    file's last write; None where it cannot be told. Leaves the file's position alone."""
    st = os.fstat(f.fileno())
    here = f.tell()
    try:
        f.seek(max(0, st.st_size - TAIL_BYTES))
        tail = f.read(TAIL_BYTES).decode("utf-8", errors="replace").splitlines()
    finally:
        f.seek(here)
    for line in reversed(tail[1:] if st.st_size > TAIL_BYTES else tail):
        got = logsig.line_time_stated(logsig.plain(line))
        if got is None:
            continue
        t, aware = got
        if aware:
            return None  # the log gives offsets: its last line tells no zone
        delta = t.timestamp() - st.st_mtime  # the wall clock ahead of UTC by the offset
        k = round(delta / QUARTER)
        if abs(delta - k * QUARTER) > SLACK_S or abs(k * QUARTER) > MAX_OFFSET_S:
            return None
        return dt.timezone(dt.timedelta(seconds=k * QUARTER))
    return None


class Backlog:
    """The stamps of one file's lines before offset ``end``, read in order."""

    def __init__(self, f: IO[bytes], end: int, now: dt.datetime) -> None:
        self.end, self.now = end, now
        self.zone = zone_of(f) or dt.datetime.now().astimezone().tzinfo
        self.last: dt.datetime | None = None  # the last stated time

    def ts(self, text: str) -> dt.datetime:
        """The time of a kept line of the backlog."""
        got = logsig.line_time_stated(text)
        if got is not None:
            t, aware = got
            if not aware and self.zone is not None:
                t = t.replace(tzinfo=self.zone).astimezone(dt.UTC)
            self.last = min(t, self.now)
        return self.last or self.now
