"""The log parser on the real corpus (tests/corpus) and on the rules it applies to every line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer import loggrade, logparse

CORPUS = Path(__file__).resolve().parent / "corpus"
LABELS = sorted((CORPUS / "labels").glob("*.jsonl"))


def _parse(lines: list[str], **kw) -> list[dict]:
    return list(logparse.events(logparse.parse_frame(pl.Series(lines, dtype=pl.String), **kw)))


def _blocks(path: Path) -> list[tuple[int, int]]:
    """(first, last) line numbers of each '# source:' block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    starts = [i + 1 for i, ln in enumerate(lines) if ln.startswith("# source:")]
    return [(s, e - 1) for s, e in zip(starts, [*starts[1:], len(lines) + 1], strict=True)]


@pytest.mark.parametrize("labels", LABELS, ids=lambda p: p.stem)
def test_each_block_alone_yields_its_labelled_events(labels: Path) -> None:
    """A block parsed on its own (no neighbours to lean on) yields exactly its labels."""
    rows = loggrade.read_labels(labels)
    log = loggrade.log_file_for(labels, rows)
    text = log.read_text(encoding="utf-8").splitlines()
    want = {(r["line"], r["event"]) for r in rows}
    blocks = _blocks(log)
    assert blocks, f"{log.name} has no '# source:' blocks"
    for first, last in blocks:
        got = {(e["line"] + first - 1, e["event"]) for e in _parse(text[first - 1 : last])}
        expected = {k for k in want if first <= k[0] <= last}
        assert got == expected, text[first - 1]


def test_every_corpus_block_names_its_source() -> None:
    for name in ("sglang_logs.txt", "sglang_more.txt", "vllm_logs.txt", "vllm_more.txt"):
        blocks = _blocks(CORPUS / name)
        assert len(blocks) >= 10
    for labels in LABELS:
        for r in loggrade.read_labels(labels):
            assert r["event"] in logparse.EVENT_TYPES


def test_engine_is_told_by_the_line_or_the_file() -> None:
    for name, engine in (("sglang_more.txt", "sglang"), ("vllm_more.txt", "vllm")):
        ev = list(logparse.events(logparse.parse_frame(logparse.read_lines(CORPUS / name))))
        assert ev and {e["engine"] for e in ev} == {engine}, name


# --- timestamps ---------------------------------------------------------------------

_V1 = (
    "INFO 09-18 04:07:30 [loggers.py:310] Engine 000: Avg prompt throughput: 5983.1 tokens/s, "
    "Avg generation throughput: 13.7 tokens/s, Running: 4 reqs, Waiting: 1 reqs, "
    "GPU KV cache usage: 64.6%, Prefix cache hit rate: 24.0%"
)
_SG = "Decode batch. #running-req: 8, #token: 62531, token usage: 0.12, #queue-req: 0"


def test_engine_stamp_wins_over_a_shipper_stamp_and_lends_it_the_year() -> None:
    # docker --timestamps: the stamp in front is docker's; the engine's own is later on the line
    [e] = _parse(
        ["2026-09-18T04:07:31.000000002Z (APIServer pid=1) " + _V1.replace("04:07:30", "04:07:29")]
    )
    assert e["ts"] == "2026-09-18T04:07:29"
    # a viewer's local-time stamp ("date | ") before vLLM's UTC stamp: vLLM's wins
    [e] = _parse(
        [
            "2026-04-19 12:18:36.356 | (APIServer pid=1) "
            + _V1.replace("09-18 04:07:30", "04-19 10:18:36")
        ]
    )
    assert e["ts"] == "2026-04-19T10:18:36"
    # the explicit year wins over the prefix's
    [e] = _parse(["2025-12-31T23:59:59Z " + _V1], year=2026)
    assert e["ts"] == "2026-09-18T04:07:30"


def test_shipper_stamp_used_when_the_engine_wrote_none() -> None:
    [e] = _parse(["2026-09-18T04:07:30.5+02:00 stdout F " + _SG])
    assert e["ts"] == "2026-09-18T02:07:30"  # CRI line, offset honoured


def test_offsets_are_converted_to_utc_and_naive_stamps_read_in_tz() -> None:
    line = "[2025-02-27 04:46:39 +0800] " + _SG
    assert _parse([line])[0]["ts"] == "2025-02-26T20:46:39"
    assert _parse(["[2025-02-27 04:46:39] " + _SG])[0]["ts"] == "2025-02-27T04:46:39"
    naive = _parse(["[2025-02-27 04:46:39] " + _SG], tz="Asia/Shanghai")
    assert naive[0]["ts"] == "2025-02-26T20:46:39"
    assert _parse([line], tz="America/New_York")[0]["ts"] == "2025-02-26T20:46:39"  # offset wins
    summer = _parse(["[2025-07-01 12:00:00] " + _SG], tz="Europe/Berlin")
    assert summer[0]["ts"] == "2025-07-01T10:00:00"
    # vLLM MM-DD without a year: converted, still yearless
    assert _parse([_V1], tz="Asia/Tokyo")[0]["ts"] == "--09-17T19:07:30"
    assert _parse([_V1])[0]["ts"] == "--09-18T04:07:30"


