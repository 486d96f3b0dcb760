"""Import a whole past server log (``leakcollect import server-log``): the lines the
analyzer reads, each with the time it was written.

A line's time is its own stamp (:func:`collector.logsig.line_stamp`), else the last one
before it. SGLang's older prefix ``[HH:MM:SS TP0]`` has no date: such stamps are dated
back from the file's last write, one day further back at each midnight the file crosses
(a time more than an hour before the one before it). vLLM's ``MM-DD`` has no year: the
given ``--year`` is the first line's, else the last line's is the mtime's; a year
passes at each New Year the log crosses. Standard library only.
"""

from __future__ import annotations

import calendar
import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

from collector import logsig
from collector.importers import zone

# [HH:MM:SS TP0], [HH:MM:SS DP0 TP1 EP0], [HH:MM:SS]: the stamp alone, no date
_TIME_ONLY = re.compile(r"\[(\d\d):(\d\d):(\d\d)(?:[.,]\d+)?(?: [A-Z]+\d+)*\]")
# a step back in the time of day larger than this crossed a midnight (a quiet night
# between two lines is a step back of hours); smaller ones are ranks printing out of order
MIDNIGHT_JUMP = dt.timedelta(hours=1)
MTIME_SLACK = dt.timedelta(minutes=5)  # a last stamp this far past the file's mtime: same day


def time_of_day(text: str) -> dt.time | None:
    """The time of a stamp that carries no date, at the start of the line."""
    m = _TIME_ONLY.match(text)
    if not m:
        return None
    h, mi, s = (int(g) for g in m.groups())
    return dt.time(h, mi, s) if h < 24 and mi < 60 and s < 60 else None


class _Dates:
    """Date-less stamps in file order: each gets the count of midnights crossed before it;
    once the last is known, the file's mtime dates them all."""

    def __init__(self) -> None:
        self.crossed = 0
        self.prev: dt.time | None = None

    def add(self, tod: dt.time) -> tuple[int, dt.time]:
        if self.prev is not None and _secs(self.prev) - _secs(tod) > MIDNIGHT_JUMP.seconds:
            self.crossed += 1
        self.prev = tod
        return self.crossed, tod

    def resolve(self, stamp: tuple[int, dt.time], mtime: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
        assert self.prev is not None
        local = mtime.astimezone(tz)
        last_day = local.date()
        end = dt.datetime.combine(last_day, self.prev, tz)
        if end - local > MTIME_SLACK:  # written before midnight, the file touched after it
            last_day -= dt.timedelta(days=1)
        day = last_day - dt.timedelta(days=self.crossed - stamp[0])
        when = dt.datetime.combine(day, stamp[1], tz)
        while when - local > MTIME_SLACK:  # never after the file's last write
            when -= dt.timedelta(days=1)
        return when.astimezone(dt.UTC)


class _Years:
    """``MM-DD`` stamps in file order (vLLM's): each gets the count of New Years crossed
    before it (the month going from October or later to March or earlier); a given year
    is the first line's, else the file's mtime dates the last line (the year before, when
    that day is later in the year than the mtime). No line is put after the mtime."""

    def __init__(self) -> None:
        self.crossed = 0
        self.prev: tuple[int, int, dt.time] | None = None

    def add(self, md: tuple[int, int, dt.time]) -> tuple[int, tuple[int, int, dt.time]]:
        if self.prev is not None and self.prev[0] >= 10 and md[0] <= 3:
            self.crossed += 1
        self.prev = md
        return self.crossed, md

    def resolve(
        self,
        stamp: tuple[int, tuple[int, int, dt.time]],
        year: int | None,
        mtime: dt.datetime,
        tz: dt.tzinfo,
    ) -> dt.datetime:
        crossed, md = stamp
        local = mtime.astimezone(tz)
        if year is not None:
            y = year + crossed
        else:
            assert self.prev is not None
            y_last = local.year
            if _when(y_last, self.prev, tz) - local > MTIME_SLACK:
                y_last -= 1
            y = y_last - (self.crossed - crossed)
        while _when(y, md, tz) - local > MTIME_SLACK:  # never after the file's last write
            y -= 1
        return _when(y, md, tz).astimezone(dt.UTC)


def _when(year: int, md: tuple[int, int, dt.time], tz: dt.tzinfo) -> dt.datetime:
    month, day = md[0], md[1]
    if (month, day) == (2, 29) and not calendar.isleap(year):
        day = 28  # a stamp of 02-29 dated into a common year: the nearest day
    return dt.datetime.combine(dt.date(year, month, day), md[2], tz)


# a step back further than this, to a wall time the zone shows twice, is the hour a clock
# is set back; smaller ones are ranks printing out of order
FOLD_STEP = dt.timedelta(minutes=5)


def _second_pass(when: dt.datetime, latest: dt.datetime | None, tz: dt.tzinfo) -> dt.datetime:
    """``when`` (UTC, a naive stamp read as the first of a wall time the zone shows twice),
    or the second, where it reads earlier than a line before it: the log went on through
    the hour a daylight-saving clock is set back, and wrote that hour's times again."""
    if latest is None or latest - when <= FOLD_STEP:
        return when
    alt = when.astimezone(tz).replace(fold=1).astimezone(dt.UTC)
    return alt if alt > when and alt >= latest - FOLD_STEP else when


def _secs(t: dt.time) -> int:
    return t.hour * 3600 + t.minute * 60 + t.second


def server_log(
    path: str | os.PathLike[str],
    host: str,
    *,
    year: int | None = None,
    tz: str | dt.tzinfo | None = None,
) -> list[dict[str, Any]]:
    """Lines of a whole server log that match a signature, each with its own time
    (read in ``tz``; a line without one takes the previous line's)."""
    zone_ = zone(tz)
    p = Path(path)
    mtime = dt.datetime.fromtimestamp(p.stat().st_mtime, dt.UTC)
    inode = p.stat().st_ino
    matcher = logsig.Matcher()  # keeps the lines that continue a kept one
    dates, years = _Dates(), _Years()
    rows: list[dict[str, Any]] = []
    offset, last = 0, None  # last: the time of the last stamped line (or its date-less form)
    latest: dt.datetime | None = None  # the latest full stamp so far
    with logsig.open_log(p) as f:
        for raw in f:
            text = raw[: logsig.MAX_LINE_BYTES].decode("utf-8", errors="replace").rstrip("\r\n")
            text = logsig.plain(text)
            when: Any = logsig.line_stamp(text, zone_)
            if isinstance(when, tuple):  # MM-DD: its year comes once the file is read
                when = ("y", years.add(when))
            elif when is None and (tod := time_of_day(text)) is not None:
                when = ("d", dates.add(tod))
            elif when is not None:
                when = _second_pass(when, latest, zone_)
                latest = max(latest or when, when)
            last = when or last
            sig = matcher.match(text)
            if sig is not None:
                rows.append(
                    {
                        "ts": last,
                        "host": host,
                        "file": str(p),
                        "inode": inode,
                        "offset": offset,
                        "text": text,
                        "signature": sig,
                        "truncated": len(raw) > logsig.MAX_LINE_BYTES,
                    }
                )
            offset += len(raw)
    for r in rows:
        ts = r["ts"]
        if ts is None:
            r["ts"] = mtime
        elif isinstance(ts, tuple) and ts[0] == "y":
            r["ts"] = years.resolve(ts[1], year, mtime, zone_)
        elif isinstance(ts, tuple):
            r["ts"] = dates.resolve(ts[1], mtime, zone_)
    return rows
