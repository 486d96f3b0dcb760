"""Log tailing on real files: rotation, copytruncate, partial lines, missing files."""

from __future__ import annotations

import datetime as dt
import os

from collector.logcursor import load_cursors, save_cursors
from collector.logtail import tail

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
BATCH = "[2025-11-11 04:28:30] Decode batch, #running-req: {n}, #token: 7171, token usage: 0.04, gen throughput (token/s): 86.14, #queue-req: 0\n"


def _write(path, text: str, mode: str = "a") -> None:
    with open(path, mode, encoding="utf-8") as f:
        f.write(text)


def _running(res) -> list[str]:
    return [r["text"].split("#running-req: ")[1].split(",")[0] for r in res.rows]


def test_cursor_resumes_and_counts_the_rest(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, BATCH.format(n=1) + "INFO: 127.0.0.1 - GET /health 200\n" + BATCH.format(n=2))
    r1 = tail(str(log), None, NOW, "h")
    assert (
        _running(r1) == ["1", "2"]
        and r1.unmatched == 1
        and r1.rows[0]["signature"] == "batch_stats"
    )
    _write(log, BATCH.format(n=3))
    r2 = tail(str(log), r1.cursor, NOW, "h")
    assert _running(r2) == ["3"]
    assert r2.rows[0]["offset"] == r1.cursor["offset"]


def test_partial_last_line_waits(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, BATCH.format(n=1) + BATCH.format(n=2)[:40])
    r1 = tail(str(log), None, NOW, "h")
    assert _running(r1) == ["1"]
    _write(log, BATCH.format(n=2)[40:])
    assert _running(tail(str(log), r1.cursor, NOW, "h")) == ["2"]


def test_rotation_by_rename_starts_the_new_file(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, BATCH.format(n=1))
    r1 = tail(str(log), None, NOW, "h")
    os.rename(log, tmp_path / "server.log.1")
    _write(log, BATCH.format(n=2))
    r2 = tail(str(log), r1.cursor, NOW, "h")
    assert _running(r2) == ["2"] and r2.cursor["inode"] != r1.cursor["inode"]


def test_copytruncate_starts_again(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, BATCH.format(n=1) + BATCH.format(n=2))
    r1 = tail(str(log), None, NOW, "h")
    with open(log, "r+") as f:
        f.truncate(0)
    _write(log, BATCH.format(n=3))
    assert _running(tail(str(log), r1.cursor, NOW, "h")) == ["3"]


def test_missing_file_is_an_error_of_that_log_only(tmp_path) -> None:
    r = tail(str(tmp_path / "nope.log"), {"inode": 1, "offset": 5}, NOW, "h")
    assert r.error and "nope.log" in r.error and r.cursor == {"inode": 1, "offset": 5}


def test_long_line_is_cut_not_fatal(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, "Decode batch, " + "x" * 200_000 + "\n" + BATCH.format(n=7))
    r = tail(str(log), None, NOW, "h")
    assert r.rows[0]["truncated"] and len(r.rows[0]["text"]) == 64 * 1024
    assert "#running-req: 7," in r.rows[1]["text"]


def test_cursor_file_round_trip_and_garbage(tmp_path) -> None:
    state = tmp_path / "st" / "cursors.json"
    save_cursors(state, {"/a": {"inode": 1, "offset": 2}})
    assert load_cursors(state) == {"/a": {"inode": 1, "offset": 2}}
    state.write_text("{not json")
    assert load_cursors(state) == {}


# --- rotation that loses nothing (issue 16) -------------------------------------------------


def _lines(k0: int, k1: int) -> str:
    return "".join(BATCH.format(n=k) for k in range(k0, k1))


def _all(results) -> list[int]:
    return [int(n) for r in results for n in _running(r)]


