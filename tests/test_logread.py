"""Reading a log a chunk at a time: the same lines and the same events, with the same line
numbers, as one pass over the whole file, whatever the chunk size; and the cheap screen
never drops a line a recogniser would name."""

from __future__ import annotations

import os
import random
import re
import threading
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer import logformats, logparse, logread

CORPUS = Path(__file__).resolve().parent / "corpus"
LOGS = sorted(CORPUS.glob("*_*.txt"))
WHOLE = 1 << 40  # one chunk


def _whole(path: Path, **kw) -> pl.DataFrame:
    return logparse.parse_frame(logread.read_lines(path, WHOLE), chunk_lines=WHOLE, **kw)


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_corpus_parsed_in_chunks_of_one_line_equals_one_pass(log: Path) -> None:
    lines = logread.read_lines(log, WHOLE)
    # 1 byte: every line is a chunk of its own; a zone makes the stamps go through datetimes
    for chunk_bytes, chunk_lines, tz in ((1, 1, "UTC"), (300, 7, "Asia/Shanghai")):
        want = _whole(log, tz=tz)
        got, n = logparse.parse_file(log, tz=tz, chunk_bytes=chunk_bytes)
        assert n == lines.len()
        assert got.columns == want.columns and got.equals(want), (chunk_bytes, tz)
        got = logparse.parse_frame(lines, tz=tz, chunk_lines=chunk_lines)
        assert got.equals(want), (chunk_lines, tz)
    if "vllm" in log.name or "sglang" in log.name:
        assert want.height > 0


def _synthetic(path: Path, lines: int) -> None:
    """Whole corpus files (their wrapped records intact) between runs of request-log noise,
    CRLF and bad bytes here and there, a byte-order mark first, no newline last."""
    rng = random.Random(12)
    texts = [p.read_bytes() for p in LOGS]
    noise = b'[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/completions" 200 OK'
    out = [b"\xef\xbb\xbf"]
    n = 0
    while n < lines:
        block = rng.choice(texts)
        if rng.random() < 0.3:
            block = block.replace(b"\n", b"\r\n")
        out.append(block)
        k = rng.randrange(1, 400)
        out.append(b"\n".join([noise] * k) + b"\n")
        out.append(b"\xff\xfe odd \x1f cut here\n" if rng.random() < 0.2 else b"\n")
        n += block.count(b"\n") + k + 1
    path.write_bytes(b"".join(out) + b"Decode batch. #running-req: 3, #queue-req: 1")


def test_a_large_synthetic_log_in_small_chunks_equals_one_pass(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    _synthetic(log, 20_000)
    lines = logread.read_lines(log, WHOLE)
    want = _whole(log)
    assert want.height > 1_000 and want["line"].max() == lines.len()  # the last line counts
    for chunk in (20_000, 1 << 20):
        got, n = logparse.parse_file(log, chunk_bytes=chunk)
        assert n == lines.len()
        assert got.equals(want), chunk
        assert logread.read_lines(log, chunk).equals(lines), chunk
    assert logparse.parse_frame(lines, chunk_lines=1_000).equals(want)
    got, _ = logparse.parse_file(log, chunk_bytes=20_000, text=False)  # as `logs parse` runs
    assert got.equals(want.drop("text"))


@pytest.mark.parametrize(
    ("raw", "lines"),
    [
        (b"a\n\nb", ["a", "", "b"]),  # empty lines kept, a last line without newline kept
        (b"a\n\n", ["a", ""]),
        (b"\n\na", ["", "", "a"]),
        (b"a\r\nb\r\n", ["a", "b"]),  # CRLF: the \r goes
        (b"a\rb\n", ["a\rb"]),  # a lone \r is no line break
        (b"x\na\x1fz\nb", ["x", "a", "b"]),  # cut at the unit separator
        (b"a\x1fb\nc", ["a", "c"]),  # ... also on the first line (the old reader raised)
        (b"\xef\xbb\xbfa\nb", ["a", "b"]),  # the file's byte-order mark goes
        (b"x\n\xef\xbb\xbfy\n", ["x", "\ufeffy"]),  # one inside the file stays
        (b"\xef\xbb\xbf", []),
        (b"a\xffb\n", ["a\ufffdb"]),  # bad bytes replaced
        (b' "q" \n"x\ny"\n', [' "q" ', '"x', 'y"']),  # quotes are text
        (b"", []),
    ],
)
def test_lines_are_the_same_in_any_chunk_size(tmp_path: Path, raw: bytes, lines: list) -> None:
    f = tmp_path / "f.log"
    f.write_bytes(raw)
    for chunk in (1, 2, 3, 1 << 20):
        assert logread.read_lines(f, chunk).to_list() == lines, chunk


def test_a_log_cut_shorter_while_being_read_is_an_error_not_wrong_lines(tmp_path: Path) -> None:
    f = tmp_path / "f.log"
    f.write_bytes(b"line\n" * 1000)
    windows = logread.windows(f, 100)
    next(windows)
    f.write_bytes(b"line\n" * 10)  # truncated in place (copytruncate)
    with pytest.raises(OSError, match="got shorter"):
        list(windows)


def test_a_pipe_is_read_whole(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    log = CORPUS / "vllm_logs.txt"
    writer = threading.Thread(target=lambda: fifo.write_bytes(log.read_bytes()), daemon=True)
    writer.start()
    got, n = logparse.parse_file(fifo, chunk_bytes=1000)
    writer.join(timeout=10)
    assert n == logread.read_lines(log).len() and got.equals(_whole(log))


# --- the screen ---------------------------------------------------------------------------


@pytest.mark.parametrize("event", logformats.EVENT_TYPES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_line_a_recogniser_names_passes_the_screen(event: str, data) -> None:
    rx = logformats.RECOGNISE[event]
    texts = data.draw(st.lists(st.from_regex(rx), min_size=1, max_size=20))
    texts = [t for t in texts if "\n" not in t and "\r" not in t]  # one line each
    s = pl.Series(texts, dtype=pl.String)
    named = s.str.contains(rx)
    screened = s.str.contains(logformats.SCREEN)
    assert (screened | ~named).all(), s.filter(named & ~screened).to_list()


def test_the_screen_passes_every_corpus_event_and_drops_request_noise() -> None:
    noise = '[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions" 200 OK'
    assert not re.search(logformats.SCREEN, noise)
    for log in LOGS:
        lines = logread.read_lines(log)
        for e in logparse.events(logparse.parse_frame(lines)):
            assert re.search(logformats.SCREEN, lines[e["line"] - 1]), (log.name, e["line"])


def test_a_gzip_log_reads_as_the_log_it_packs(tmp_path: Path) -> None:
    """A rotated ``server.log.1.gz``: the same lines and events as the plain file, in any
    chunk size; a cut-off one is an error that says so."""
    import gzip

    log = CORPUS / "sglang_logs.txt"
    packed = tmp_path / "server.log.1.gz"
    packed.write_bytes(gzip.compress(log.read_bytes()))
    assert logread.read_lines(packed, 1000).equals(logread.read_lines(log))
    got, n = logparse.parse_file(packed, chunk_bytes=1000)
    assert n == logread.read_lines(log).len() and got.equals(_whole(log))
    assert got.height > 0
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(packed.read_bytes()[:-100])
    with pytest.raises(OSError, match="not a whole gzip file"):
        logread.read_lines(cut)
