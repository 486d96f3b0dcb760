"""collector/logtail.py rows in detail: every field of a kept line, the counters,
carriage returns, bad bytes, line-length limits, and the saved cursor file."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os

from collector.logcursor import load_cursors, save_cursors
from collector.logtail import MAX_LINE, tail

NOW = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
STAMPED = dt.datetime(2025, 11, 11, 4, 28, 30, tzinfo=dt.UTC)  # BATCH's time
BATCH = "[2025-11-11 04:28:30] Decode batch, #running-req: {n}, #token: 1, token usage: 0.04, gen throughput (token/s): 1.0, #queue-req: 0"


def test_rows_carry_every_field(tmp_path) -> None:
    log = tmp_path / "server.log"
    lines = [
        BATCH.format(n=1).encode() + b"\r\n",  # CRLF: the \r goes
        b"INFO: 127.0.0.1 - GET /health 200\n",  # not a signature: counted, not kept
        b"\r" + BATCH.format(n=2).encode() + b" \xff\n",  # a leading \r stays; bad bytes replaced
        b"INFO: 127.0.0.1 - GET /metrics 200\n",
        BATCH.format(n=3).encode() + b" \t\r\n",  # only the \r goes, not other white space
        BATCH.format(n=4).encode() + b" X\r\n",
    ]
    log.write_bytes(b"".join(lines))
    os.utime(log, (STAMPED.timestamp(), STAMPED.timestamp()))  # its last write: the last line's
    res = tail(str(log), None, NOW, "node-1")
    assert res.lines == 6 and res.unmatched == 2 and len(res.rows) == 4
    first, second, third, fourth = res.rows
    assert third["text"] == BATCH.format(n=3) + " \t" and fourth["text"] == BATCH.format(n=4) + " X"
    # read at its first read: the time it states (logbackdate), not the read's
    assert first["ts"] == STAMPED and first["host"] == "node-1" and first["file"] == str(log)
    assert first["inode"] == log.stat().st_ino and first["offset"] == 0
    assert first["text"] == BATCH.format(n=1) and first["signature"] == "batch_stats"
    assert first["truncated"] is False
    assert second["offset"] == len(lines[0]) + len(lines[1])
    assert second["text"].startswith("\r[2025") and second["text"].endswith(" \ufffd")
    # line_id: a hash of the file's first line, the offset and the raw line, 24 hex digits
    fid = hashlib.sha1(lines[0], usedforsecurity=False).digest()
    want = hashlib.sha1(fid, usedforsecurity=False)
    want.update((0).to_bytes(8, "little"))
    want.update(lines[0][:-1])
    assert first["line_id"] == want.hexdigest()[:24]
    want = hashlib.sha1(fid, usedforsecurity=False)
    want.update(second["offset"].to_bytes(8, "little"))
    want.update(lines[2][:-1])
    assert second["line_id"] == want.hexdigest()[:24]


def test_line_length_limits(tmp_path) -> None:
    log = tmp_path / "server.log"
    exact = BATCH.format(n=1) + "x" * (MAX_LINE - len(BATCH.format(n=1)))
    long = BATCH.format(n=2) + "y" * MAX_LINE
    log.write_text(exact + "\n" + long + "\n")
    res = tail(str(log), None, NOW, "h")
    assert [len(r["text"]) for r in res.rows] == [MAX_LINE, MAX_LINE]
    assert [r["truncated"] for r in res.rows] == [False, True]
    # a runaway line with no newline is cut after 4 x MAX_LINE, then reading goes on
    run = tmp_path / "runaway.log"
    run.write_bytes(
        BATCH.format(n=3).encode()
        + b"z" * (MAX_LINE * 4)
        + b"\n"
        + BATCH.format(n=4).encode()
        + b"\n"
    )
    res = tail(str(run), None, NOW, "h")
    assert [r["truncated"] for r in res.rows][0] is True
    assert res.rows[-1]["text"] == BATCH.format(n=4)
    assert res.rows[-1]["offset"] == len(BATCH.format(n=3)) + MAX_LINE * 4 + 1


def test_cursor_file_is_sorted_json_in_a_new_folder(tmp_path) -> None:
    state = tmp_path / "a" / "b" / "cursors.json"
    save_cursors(state, {"z.log": {"offset": 1, "inode": 2}, "a.log": {"offset": 3}})
    text = state.read_text()
    assert text == json.dumps({"a.log": {"offset": 3}, "z.log": {"inode": 2, "offset": 1}})
    assert load_cursors(state) == {"a.log": {"offset": 3}, "z.log": {"offset": 1, "inode": 2}}
    assert not [p for p in state.parent.iterdir() if p.name != "cursors.json"]
    state.write_text("{not json")
    assert load_cursors(state) == {}
    assert load_cursors(tmp_path / "missing.json") == {}


def test_cursor_fields_resume_at_the_offset(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text(BATCH.format(n=1) + "\n" + BATCH.format(n=2) + "\n")
    res = tail(str(log), None, NOW, "h")
    cur = res.cursor
    assert cur is not None and cur["inode"] == log.stat().st_ino
    assert cur["offset"] == log.stat().st_size and cur["fp_len"] > 0 and len(cur["fp"]) == 16
    with log.open("a") as f:
        f.write(BATCH.format(n=3) + "\n")
    again = tail(str(log), cur, NOW, "h")
    assert [r["offset"] for r in again.rows] == [cur["offset"]]


def test_notes_say_which_lines_may_be_missing(tmp_path) -> None:
    import gzip
    import os

    log = tmp_path / "server.log"
    log.write_text(BATCH.format(n=1) + "\n")
    first = tail(str(log), None, NOW, "h")
    old_inode, offset = log.stat().st_ino, first.cursor["offset"]
    # rotated and compressed at once: the old file cannot be read
    with gzip.open(tmp_path / "server.log.1.gz", "wb") as z:
        z.write(log.read_bytes() + (BATCH.format(n=2) + "\n").encode())
    (tmp_path / "moved").mkdir()
    os.rename(log, tmp_path / "moved" / "kept")  # out of sight, its inode still taken
    log.write_text(BATCH.format(n=3) + "\n")
    res = tail(str(log), first.cursor, NOW, "h")
    assert [r["text"] for r in res.rows] == [BATCH.format(n=3)]
    assert res.notes == [
        f"{log} was rotated and its old file (inode {old_inode}) is not among the rotated "
        f"names (compressed, not read: server.log.1.gz): lines written after offset {offset} "
        "may be missing"
    ]
    # truncated in place with no copy anywhere
    cur = res.cursor
    log.write_text(BATCH.format(n=4) + "\n")  # same inode, new first bytes
    res = tail(str(log), cur, NOW, "h")
    assert [r["text"] for r in res.rows] == [BATCH.format(n=4)]
    assert res.notes == [
        f"{log} was truncated or rewritten and its old file (inode {log.stat().st_ino}) is not "
        f"among the rotated names (compressed, not read: server.log.1.gz): lines written after "
        f"offset {cur['offset']} may be missing"
    ]


def test_the_note_names_every_compressed_rotation_or_none(tmp_path) -> None:
    import gzip
    import os

    log = tmp_path / "server.log"
    log.write_text(BATCH.format(n=1) + "\n")
    cur = tail(str(log), None, NOW, "h").cursor
    assert cur is not None
    os.rename(log, tmp_path / "moved")  # out of sight
    log.write_text(BATCH.format(n=2) + "\n")
    res = tail(str(log), cur, NOW, "h")
    lost = f"lines written after offset {cur['offset']} may be missing"
    assert res.notes == [
        f"{log} was rotated and its old file (inode {cur['inode']}) is not among the "
        f"rotated names: {lost}"
    ]
    for k in (1, 2):
        (tmp_path / f"server.log.{k}.gz").write_bytes(gzip.compress(b"x\n"))
    res = tail(str(log), cur, NOW, "h")
    assert res.notes == [
        f"{log} was rotated and its old file (inode {cur['inode']}) is not among the rotated "
        f"names (compressed, not read: server.log.1.gz, server.log.2.gz): {lost}"
    ]


def _log(path, lines: list[str], last_write: dt.datetime) -> None:
    path.write_text("".join(f"{x}\n" for x in lines))
    os.utime(path, (last_write.timestamp(), last_write.timestamp()))


def test_lines_a_log_held_before_its_first_read_take_the_times_they_state(tmp_path) -> None:
    """Found by a user's pass: the collector's first run on a server's log stamped every
    line already in it with the run's time, so a two-day-old out-of-memory error read as
    one at the install (OE001 critical, now). Naive stamps are read in the zone the
    file's last write shows (here UTC+08:00); a line stating no time takes the one
    before it; none goes past the read; lines written after the first read keep the
    read time."""
    log = tmp_path / "server.log"
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 38.00 MiB."
    _log(
        log,
        [
            "[2025-12-30 08:00:00] ServerArgs(model_path='m', tp_size=1)",
            "[2025-12-30 09:00:00] " + oom,
            oom,  # no stamp of its own
            BATCH.replace("2025-11-11 04:28:30", "2025-12-31 19:55:00").format(n=1),
        ],
        last_write=dt.datetime(2025, 12, 31, 11, 55, tzinfo=dt.UTC),  # 19:55 at UTC+08:00
    )
    res = tail(str(log), None, NOW, "h")
    got = [(r["signature"], r["ts"]) for r in res.rows]
    at = lambda *a: dt.datetime(*a, tzinfo=dt.UTC)  # noqa: E731
    assert got == [
        ("server_args", at(2025, 12, 30, 0)),
        ("oom", at(2025, 12, 30, 1)),
        ("oom", at(2025, 12, 30, 1)),
        ("batch_stats", at(2025, 12, 31, 11, 55)),
    ]
    with log.open("a") as f:  # written while watched: stamped when read
        f.write(BATCH.format(n=2) + "\n")
    res = tail(str(log), res.cursor, NOW, "h")
    assert [r["ts"] for r in res.rows] == [NOW]
    ahead = tmp_path / "ahead.log"  # a stamp past the read: put at the read
    _log(ahead, [BATCH.replace("2025-11-11", "2027-01-01").format(n=1)], NOW)
    assert [r["ts"] for r in tail(str(ahead), None, NOW, "h").rows] == [NOW]


def test_a_backlog_read_over_several_runs_is_dated_in_each(tmp_path) -> None:
    """A backlog longer than a run's byte cap is read over several runs: the cursor keeps
    where it ends, so its later lines are dated as its first, and lines written after the
    first read are not."""
    log = tmp_path / "server.log"
    day = dt.datetime(2025, 12, 30, tzinfo=dt.UTC)
    stamps = [day + dt.timedelta(minutes=k) for k in range(40)]
    _log(log, [BATCH.replace("2025-11-11 04:28:30", f"{t:%Y-%m-%d %H:%M:%S}").format(n=1)
               for t in stamps], last_write=stamps[-1])  # fmt: skip
    cursor, got = None, []
    for _ in range(10):
        res = tail(str(log), cursor, NOW, "h", max_bytes=1000)
        got += [r["ts"] for r in res.rows]
        cursor = res.cursor
        assert cursor is not None
        if not res.stopped:
            break
    assert got == stamps and "backlog" not in cursor
    with log.open("a") as f:
        f.write(BATCH.format(n=2) + "\n")
    assert [r["ts"] for r in tail(str(log), cursor, NOW, "h").rows] == [NOW]