def test_rename_rotation_finishes_the_old_file_first(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, _lines(0, 3))
    r1 = tail(str(log), None, NOW, "h")
    _write(log, _lines(3, 5))  # written after the last run, before the rotation
    os.rename(log, tmp_path / "server.log.1")
    _write(log, _lines(5, 7))
    r2 = tail(str(log), r1.cursor, NOW, "h")
    assert _all([r1, r2]) == list(range(7)) and not r2.notes
    assert [r["inode"] for r in r2.rows[:2]] == [r1.cursor["inode"]] * 2


def test_two_rotations_between_runs_and_late_writes_to_the_renamed_file(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, _lines(0, 2))
    r1 = tail(str(log), None, NOW, "h")
    _write(log, _lines(2, 3))
    os.rename(log, tmp_path / "server.log.1")
    _write(log, _lines(3, 5))
    os.rename(tmp_path / "server.log.1", tmp_path / "server.log.2")
    os.rename(log, tmp_path / "server.log.1")
    _write(log, _lines(5, 6))
    r2 = tail(str(log), r1.cursor, NOW, "h")
    assert _all([r1, r2]) == list(range(6))
    # the server had not reopened its log yet: two more lines land in the renamed file
    _write(tmp_path / "server.log.1", _lines(6, 8))
    _write(log, _lines(8, 9))
    r3 = tail(str(log), r2.cursor, NOW, "h")
    assert _all([r3]) == [6, 7, 8]


def test_copytruncate_reads_the_tail_from_the_copy_and_keeps_the_first_new_line(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, _lines(0, 3))
    labels: dict[str, int] = {}  # what the run keeps in the state dir between runs
    r1 = tail(str(log), None, NOW, "h", labels=labels)
    _write(log, _lines(3, 5))  # the pre-truncate tail
    (tmp_path / "server.log.1").write_bytes(log.read_bytes())  # what copytruncate does
    with open(log, "r+") as f:
        f.truncate(0)
    _write(log, _lines(5, 7))
    r2 = tail(str(log), r1.cursor, NOW, "h", labels=labels)
    assert _all([r1, r2]) == list(range(7)) and not r2.notes
    # the tail carries the original's inode (the copy holds the same lines); the first new line
    # reuses inode and offset 0, yet keeps its own key: the analyzer does not drop it
    assert {r["inode"] for r in r1.rows + r2.rows} == {r1.cursor["inode"]}
    key = [(r["inode"], r["offset"], r["line_id"]) for r in r1.rows + r2.rows]
    assert len(set(key)) == 7
    assert r1.rows[0]["offset"] == r2.rows[2]["offset"] == 0


def test_a_line_torn_by_copytruncate_keeps_its_start_marked_truncated(tmp_path) -> None:
    """copytruncate copied the log while the server was writing a line: its start ends the
    copy, its rest starts the truncated log. The start waited for a newline the copy
    never gets, and was lost without a note; it is kept now, marked truncated, once."""
    log = tmp_path / "server.log"
    _write(log, _lines(0, 3))
    labels: dict[str, int] = {}
    r1 = tail(str(log), None, NOW, "h", labels=labels)
    torn = BATCH.format(n=4)
    cut = torn.index("#token")  # the running count made it into the copy
    _write(log, _lines(3, 4) + torn[:cut])
    (tmp_path / "server.log.1").write_bytes(log.read_bytes())
    with open(log, "r+") as f:
        f.truncate(0)
    _write(log, torn[cut:] + _lines(5, 7))
    r2 = tail(str(log), r1.cursor, NOW, "h", labels=labels)
    assert _all([r1, r2]) == [0, 1, 2, 3, 4, 5, 6] and not r2.notes
    (start,) = [r for r in r2.rows if r["truncated"]]
    assert start["text"] + torn[cut:] == torn and start["signature"] == "batch_stats"
    assert r2.unmatched == 1  # the rest, on its own
    _write(log, _lines(7, 8))
    r3 = tail(str(log), r2.cursor, NOW, "h", labels=labels)  # the copy is watched: no repeat
    assert _all([r3]) == [7] and not r3.notes


