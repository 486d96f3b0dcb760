"""collector/logtail.py at its edges: the runaway-line cut, chunk boundaries, the byte
budget, generation labels, cursors saved by older versions (no fingerprint, ``prev``),
the watch list across rotations, and the copies read after a cursor on an empty file."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from pathlib import Path

from collector import logcursor, logtail
from collector.logtail import MAX_LINE, tail

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
LINE = "[2025-11-11 04:28:30] Decode batch, #running-req: {n}, #token: 1, token usage: 0.04, gen throughput (token/s): 1.0, #queue-req: 0"


def _lines(a: int, b: int) -> str:
    return "".join(LINE.format(n=n) + "\n" for n in range(a, b))


def _add(path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def _cur(res: logtail.TailResult) -> logcursor.Cursor:
    assert res.cursor is not None
    return res.cursor


def _rotated_once(tmp_path: Path) -> tuple[Path, logcursor.Cursor, logcursor.Cursor]:
    """server.log with line 0 read (cursor c1), renamed to server.log.1, line 1 written to
    a new server.log and read (cursor c2, watching the renamed file)."""
    log = tmp_path / "server.log"
    log.write_text(_lines(0, 1))
    c1 = _cur(tail(str(log), None, NOW, "h"))
    os.rename(log, tmp_path / "server.log.1")
    log.write_text(_lines(1, 2))
    return log, c1, _cur(tail(str(log), c1, NOW, "h"))


def _texts(res) -> list[str]:
    return [r["text"] for r in res.rows]


def _label(first: bytes) -> str:
    return hashlib.sha1(first, usedforsecurity=False).hexdigest()[:16]


def test_a_runaway_line_is_cut_past_four_times_the_limit(tmp_path) -> None:
    log = tmp_path / "server.log"
    before = (LINE.format(n=0) + "\n").encode()
    start = LINE.format(n=1).encode()
    log.write_bytes(before + start + b"z" * (4 * MAX_LINE - len(start)))  # 4 x: still waits
    res = tail(str(log), None, NOW, "h")
    assert res.lines == 1 and len(res.rows) == 1 and _cur(res)["offset"] == len(before)
    _add(log, "z")  # one byte more: cut here, kept as one truncated line
    res = tail(str(log), None, NOW, "h")
    size = log.stat().st_size
    assert res.lines == 2 and _cur(res)["offset"] == size
    row = res.rows[1]
    assert row["offset"] == len(before) and row["truncated"] is True
    assert row["inode"] == log.stat().st_ino
    assert row["text"] == (start + b"z" * (MAX_LINE - len(start))).decode()
    _add(log, "\n" + _lines(2, 3))  # the rest of it ends, then a new line
    more = tail(str(log), res.cursor, NOW, "h")
    assert more.lines == 2 and more.unmatched == 1
    assert [(r["offset"], r["text"]) for r in more.rows] == [(size + 1, LINE.format(n=2))]


def test_reading_goes_on_after_a_runaway_line_is_cut(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(logtail, "CHUNK", 4096)  # the cut comes in the middle of the line
    log = tmp_path / "server.log"
    body = LINE.format(n=1).encode() + b"z" * (4 * MAX_LINE + 10000) + b"\n"
    log.write_bytes((_lines(0, 1)).encode() + body + _lines(2, 3).encode())
    res = tail(str(log), None, NOW, "h")
    first = len(LINE.format(n=0)) + 1
    # the rest of the cut line is a line of its own (kept: it continues a kept one)
    assert res.lines == 4 and len(res.rows) == 4
    assert [(r["offset"], r["truncated"]) for r in res.rows[:2]] == [(0, False), (first, True)]
    rest = res.rows[2]
    assert set(rest["text"]) == {"z"} and rest["offset"] + len(rest["text"]) + 1 == first + len(
        body
    )
    assert (res.rows[3]["offset"], res.rows[3]["text"]) == (first + len(body), LINE.format(n=2))


def test_lines_across_read_chunks(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(logtail, "CHUNK", 50)  # every line spans two or three reads
    log = tmp_path / "server.log"
    log.write_text(_lines(0, 12))
    res = tail(str(log), None, NOW, "h")
    step = len(LINE.format(n=0)) + 1
    assert _texts(res) == [LINE.format(n=n) for n in range(10)] + [
        LINE.format(n=n) for n in (10, 11)
    ]
    assert [r["offset"] for r in res.rows[:10]] == [n * step for n in range(10)]
    assert _cur(res)["offset"] == log.stat().st_size and not res.stopped


def test_the_byte_budget_stops_at_a_line_and_resumes(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text(_lines(0, 10))
    step = len(LINE.format(n=0)) + 1
    res = tail(str(log), None, NOW, "h", max_bytes=3 * step + step // 2)
    assert res.stopped and _texts(res) == [LINE.format(n=n) for n in range(3)]
    assert _cur(res)["offset"] == 3 * step
    rest = tail(str(log), res.cursor, NOW, "h", max_bytes=7 * step + 1)  # all of it, and 1
    assert not rest.stopped and _texts(rest) == [LINE.format(n=n) for n in range(3, 10)]


def test_generation_labels_are_the_first_line_hash(tmp_path) -> None:
    labels: dict[str, int] = {}
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(_lines(0, 2))
    b.write_text(_lines(5, 6))
    ra = tail(str(a), None, NOW, "h", labels=labels)
    rb = tail(str(b), None, NOW, "h", labels=labels)
    assert labels == {
        _label((LINE.format(n=0) + "\n").encode()): a.stat().st_ino,
        _label((LINE.format(n=5) + "\n").encode()): b.stat().st_ino,
    }
    assert {r["inode"] for r in ra.rows} == {a.stat().st_ino}
    assert {r["inode"] for r in rb.rows} == {b.stat().st_ino}
    # a file that starts with an empty line: that line is its first
    c = tmp_path / "c.log"
    c.write_text("\n" + _lines(1, 2))
    (row,) = tail(str(c), None, NOW, "h", labels=labels).rows
    assert _label(b"\n") in labels
    fid = hashlib.sha1(b"\n", usedforsecurity=False).digest()
    raw = LINE.format(n=1).encode()
    want = hashlib.sha1(fid + (1).to_bytes(8, "little") + raw, usedforsecurity=False)
    assert row["line_id"] == want.hexdigest()[:24] and row["offset"] == 1
    # a first line still being written is no label yet; one past 4 KiB is labelled by those
    d = tmp_path / "d.log"
    d.write_text(LINE.format(n=1))
    n = len(labels)
    tail(str(d), None, NOW, "h", labels=labels)
    assert len(labels) == n
    e = tmp_path / "e.log"
    e.write_text("x" * 5000 + "\n" + _lines(1, 2))
    (row,) = tail(str(e), None, NOW, "h", labels=labels).rows
    head = b"x" * 4096
    assert labels[_label(head)] == e.stat().st_ino
    fid = hashlib.sha1(head, usedforsecurity=False).digest()
    want = hashlib.sha1(fid + (5001).to_bytes(8, "little") + raw, usedforsecurity=False)
    assert row["line_id"] == want.hexdigest()[:24]


def test_a_cursor_without_fingerprint_follows_two_renames(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text(_lines(0, 2))
    legacy = {"inode": log.stat().st_ino, "offset": log.stat().st_size}  # saved long ago
    _add(log, _lines(2, 3))
    os.rename(log, tmp_path / "server.log.2")
    log.write_text(_lines(3, 5))
    os.rename(log, tmp_path / "server.log.1")
    log.write_text(_lines(5, 6))
    res = tail(str(log), legacy, NOW, "h")
    assert _texts(res) == [LINE.format(n=n) for n in range(2, 6)] and res.notes == []
    assert [r["offset"] for r in res.rows] == [legacy["offset"], 0, len(LINE.format(n=3)) + 1, 0]
    # and a cursor with no offset at all starts its file from the beginning
    res = tail(str(log), {"inode": log.stat().st_ino}, NOW, "h")
    assert _texts(res) == [LINE.format(n=5)]


def test_an_old_file_read_to_its_end_is_found_and_needs_no_note(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text(_lines(0, 2))
    first = tail(str(log), None, NOW, "h")
    os.rename(log, tmp_path / "server.log.1")  # nothing written since the last read
    log.write_text(_lines(2, 3))
    res = tail(str(log), first.cursor, NOW, "h")
    assert _texts(res) == [LINE.format(n=2)] and res.notes == []
    assert [w["inode"] for w in _cur(res)["watch"]] == [(tmp_path / "server.log.1").stat().st_ino]


def test_watched_files_stay_watched_and_prev_cursors_still_work(tmp_path) -> None:
    log, _c1, c2 = _rotated_once(tmp_path)
    a, b = (tmp_path / "server.log.1").stat().st_ino, log.stat().st_ino
    assert [w["inode"] for w in c2["watch"]] == [a]
    # a cursor saved before "watch" named its one rotated file "prev"
    prev = {k: v for k, v in c2.items() if k != "watch"} | {"prev": c2["watch"][0]}
    _add(tmp_path / "server.log.1", _lines(7, 8))  # written late to the renamed file
    assert _texts(tail(str(log), prev, NOW, "h")) == [LINE.format(n=7)]
    # a second rotation: the first one is still watched beside the newly rotated file
    os.rename(tmp_path / "server.log.1", tmp_path / "server.log.2")
    os.rename(log, tmp_path / "server.log.1")
    log.write_text("")
    r3 = tail(str(log), c2, NOW, "h")
    assert _texts(r3) == [LINE.format(n=7)]
    c3 = _cur(r3)
    assert [w["inode"] for w in c3["watch"]] == [a, b] and c3["fp_len"] == 0
    # on an empty file: what is watched stays watched
    c4 = _cur(tail(str(log), c3, NOW, "h"))
    assert [w["inode"] for w in c4["watch"]] == [a, b]


def test_after_a_cursor_on_an_empty_file_only_newer_copies_are_read(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    cur = dict(_cur(tail(str(log), None, NOW, "h")))
    assert cur["fp_len"] == 0
    cur["t"] = 1000.0
    files = {  # name: (text, mtime)
        "server.log.1": (_lines(1, 3), 2000),  # a copy made since: read
        "server.log.2": (_lines(20, 21), 1000),  # as old as the cursor: not read
        "server.log.3": (_lines(30, 31), 500),  # older: not read
        "server.log.4": ("", 2000),  # empty: nothing, not watched
        "server.log.5": ("x", 2000),  # a partial line: nothing yet, watched
        "server.log.6": (_lines(60, 62), 2000),  # watched already: from its offset
    }
    for name, (text, mtime) in files.items():
        (tmp_path / name).write_text(text)
        os.utime(tmp_path / name, (mtime, mtime))
    six = tmp_path / "server.log.6"
    with open(six, "rb") as f:
        cur["watch"] = [logcursor.stamp(f, len(LINE.format(n=60)) + 1)]
    res = tail(str(log), cur, NOW, "h")
    assert _texts(res) == [LINE.format(n=n) for n in (61, 1, 2)]
    assert [r["offset"] for r in res.rows] == [
        len(LINE.format(n=60)) + 1,
        0,
        len(LINE.format(n=1)) + 1,
    ]
    ino = {n: (tmp_path / n).stat().st_ino for n in files}
    assert [w["inode"] for w in _cur(res)["watch"]] == [
        ino["server.log.6"],
        ino["server.log.5"],
        ino["server.log.1"],
    ]


def test_a_resumed_cursor_never_reads_rotated_files_by_their_time(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text(_lines(0, 1))
    cur = _cur(tail(str(log), None, NOW, "h"))
    other = tmp_path / "server.log.1"
    other.write_text(_lines(9, 10))
    future = NOW.timestamp() + 10 * 365 * 86400  # a clock that ran ahead
    os.utime(other, (future, future))
    _add(log, _lines(1, 2))
    assert _texts(tail(str(log), cur, NOW, "h")) == [LINE.format(n=1)]


def test_a_cursor_on_an_empty_file_never_takes_an_unrelated_file_for_its_copy(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    cur = _cur(tail(str(log), None, NOW, "h"))
    (tmp_path / "server.log.1").write_text(_lines(9, 10))  # older than the cursor, unrelated
    os.utime(tmp_path / "server.log.1", (1000, 1000))
    (tmp_path / "new").write_text(_lines(1, 2))
    os.rename(tmp_path / "new", log)  # replaced by another file (another inode)
    res = tail(str(log), cur, NOW, "h")
    assert _texts(res) == [LINE.format(n=1)]
    assert res.notes == [
        f"{log} was rotated and its old file (inode {cur['inode']}) is not among the rotated "
        "names: lines written after offset 0 may be missing"
    ]


def test_a_budget_spent_inside_a_rotated_file_resumes_in_that_file(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text(_lines(0, 1))
    cur = _cur(tail(str(log), None, NOW, "h"))
    _add(log, _lines(1, 20))
    os.rename(log, tmp_path / "server.log.1")
    log.write_text(_lines(20, 21))
    res = tail(str(log), cur, NOW, "h", max_bytes=1000)
    step = len(LINE.format(n=10)) + 1
    assert res.stopped and _texts(res) == [LINE.format(n=n) for n in range(1, 1 + 1000 // step)]
    assert _cur(res)["inode"] == (tmp_path / "server.log.1").stat().st_ino
    last = res.rows[-1]
    assert _cur(res)["offset"] == last["offset"] + len(last["text"]) + 1
    assert "watch" not in _cur(res)


def test_a_watched_file_that_is_gone_is_forgotten_even_if_a_copy_is_left(tmp_path) -> None:
    import shutil

    log, _c1, c2 = _rotated_once(tmp_path)
    assert len(c2["watch"]) == 1
    shutil.copy(tmp_path / "server.log.1", tmp_path / "server.log-copy")
    os.unlink(tmp_path / "server.log.1")
    _add(tmp_path / "server.log-copy", _lines(9, 10))  # not the file that was watched
    res = tail(str(log), c2, NOW, "h")
    assert res.rows == [] and "watch" not in _cur(res)


def test_a_truncation_during_the_read_keeps_the_rows_of_rotated_files(tmp_path, monkeypatch):
    """copytruncate lands while the live file is read, after a watched file gave rows."""
    log, _c1, c2 = _rotated_once(tmp_path)
    _add(tmp_path / "server.log.1", _lines(10, 11))  # late, to the renamed file
    _add(log, _lines(2, 4))
    real = logtail._Reader.read

    def read(self, f, start):  # type: ignore[no-untyped-def]
        if f.name == str(log) and not (tmp_path / "server.log-copy").exists():
            (tmp_path / "server.log-copy").write_bytes(log.read_bytes())
            with open(log, "r+") as w:
                w.truncate(0)
            _add(log, _lines(4, 9))
        return real(self, f, start)

    monkeypatch.setattr(logtail._Reader, "read", read)
    r3 = tail(str(log), c2, NOW, "h")
    assert _texts(r3) == [LINE.format(n=10)]  # what came from the live file is dropped
    assert _cur(r3)["inode"] == log.stat().st_ino and _cur(r3)["offset"] == c2["offset"]
    monkeypatch.undo()
    r4 = tail(str(log), r3.cursor, NOW, "h")
    assert _texts(r4) == [LINE.format(n=n) for n in range(2, 9)]


def test_a_file_smaller_than_the_fingerprint_when_listed_is_not_the_cursors(tmp_path) -> None:
    f = tmp_path / "grown"
    f.write_text(_lines(0, 2))
    with open(f, "rb") as fh:
        cur = logcursor.stamp(fh, 0)
        assert logcursor.matches(fh, f.stat().st_size, cur)
        # listed when it was shorter than the fingerprint: grown since, not the same file
        assert not logcursor.matches(fh, cur["fp_len"] - 1, cur)