def test_unknown_tz_is_an_error_naming_it() -> None:
    with pytest.raises(Exception, match="Mars/Olympus"):
        _parse([_SG], tz="Mars/Olympus")


# --- wrapped lines, prefixes, code ---------------------------------------------------


def test_wrapped_message_lends_its_fields_to_the_head_line() -> None:
    ev = _parse(
        [
            "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3",
            "has a total capacity of 79.18 GiB of which 8.69 GiB is free.",
            "[rank3]: Traceback (most recent call last):",
            "of which 1.00 GiB is allocated by PyTorch",
        ]
    )
    assert [(e["line"], e["event"]) for e in ev] == [(1, "oom")]
    assert ev[0]["fields"] == {
        "tried_bytes": 2 * 2**30,
        "gpu": 3,
        "total_bytes": round(79.18 * 2**30),
        "free_bytes": round(8.69 * 2**30),
    }  # the line after the traceback header is not joined


def test_continuation_stops_at_a_new_record_or_after_five_lines() -> None:
    head = "RuntimeError: CUDA error: out of memory"
    ev = _parse([head, "a", "b", "c", "d", "e", "Tried to allocate 1.00 GiB"])
    assert ev[0]["fields"] == {}  # sixth line not joined
    ev = _parse([head, "a", "b", "c", "d", "Tried to allocate 1.00 GiB"])
    assert ev[0]["fields"] == {"tried_bytes": 2**30}
    ev = _parse([head, "", "Tried to allocate 1.00 GiB"])
    assert ev[0]["fields"] == {}  # an empty line ends the record
    for breaker in ('  File "x.py", line 3, in f', "    y = f(", "       ^^^^", "  [rank0]: x"):
        ev = _parse([head, breaker, "Tried to allocate 1.00 GiB"])
        assert ev[0]["fields"] == {}, breaker  # traceback and source lines end it too
    ev = _parse([head, "           GPU 0 has a total capacity of 4.00 GiB"])
    assert ev[0]["fields"] == {"gpu": 0, "total_bytes": 4 * 2**30}  # an aligned continuation


def test_collector_and_analyzer_agree_on_what_continues_a_line() -> None:
    from collector import logsig

    assert logsig._NEW_RECORD.pattern == logparse.F.NEW_RECORD
    assert logsig.MAX_CONTINUATION == logparse.F.MAX_CONTINUATION
    assert logsig._REQUEST.pattern == logparse.F.REQUEST_LINE
    assert logsig.ANSI == logparse.F.ANSI
    assert logsig.REQUEST_HEAD == logparse.F.REQUEST_HEAD


# request log lines in the engines' shapes, quoting users' text that reads like events
_ASKED = "My job fails with CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79 GiB"
REQUEST_LINES = [
    f"[2026-12-01 15:00:05] Receive: obj=GenerateReqInput(text='{_ASKED}', rid='a1')",
    f"[2026-12-01 15:00:09] Finish: obj=GenerateReqInput(rid='a1'), out={{'text': '{_ASKED}'}}",
    f"INFO 12-01 15:00:05 logger.py:36] Received request cmpl-7f-0: prompt: '{_ASKED}', "
    "params: SamplingParams(n=1)",
    f"(APIServer pid=9) INFO 12-01 15:00:05 [logger.py:49] Received request chatcmpl-1: "
    f"params: SamplingParams(n=1), prompt: 'ServerArgs(model_path=x) {_ASKED}'",
    f"INFO 12-01 15:00:09 [logger.py:71] Generated response chatcmpl-1: output: '{_ASKED}'",
]


def test_request_log_lines_are_never_events_nor_kept() -> None:
    from collector import logsig

    assert _parse(REQUEST_LINES) == []
    assert [logsig.match(x) for x in REQUEST_LINES] == [None] * len(REQUEST_LINES)
    # the same words outside a request line still are events
    (oom,) = _parse([f"[2026-12-01 15:00:05] torch.OutOfMemoryError: {_ASKED}"])
    assert oom["event"] == "oom"
    assert logsig.match(f"torch.OutOfMemoryError: {_ASKED}") == "oom"


def test_numbers_before_an_old_leak_check_line_are_read() -> None:
    [e] = _parse(
        [
            " UserWarning: Warning: available_size=35244, max_total_num_token=42308",
            "KV cache pool leak detected!",
        ]
    )
    assert e["line"] == 2
    assert e["fields"] == {
        "pool": "kv_cache_pool",
        "available_size": 35244,
        "max_total_num_tokens": 42308,
    }