def test_copytruncate_of_a_log_written_without_append_skips_the_hole(tmp_path) -> None:
    """``server > log`` (no O_APPEND): after a copytruncate the server goes on writing at
    its old offset, so the log starts with a hole of zeros as long as it was. The first
    new line kept those NULs (26 KB of them, and no time of its own); a hole past the
    byte budget would take runs to read. It is skipped and the line is clean."""
    log = tmp_path / "server.log"
    _write(log, _lines(0, 3))
    r1 = tail(str(log), None, NOW, "h")
    (tmp_path / "server.log.1").write_bytes(log.read_bytes())
    old_end = 48 << 20  # where the server's descriptor still points
    with open(log, "r+b") as f:
        f.truncate(0)
        f.seek(old_end)
        f.write(_lines(3, 5).encode())
    r2 = tail(str(log), r1.cursor, NOW, "h", max_bytes=1 << 20)
    assert _all([r1, r2]) == [0, 1, 2, 3, 4] and not r2.stopped, r2.notes
    assert [r["text"] + "\n" for r in r2.rows] == [BATCH.format(n=3), BATCH.format(n=4)]
    assert r2.cursor["offset"] == os.path.getsize(log)
    _write(log, _lines(5, 6))
    assert _all([tail(str(log), r2.cursor, NOW, "h")]) == [5]


def test_nul_bytes_before_a_line_are_shed_where_holes_are_read_as_data(tmp_path) -> None:
    """A file system without holes (or a copy of the log) gives the zeros as bytes: past
    one line's 64 KiB cut, and past the runaway cut of 4 lines (which once took the
    start of the line after 2 chunks of zeros with it)."""
    from collector.logtail import CHUNK

    for zeros in (70_000, 2 * CHUNK - 10):
        log = tmp_path / f"server-{zeros}.log"
        log.write_bytes(b"\0" * zeros + _lines(0, 2).encode())
        r = tail(str(log), None, NOW, "h")
        assert [x["text"] + "\n" for x in r.rows] == [BATCH.format(n=0), BATCH.format(n=1)]
        assert not any(x["truncated"] for x in r.rows) and r.unmatched == 0


def test_a_second_copytruncate_of_a_log_written_without_append(tmp_path) -> None:
    """After the first, the log starts with a hole, so its fingerprint was 4 KiB of
    zeros; the second left another hole, the fingerprint still matched, and the lines
    written between the two runs (now only in the copy) were skipped without a word."""
    log = tmp_path / "server.log"
    srv = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)  # server > log

    def copytruncate() -> None:
        if (tmp_path / "server.log.1").exists():
            os.replace(tmp_path / "server.log.1", tmp_path / "server.log.2")
        (tmp_path / "server.log.1").write_bytes(log.read_bytes())
        os.truncate(log, 0)

    try:
        os.write(srv, (_lines(0, 3) + "INFO filler\n" * 400).encode())
        r1 = tail(str(log), None, NOW, "h")
        os.write(srv, _lines(3, 5).encode())
        copytruncate()
        os.write(srv, _lines(5, 7).encode())
        r2 = tail(str(log), r1.cursor, NOW, "h")
        os.write(srv, _lines(7, 9).encode())
        copytruncate()
        os.write(srv, _lines(9, 11).encode())
        r3 = tail(str(log), r2.cursor, NOW, "h")
    finally:
        os.close(srv)
    assert _all([r1, r2, r3]) == list(range(11)) and not r3.notes, r3.notes


def test_recreated_on_the_same_inode_is_read_from_the_start(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, _lines(0, 2))
    r1 = tail(str(log), None, NOW, "h")
    ino = os.stat(log).st_ino
    os.unlink(log)
    _write(log, _lines(10, 14))  # longer than the old cursor's offset
    # ext4 and tmpfs hand the freed inode to the new file; elsewhere this is the rename path
    r2 = tail(str(log), r1.cursor, NOW, "h")
    assert _all([r2]) == [10, 11, 12, 13]
    assert r2.notes and "may be missing" in r2.notes[0]  # the old file is gone: said, not hidden
    same = os.stat(log).st_ino == ino
    assert ("truncated or rewritten" if same else "was rotated") in r2.notes[0]


