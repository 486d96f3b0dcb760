"""A line that is only a time, as a ``date; nvidia-smi ...`` loop writes one before each
sample: ``date`` in any common locale, or ``date -Is``. Read by the shape of each token
(weekday, month name, day, time, AM/PM, zone, year), not by its position, so the orders
locales use all read alike. Standard library only.
"""

from __future__ import annotations

import datetime as dt
import re

_MONTHS = {
    m: i
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1
    )
}
_WEEKDAYS = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"}
_ISO = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d(?::?\d\d)?)?")
_HMS = re.compile(r"(\d{1,2}):(\d\d):(\d\d)")
_OFFSET = re.compile(r"([+-])(\d\d):?(\d\d)")
UTC_NAMES = {"UTC", "GMT", "Z", "UCT"}


def date_line(line: str) -> tuple[dt.datetime, str | None] | None:
    """(the time a date line states, the zone name it carries when that is neither UTC nor
    an offset), or None when the line is not a date line. The time is naive where the
    line gives no UTC or offset: the caller reads it in its zone.

    >>> date_line("Tue Dec  1 10:00:00 PM UTC 2026")[0].isoformat()
    '2026-12-01T22:00:00+00:00'
    >>> date_line("Sun Oct 25 02:10:00 CET 2026")
    (datetime.datetime(2026, 10, 25, 2, 10), 'CET')
    >>> date_line("mar. 01 déc. 2026 10:00:00 CET") is None
    True
    """
    s = line.strip()
    if _ISO.fullmatch(s):
        try:
            when = dt.datetime.fromisoformat(s.replace("Z", "+00:00").replace(",", "."))
        except ValueError:
            return None
        return when, None
    toks = s.replace(",", " ").split()
    if not 4 <= len(toks) <= 8:
        return None
    month = day = year = None
    hms: tuple[int, int, int] | None = None
    half = name = None
    zone: dt.tzinfo | None = None
    for t in toks:
        low = t.lower().rstrip(".")
        if low[:3] in _MONTHS and low.isalpha() and month is None:
            month = _MONTHS[low[:3]]
        elif low[:3] in _WEEKDAYS and low.isalpha():
            continue
        elif m := _HMS.fullmatch(t):
            hms = (int(m[1]), int(m[2]), int(m[3]))
        elif t.upper() in ("AM", "PM"):
            half = t.upper()
        elif t.isdigit() and len(t) == 4:
            year = int(t)
        elif t.isdigit() and len(t) <= 2:
            day = int(t)
        elif m := _OFFSET.fullmatch(t):
            sign = -1 if m[1] == "-" else 1
            zone = dt.timezone(sign * dt.timedelta(hours=int(m[2]), minutes=int(m[3])))
        elif t.isalpha() and t.isupper() and len(t) <= 5:
            zone, name = (dt.UTC, None) if t in UTC_NAMES else (None, t)
        else:
            return None
    if month is None or day is None or year is None or hms is None:
        return None
    h, mi, sec = hms
    if half is not None:
        h = h % 12 + (12 if half == "PM" else 0)
    try:
        return dt.datetime(year, month, day, h, mi, sec, tzinfo=zone), name
    except ValueError:
        return None
