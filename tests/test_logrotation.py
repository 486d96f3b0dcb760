"""collector/logrotation.py: which names belong to a log, in which order, which are
compressed, what is said when the log cannot be opened, and the retry when a
rotation renames something while the set is being opened."""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import lzma
import os
from pathlib import Path

import pytest

from collector import logrotation
from collector.logrotation import FP_BYTES, TRIES, snapshot
from collector.logtail import tail

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
LINE = "[2025-11-11 04:28:30] Decode batch, #running-req: {n}, #token: 1, token usage: 0.04, gen throughput (token/s): 1.0, #queue-req: 0\n"


def _names(gens) -> list[str]:
    return [g.name for g in gens]


def test_the_set_is_the_log_and_its_rotations_oldest_first(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text(LINE.format(n=1) * 40)  # more than FP_BYTES
    for name in ("server.log.1", "server.log.2", "server.log.10", "server.log_old"):
        (tmp_path / name).write_text(name + "\n")
    for name in ("server.log-2026-01-02", "server.log-2026-01-01"):  # dateext with dashes
        (tmp_path / name).write_text(name + "\n")
    (tmp_path / "server.log.3.gz").write_bytes(b"named as compressed")
    (tmp_path / "server.log.4").write_bytes(gzip.compress(b"gzip, under a plain name\n"))
    (tmp_path / "server.log.5").write_bytes(lzma.compress(b"xz, under a plain name\n"))
    # not rotations of server.log: another log of the same name length, a longer name,
    # a folder
    (tmp_path / "access.log.1").write_text("other\n")
    (tmp_path / "server.logger").write_text("other\n")
    (tmp_path / "server.log.d").mkdir()
    with contextlib.ExitStack() as stack:
        snap = snapshot(str(log), stack)
        assert snap.current is not None and snap.current.name == "server.log"
        assert snap.error is None and snap.note is None
        assert _names(snap.rotated) == [
            "server.log.10",
            "server.log.2",
            "server.log.1",
            "server.log-2026-01-01",
            "server.log-2026-01-02",
            "server.log_old",
        ]
        assert snap.packed == ["server.log.3.gz", "server.log.4", "server.log.5"]
        assert snap.head == log.read_bytes()[:FP_BYTES] and snap.size == log.stat().st_size
        assert [g.st.st_ino for g in snap.rotated] == [
            (tmp_path / g.name).stat().st_ino for g in snap.rotated
        ]
        files = [snap.current.f, *(g.f for g in snap.rotated)]
        assert not any(f.closed for f in files)
    assert all(f.closed for f in files)  # closed with the stack


def test_a_missing_log_or_folder_is_named(tmp_path) -> None:
    (tmp_path / "server.log.1").write_text("old\n")
    with contextlib.ExitStack() as stack:
        snap = snapshot(str(tmp_path / "server.log"), stack)
        assert snap.current is None and _names(snap.rotated) == ["server.log.1"]
        assert snap.error == f"{tmp_path / 'server.log'}: No such file or directory"
        gone = str(tmp_path / "nowhere" / "server.log")
        snap = snapshot(gone, stack)
        assert snap.current is None and snap.rotated == [] and snap.packed == []
        assert snap.error == f"{gone}: No such file or directory" and snap.note is None
    res = tail(gone, {"inode": 1, "offset": 5}, NOW, "h")
    assert res.error == f"{gone}: No such file or directory" and res.notes == []
    assert res.cursor == {"inode": 1, "offset": 5} and res.rows == []


def test_a_fifo_or_folder_in_place_of_the_log_is_named_as_such(tmp_path) -> None:
    fifo, folder = tmp_path / "pipe.log", tmp_path / "dir.log"
    os.mkfifo(fifo)
    folder.mkdir()
    with contextlib.ExitStack() as stack:
        for p in (fifo, folder):
            snap = snapshot(str(p), stack)  # returns at once: a FIFO is never opened
            assert snap.current is None
            assert snap.error == f"{p}: not a regular file (only regular files are tailed)"


def test_a_file_that_cannot_be_opened_is_said_or_skipped(tmp_path, monkeypatch) -> None:
    log = tmp_path / "server.log"
    log.write_text(LINE.format(n=1))
    for k in (1, 2):
        (tmp_path / f"server.log.{k}").write_text(LINE.format(n=k))
    real = open
    refuse: set[str] = set()

    def fake_open(path, *a, **kw):  # type: ignore[no-untyped-def]
        if Path(path).name in refuse:
            raise PermissionError(13, "Permission denied")
        return real(path, *a, **kw)

    monkeypatch.setattr(logrotation, "open", fake_open, raising=False)
    refuse.add("server.log.1")  # a rotated file: left out, the rest is read
    with contextlib.ExitStack() as stack:
        snap = snapshot(str(log), stack)
        assert snap.current is not None and _names(snap.rotated) == ["server.log.2"]
    refuse.clear()
    refuse.add("server.log")  # the log itself: why, in the error
    res = tail(str(log), None, NOW, "h")
    assert res.error == f"{log}: Permission denied" and res.rows == []


def _counting(monkeypatch, change):  # type: ignore[no-untyped-def]
    """Wrap the folder listing: ``change(call, listing)`` may alter it; returns the calls."""
    real = logrotation._listing
    calls: list[int] = []

    def listing(p: Path) -> dict[str, int]:
        calls.append(1)
        return change(len(calls), real(p))

    monkeypatch.setattr(logrotation, "_listing", listing)
    return calls


def test_a_rotation_between_the_listings_is_retried(tmp_path, monkeypatch) -> None:
    log = tmp_path / "server.log"
    log.write_text(LINE.format(n=1))
    calls = _counting(monkeypatch, lambda n, got: got)
    with contextlib.ExitStack() as stack:
        assert snapshot(str(log), stack).note is None
    assert len(calls) == 2  # listed, opened, listed again: once when nothing moved

    def rotate_once(n: int, got: dict[str, int]) -> dict[str, int]:
        if n == 1:  # right after the first listing: renamed, and a new log
            os.rename(log, tmp_path / "server.log.1")
            log.write_text(LINE.format(n=2))
        return got

    calls = _counting(monkeypatch, rotate_once)
    with contextlib.ExitStack() as stack:
        snap = snapshot(str(log), stack)
        assert len(calls) == 4 and snap.note is None
        assert snap.current is not None and snap.current.f.read() == LINE.format(n=2).encode()
        assert [g.f.read() for g in snap.rotated] == [LINE.format(n=1).encode()]


def test_a_log_that_keeps_rotating_is_read_as_last_seen_and_said(tmp_path, monkeypatch) -> None:
    log = tmp_path / "server.log"
    log.write_text(LINE.format(n=1))
    note = f"{log}: rotated again while it was being read ({TRIES} tries)"
    # a name that is there in one listing and gone in the next, every time
    calls = _counting(monkeypatch, lambda n, got: {**got, f"server.log.{n}": 1})
    with contextlib.ExitStack() as stack:
        snap = snapshot(str(log), stack)
        assert len(calls) == 2 * TRIES and snap.note == note
        assert snap.current is not None and snap.current.f.read() == LINE.format(n=1).encode()
    res = tail(str(log), None, NOW, "h")
    assert res.notes == [note] and len(res.rows) == 1
    # the same names both times, but a file is not the one listed (its inode moved)
    calls = _counting(monkeypatch, lambda n, got: {k: v + 1 for k, v in got.items()})
    with contextlib.ExitStack() as stack:
        assert snapshot(str(log), stack).note == note and len(calls) == 2 * TRIES


@pytest.mark.parametrize("payload", [gzip.compress(b"x\n"), lzma.compress(b"x\n")])
def test_compressed_content_is_never_read_as_lines(tmp_path, payload: bytes) -> None:
    log = tmp_path / "server.log"
    log.write_text(LINE.format(n=1))
    first = tail(str(log), None, NOW, "h")
    os.rename(log, tmp_path / "moved")  # out of sight
    (tmp_path / "server.log.1").write_bytes(payload)
    log.write_text(LINE.format(n=2))
    res = tail(str(log), first.cursor, NOW, "h")
    assert [r["text"] for r in res.rows] == [LINE.format(n=2).rstrip("\n")]
    assert res.lines == 1 and "(compressed, not read: server.log.1)" in res.notes[0]


def test_a_symlinked_log_is_read_where_it_points_across_a_rotation(tmp_path) -> None:
    """Kubernetes' /var/log/containers/*.log are symlinks into the pod's folder, where
    the rotated generations lie: no false "rotated again" and no line lost."""
    pods, links = tmp_path / "pods", tmp_path / "containers"
    pods.mkdir()
    links.mkdir()
    real = pods / "0.log"
    link = links / "server.log"
    link.symlink_to(real)
    real.write_text("".join(LINE.format(n=k) for k in range(5)))
    first = tail(str(link), None, NOW, "h")
    assert first.error is None and not first.notes and len(first.rows) == 5
    with real.open("a") as f:
        f.write("".join(LINE.format(n=k) for k in range(5, 8)))
    real.rename(pods / "0.log.20260101-000000")  # the runtime rotates the target
    real.write_text(LINE.format(n=8))
    res = tail(str(link), first.cursor, NOW, "h")
    assert res.error is None and not res.notes, (res.error, res.notes)
    got = [r["text"] for r in res.rows]
    assert got == [LINE.format(n=k).rstrip("\n") for k in range(5, 9)]
    assert {r["file"] for r in first.rows + res.rows} == {str(link)}  # named as given


def test_a_read_that_ends_exactly_at_the_byte_cap_is_not_behind(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(LINE.format(n=k) for k in range(3)))
    res = tail(str(log), None, NOW, "h", max_bytes=log.stat().st_size)
    assert not res.stopped and not res.notes and len(res.rows) == 3, res.notes
    res = tail(str(log), None, NOW, "h", max_bytes=log.stat().st_size - 1)
    assert res.stopped and "behind: reading stopped at the byte cap" in res.notes[0], res.notes


def test_a_link_moved_to_a_new_file_finishes_the_old_one_first(tmp_path) -> None:
    """A container restart (or a logger's "current" link) points the log's link at a new
    file: what the old file got since the last run is read first, then the new one."""
    link = tmp_path / "server.log"
    first_file, second_file = tmp_path / "app.2026010100.log", tmp_path / "app.2026010101.log"
    first_file.write_text(LINE.format(n=1) + LINE.format(n=2))
    link.symlink_to(first_file)
    one = tail(str(link), None, NOW, "h")
    with first_file.open("a") as f:
        f.write(LINE.format(n=3))  # the last words of the old process: the OOM, often
    second_file.write_text(LINE.format(n=4))
    link.unlink()
    link.symlink_to(second_file)
    two = tail(str(link), one.cursor, NOW, "h")
    assert not two.notes, two.notes
    assert [r["text"] for r in two.rows] == [LINE.format(n=k).rstrip("\n") for k in (3, 4)]
    second_file.unlink()  # moved again, and the file it pointed to is gone: said
    third = tmp_path / "app.2026010102.log"
    third.write_text(LINE.format(n=5))
    link.unlink()
    link.symlink_to(third)
    three = tail(str(link), two.cursor, NOW, "h")
    assert [r["text"] for r in three.rows] == [LINE.format(n=5).rstrip("\n")]
    assert len(three.notes) == 1 and f"({second_file}) is gone" in three.notes[0], three.notes
    four = tail(str(link), three.cursor, NOW, "h")
    assert four.rows == [] and not four.notes