def test_rewritten_in_place_with_more_bytes_is_read_from_the_start(tmp_path) -> None:
    """Same inode, new content longer than the old offset: only the fingerprint tells."""
    log = tmp_path / "server.log"
    _write(log, _lines(0, 2))
    r1 = tail(str(log), None, NOW, "h")
    with open(log, "r+") as f:
        f.truncate(0)
    _write(log, _lines(10, 14))
    assert os.stat(log).st_ino == r1.cursor["inode"]
    r2 = tail(str(log), r1.cursor, NOW, "h")
    assert _all([r2]) == [10, 11, 12, 13]


def test_compressed_rotation_is_skipped_and_said(tmp_path) -> None:
    import gzip

    log = tmp_path / "server.log"
    _write(log, _lines(0, 2))
    r1 = tail(str(log), None, NOW, "h")
    with gzip.open(tmp_path / "server.log.1.gz", "wb") as z:
        z.write(log.read_bytes())
    os.unlink(log)
    _write(log, _lines(2, 3))
    r2 = tail(str(log), r1.cursor, NOW, "h")
    assert _all([r2]) == [2]
    assert "server.log.1.gz" in r2.notes[0] and "compressed" in r2.notes[0]


def test_a_small_budget_resumes_inside_the_rotated_file(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, _lines(0, 2))
    cur = tail(str(log), None, NOW, "h").cursor
    _write(log, _lines(2, 30))
    os.rename(log, tmp_path / "server.log-20260101")
    _write(log, _lines(30, 40))
    got: list[int] = []
    for _ in range(40):
        r = tail(str(log), cur, NOW, "h", max_bytes=1000)
        got += _all([r])
        cur = r.cursor
        if not r.stopped:
            break
    assert got == list(range(2, 40))


def test_a_past_deadline_reads_nothing_and_keeps_the_cursor(tmp_path) -> None:
    import time

    log = tmp_path / "server.log"
    _write(log, _lines(0, 2))
    r1 = tail(str(log), None, NOW, "h")
    _write(log, _lines(2, 4))
    r2 = tail(str(log), r1.cursor, NOW, "h", deadline=time.monotonic() - 1)
    assert r2.stopped and not r2.rows and r2.cursor["offset"] == r1.cursor["offset"]


def test_a_cursor_without_fingerprint_still_resumes(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, _lines(0, 2))
    off = os.path.getsize(log)
    _write(log, _lines(2, 3))
    r = tail(str(log), {"inode": os.stat(log).st_ino, "offset": off}, NOW, "h")
    assert _all([r]) == [2] and r.cursor["fp_len"] == os.path.getsize(log)


def test_a_copy_made_while_the_cursor_sat_on_an_empty_file_is_read(tmp_path) -> None:
    import time

    log = tmp_path / "server.log"
    log.write_text("")
    r1 = tail(str(log), None, NOW, "h")  # an empty file: nothing to fingerprint
    time.sleep(0.02)
    _write(log, _lines(0, 3))
    (tmp_path / "server.log.1").write_bytes(log.read_bytes())  # copytruncate
    with open(log, "r+") as f:
        f.truncate(0)
    _write(log, _lines(3, 4))
    r2 = tail(str(log), r1.cursor, NOW, "h")
    assert _all([r2]) == [0, 1, 2, 3]
    r3 = tail(str(log), r2.cursor, NOW, "h")  # the copy is not read again
    assert _all([r3]) == []


