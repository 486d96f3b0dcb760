"""Log tailing on real files: rotation, copytruncate, partial lines, missing files."""

from __future__ import annotations

import datetime as dt
import os

from collector.logtail import load_cursors, save_cursors, tail

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