def test_quoted_source_code_is_not_an_event() -> None:
    assert _parse(['assert not swa_leak, f"SWA Pool Mem Leak Detected! {swa_msg}"']) == []
    assert (
        _parse(['    raise ValueError("token_to_kv_pool_allocator memory leak detected!")']) == []
    )
    assert _parse(["Error: Memory leak detected - 128 bytes were never freed."]) == []


def test_vllm_flags_normalised_to_the_cohort_names() -> None:
    [args] = [
        e
        for e in _parse(
            [
                "(APIServer pid=7) INFO 11-03 05:51:44 [utils.py:233] non-default args: {'model': 'm', "
                "'max_model_len': 4096, 'tensor_parallel_size': 2, 'gpu_memory_utilization': 0.96, "
                "'enforce_eager': True}"
            ]
        )
        if e["event"] == "server_args"
    ]
    assert args["fields"] == {
        "model_path": "m",
        "max_model_len": 4096,
        "tp_size": 2,
        "gpu_memory_utilization": 0.96,
        "enforce_eager": True,
    }


# --- the command and arbitrary input ---------------------------------------------------


def test_cli_jsonl_garbage_and_tz(tmp_path) -> None:
    f = tmp_path / "mixed.log"
    f.write_bytes(
        b"\x00\xff garbage \xfe\n"
        b"[2025-02-27 04:46:39 TP0] Decode batch. #running-req: 8, #token: 62531, token usage: 0.12, gen throughput (token/s): 186.64, #queue-req: 0\n"
        + b"x"
        * 100_000
        + b"\n"
        b"partial line without newline Decode batch, #running-req: 3"
    )
    r = subprocess.run(
        [sys.executable, "-m", "leakreport", "logs", "parse", str(f)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(e["line"], e["event"]) for e in rows] == [(2, "batch_stats"), (4, "batch_stats")]
    assert rows[0]["fields"]["running_reqs"] == 8 and rows[1]["fields"]["running_reqs"] == 3
    assert rows[0]["ts"] == "2025-02-27T04:46:39"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=30))
def test_never_raises_on_arbitrary_text(lines: list[str]) -> None:
    frame = logparse.parse_frame(pl.Series(lines, dtype=pl.String))
    for e in logparse.events(frame):
        assert e["event"] in logparse.EVENT_TYPES


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "RuntimeError: CUDA error: out of memory",
                "KV cache pool leak detected!",
                "has a total capacity of 1 GiB",
                "",
                "[2025-01-01 00:00:00] Decode batch. #running-req: 1",
                "2026-01-01T00:00:00Z x",
                "self.tree_cache.evictable_size()=3",
            ]
        ),
        max_size=40,
    )
)
def test_event_lines_never_move_whatever_follows(lines: list[str]) -> None:
    for e in _parse(lines):
        assert lines[e["line"] - 1]  # an event sits on a non-empty line it names


def test_a_terminal_wrap_inside_a_number_or_a_size() -> None:
    [e] = _parse(
        ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.2", "5 GiB. GPU 0"]
    )
    assert e["fields"] == {"tried_bytes": round(1.25 * 2**30), "gpu": 0}
    [e] = _parse(["[2025-02-27 04:46:39 TP0] Decode batch. #running-req: 1", "2, #queue-req: 3"])
    assert e["fields"] == {"running_reqs": 12, "queue_reqs": 3}


def test_a_coloured_log_reads_as_the_plain_one(tmp_path) -> None:
    """vLLM colours its level, its stamp and its file (and SGLang's can be coloured by a
    shipper): the codes are taken out before stamps and events are read, and are not
    stored."""
    from collector import logsig
    from collector.logimport import server_log

    plain = [
        "INFO 12-01 09:59:01 [api_server.py:1043] vLLM API server version 0.9.1",
        "WARNING 12-01 10:00:00 [loggers.py:118] Engine 000: Avg prompt throughput: 100.0 "
        "tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 10.0%",
    ]
    grey, end = "\x1b[90m", "\x1b[0m"
    coloured = [
        f"\x1b[32mINFO{end} {grey}12-01 09:59:01{end} {grey}[api_server.py:1043]{end} "
        "vLLM API server version 0.9.1",
        f"\x1b[1;33mWARNING{end} {grey}12-01 10:00:00{end} {grey}[loggers.py:118]{end} "
        + plain[1].split("] ", 1)[1],
    ]
    assert [logsig.plain(x) for x in coloured] == plain
    want = _parse(plain, year=2026)
    assert [e["ts"] for e in want] == ["2026-12-01T09:59:01", "2026-12-01T10:00:00"]
    assert _parse(coloured, year=2026) == want
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(coloured) + "\n")
    rows = server_log(log, "h", year=2026)
    assert [r["text"] for r in rows] == plain
    assert [r["ts"].isoformat() for r in rows] == [
        "2026-12-01T09:59:01+00:00",
        "2026-12-01T10:00:00+00:00",
    ]