def test_rows_of_a_generation_keep_one_inode_whichever_file_they_are_read_from(tmp_path) -> None:
    """A run killed after writing its rows repeats them after a rotation: same key both times."""
    log = tmp_path / "server.log"
    _write(log, _lines(0, 2))
    labels: dict[str, int] = {}
    r1 = tail(str(log), None, NOW, "h", labels=labels)
    _write(log, _lines(2, 4))
    lost_run = tail(str(log), r1.cursor, NOW, "h", labels=labels)  # rows written, cursor not saved
    (tmp_path / "server.log.1").write_bytes(log.read_bytes())  # then a copytruncate
    os.unlink(log)  # and the file recreated (maybe on another inode)
    _write(log, _lines(4, 5))
    again = tail(str(log), r1.cursor, NOW, "h", labels=labels)
    key = lambda r: (r["inode"], r["offset"], r["line_id"])  # noqa: E731
    assert [key(r) for r in lost_run.rows] == [key(r) for r in again.rows[:2]]
    assert _all([again]) == [2, 3, 4]


def test_a_copy_read_while_copytruncate_was_writing_it_is_finished_next_run(tmp_path) -> None:
    log = tmp_path / "server.log"
    _write(log, _lines(0, 3))
    r1 = tail(str(log), None, NOW, "h")
    g1, g2 = _lines(0, 5), _lines(5, 11)
    (tmp_path / "server.log.2").write_text(g1)  # the first copytruncate: done
    half = len(BATCH.format(n=5)) * 3
    (tmp_path / "server.log.1").write_text(g2[:half])  # the second one: still copying
    with open(log, "r+") as f:  # (the file being copied was truncated while we listed)
        f.truncate(0)
    _write(log, _lines(11, 12))
    r2 = tail(str(log), r1.cursor, NOW, "h")
    assert _all([r1, r2]) == [0, 1, 2, 3, 4, 5, 6, 7, 11]
    _write(tmp_path / "server.log.1", g2[half:])  # the copy completes
    r3 = tail(str(log), r2.cursor, NOW, "h")
    assert _all([r3]) == [8, 9, 10]


def test_a_copytruncate_in_the_middle_of_a_read_loses_nothing(tmp_path, monkeypatch) -> None:
    """The rotation lands between the moment the files are listed and the read."""
    from collector import logtail

    log = tmp_path / "server.log"
    _write(log, _lines(0, 2))
    r1 = tail(str(log), None, NOW, "h")
    _write(log, _lines(2, 4))
    real = logtail._Reader.read
    done = []

    def rotate_then_read(self, f, start):  # type: ignore[no-untyped-def]
        if not done:
            done.append(1)
            (tmp_path / "server.log.1").write_bytes(log.read_bytes())  # copytruncate, now
            with open(log, "r+") as w:
                w.truncate(0)
            _write(log, _lines(4, 9))  # longer than the offset we are about to read from
        return real(self, f, start)

    monkeypatch.setattr(logtail._Reader, "read", rotate_then_read)
    r2 = tail(str(log), r1.cursor, NOW, "h")
    monkeypatch.undo()
    r3 = tail(str(log), r2.cursor, NOW, "h")
    assert _all([r1, r2, r3]) == list(range(9))


def test_a_cursor_saved_before_fingerprints_passed_over_nuls_resumes(tmp_path) -> None:
    """After the upgrade, a cursor of a log written without O_APPEND (its fingerprint, as
    saved before, hashed the hole's zeros) no longer matched: the log was said to be
    rewritten, the run exited 1, and everything since the copytruncate was read twice."""
    import hashlib

    log = tmp_path / "server.log"
    log.write_bytes(b"\0" * 9000 + _lines(0, 3).encode())  # after a copytruncate
    size = os.path.getsize(log)
    first = log.read_bytes()[:4096]
    old = {  # the cursor as the previous version saved it
        "inode": os.stat(log).st_ino,
        "offset": size,
        "fp": hashlib.sha1(first).hexdigest()[:16],
        "fp_len": len(first),
    }
    _write(log, _lines(3, 5))
    r = tail(str(log), old, NOW, "h")
    assert _all([r]) == [3, 4] and not r.notes, r.notes
    assert r.cursor["fp_v"] == 2  # saved the new way from now on
    _write(log, _lines(5, 6))
    assert _all([tail(str(log), r.cursor, NOW, "h")]) == [5]
