"""Server logs through the collector (signatures, continuation lines, line times) and the
bucket (log_events, server_info, fleet cohorts): the same events as parsing the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer import loggrade, logparse

CORPUS = Path(__file__).resolve().parent / "corpus"
LABELS = sorted((CORPUS / "labels").glob("*.jsonl"))


def _blocks(path: Path) -> list[tuple[int, int]]:
    """(first, last) line numbers of each '# source:' block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    starts = [i + 1 for i, ln in enumerate(lines) if ln.startswith("# source:")]
    return [(s, e - 1) for s, e in zip(starts, [*starts[1:], len(lines) + 1], strict=True)]


# --- through the collector and the bucket ------------------------------------------------


def _block(name: str, source_start: str) -> list[str]:
    lines = (CORPUS / name).read_text(encoding="utf-8").splitlines()
    [(first, last)] = [
        (s, e)
        for s, e in _blocks(CORPUS / name)
        if lines[s - 1].startswith("# source: " + source_start)
    ]
    return lines[first:last]


def _import(tmp_path: Path, bucket: Path, host: str, lines: list[str]) -> None:
    from collector.logimport import server_log
    from collector.writer import BucketWriter

    f = tmp_path / f"{host}.log"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = server_log(f, host, year=2026)
    assert rows, host
    BucketWriter(str(bucket), host).write("log_lines", rows)


def test_vllm_cohorts_from_real_vllm_logs_carry_their_flags(tmp_path) -> None:
    """Servers seen only through their logs: server_info and the fleet cohort get the
    flags vLLM states in 'non-default args' (and the version its API server prints)."""
    from analyzer.fleet import cohort_of
    from analyzer.packs import load_packs
    from analyzer.runner import analyze

    bucket = tmp_path / "bucket"
    viewer = _block("vllm_more.txt", "GitHub repository file (docker log viewer export")
    collapsed = _block(
        "vllm_more.txt", "GitHub repository file (issue digest quoting vLLM 0.11.0 with LoRA"
    )
    _import(tmp_path, bucket, "gpu-a", viewer)
    _import(tmp_path, bucket, "gpu-b", collapsed)
    doc = analyze(bucket, load_packs())
    hosts = {h.host: h for h in doc.hosts}
    a, b = hosts["gpu-a"], hosts["gpu-b"]
    assert (a.engine, a.model) == ("vllm", "RedHatAI/Qwen3.6-35B-A3B-NVFP4")
    assert a.flags == {"gpu_memory_utilization": 0.8}
    assert (b.engine, b.engine_version) == ("vllm", "0.11.0")
    assert b.flags == {"gpu_memory_utilization": 0.96, "tp_size": 2}
    assert cohort_of(a)[:3] == ("vllm", "?", "gpu_memory_utilization=0.8")
    assert cohort_of(b)[:3] == ("vllm", "0.11.0", "gpu_memory_utilization=0.96")


def test_a_wrapped_record_survives_the_collector(tmp_path) -> None:
    """The collector keeps the lines that continue a kept line; the analyzer joins only
    lines that were adjacent in the file."""
    from analyzer import logevents
    from analyzer.bucket import open_bucket

    bucket = tmp_path / "bucket"
    leak = _block("sglang_more.txt", "sgl-project/sglang#6888")
    oom = _block("torch_more.txt", "GitHub repository file (deployment notes with a vLLM server")
    _import(tmp_path, bucket, "h", leak + ["unkept line between"] + oom)
    con, _ = open_bucket(bucket)
    logevents.build(con)
    got = con.sql(
        'SELECT event, pool, evictable_size, allocated_bytes, reserved_bytes FROM log_events ORDER BY "offset"'
    ).fetchall()
    assert got == [
        ("kv_leak_check", "token_to_kv_pool_allocator", 325120, None, None),
        ("oom", None, None, round(15.04 * 2**30), round(4.72 * 2**20)),
    ]


def test_log_events_without_log_lines_have_the_parsed_table_s_columns(tmp_path) -> None:
    """A bucket with no log lines makes log_events from the column list alone (no polars):
    the same columns and types as one parsed from lines, and server_info's view binds."""
    from analyzer import logevents
    from analyzer.bucket import open_bucket

    bucket = tmp_path / "bucket"
    _import(tmp_path, bucket, "h", _block("sglang_more.txt", "sgl-project/sglang#6888"))
    con, _ = open_bucket(bucket)
    assert logevents.build(con) > 0
    parsed = con.sql("DESCRIBE log_events").fetchall()
    con.execute("CREATE TABLE no_lines AS SELECT * FROM log_lines LIMIT 0")
    con.execute("CREATE OR REPLACE VIEW log_lines AS SELECT * FROM no_lines")
    assert logevents.build(con) == 0
    assert con.sql("DESCRIBE log_events").fetchall() == parsed
    assert con.execute("SELECT count(*) FROM log_server_info").fetchone() == (0,)


@pytest.mark.parametrize("labels", LABELS, ids=lambda p: p.stem)
def test_the_bucket_path_reads_what_the_file_says(tmp_path, labels: Path) -> None:
    """Through the collector (signatures, continuation lines, its own times) and the
    analyzer's log_events, every labelled event comes out with its labelled fields, and
    nothing else: the collector keeps every line the parser needs."""
    from analyzer import logevents
    from analyzer.bucket import open_bucket
    from collector.logimport import server_log
    from collector.writer import BucketWriter

    rows = loggrade.read_labels(labels)
    log = loggrade.log_file_for(labels, rows)
    kept = server_log(log, "h", year=2025)  # MM-DD stamps in the past, whatever today is
    BucketWriter(str(tmp_path / "b"), "h").write("log_lines", kept)
    con, _ = open_bucket(tmp_path / "b")
    logevents.build(con)
    starts = [0]
    for raw in log.read_bytes().splitlines(keepends=True):
        starts.append(starts[-1] + len(raw))
    line_of = {off: n for n, off in enumerate(starts[:-1], 1)}
    frame = con.sql('SELECT * FROM log_events ORDER BY "offset", event').pl()
    got = {}
    for e in frame.iter_rows(named=True):
        wanted = logparse.F.FIELDS[e["event"]]
        fields = {k: v for k, v in e.items() if k in wanted and v is not None}
        if e["event"] == "fast_image_processor":
            fields = {"enabled": e["enabled"]}
        got[(line_of[e["offset"]], e["event"])] = fields
    want = {(r["line"], r["event"]): r["fields"] for r in rows}
    assert got.keys() == want.keys()
    for key, fields in want.items():
        assert loggrade._fields_equal(fields, got[key]), (key, got[key], fields)


def test_collector_matcher_keeps_continuations_only_after_event_lines() -> None:
    from collector.logsig import Matcher

    m = Matcher()
    got = [
        m.match(x)
        for x in [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a",
            "total capacity of 79.18 GiB of which 24.06 MiB is free.",
            "b",
            "c",
            "d",
            "e",
            "f",  # a sixth line is not kept
            "Uvicorn running on http://0.0.0.0:8000",  # restart: keeps nothing after it
            "e",
            "ValueError: token_to_kv_pool_allocator memory leak detected! available_size=1",
            "[2025-06-06 01:56:27] Received sigquit",  # a new record closes the event
            "self.tree_cache.evictable_size()=3",
        ]
    ]
    assert got == [
        "oom",
        "continuation",
        "continuation",
        "continuation",
        "continuation",
        "continuation",
        None,
        "restart",
        None,
        "kv_leak_check",
        None,
        None,
    ]


def test_binary_bytes_after_an_event_line_are_no_continuation(tmp_path) -> None:
    """Bytes that are no text after an OOM line (a core dump written into the log, the
    zeros of a preallocated file past a hole) were stored as up to five continuation rows
    of replacement marks. A continuation is text now; a torn character at a cut is."""
    import datetime as dt
    import os

    from collector.logtail import tail

    log = tmp_path / "server.log"
    oom = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    text = "total capacity of 79.18 GiB of which 24.06 MiB is free \u00e9".encode()
    log.write_bytes(oom + text + b"\xe2\x82\n" + os.urandom(3000).replace(b"\n", b"") + b"\n")
    res = tail(str(log), None, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "h")
    assert [r["signature"] for r in res.rows] == ["oom", "continuation"], res.rows
    assert res.rows[1]["text"].endswith("free \u00e9\ufffd")
    assert res.unmatched == 1
    # text in another encoding is text: Latin-1 accents decode to a few marks (review)
    log.write_bytes(
        oom + "Gr\u00f6\u00dfe \u00fcberschritten f\u00fcr Ger\u00e4t 0\n".encode("latin-1")
    )
    res = tail(str(log), None, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "h")
    assert [r["signature"] for r in res.rows] == ["oom", "continuation"], res.rows


def test_collector_line_time_policy() -> None:
    import datetime as dt
    from zoneinfo import ZoneInfo

    from collector.logsig import line_time

    utc = dt.UTC
    v = "(APIServer pid=1) INFO 04-19 10:18:36 [utils.py:233] non-default args: {}"
    assert line_time("2026-04-19 12:18:36.356 | " + v, None) == dt.datetime(
        2026, 4, 19, 10, 18, 36, tzinfo=utc
    )
    assert line_time(v, None) is None  # no year anywhere
    assert line_time(v, None, fallback_year=2025) == dt.datetime(
        2025, 4, 19, 10, 18, 36, tzinfo=utc
    )
    stamped = line_time("2026-01-01T00:00:00Z " + v, 2024)
    assert stamped is not None and stamped.year == 2024  # a person's --year wins
    assert line_time("2026-09-18T04:07:30.5+02:00 stdout F x", None) == dt.datetime(
        2026, 9, 18, 2, 7, 30, tzinfo=utc
    )
    sh = ZoneInfo("Asia/Shanghai")
    assert line_time("[2025-02-27 04:46:39 TP0] x", None, sh) == dt.datetime(
        2025, 2, 26, 20, 46, 39, tzinfo=utc
    )
    assert line_time("[2025-02-27 04:46:39 +0000] x", None, sh) == dt.datetime(
        2025, 2, 27, 4, 46, 39, tzinfo=utc
    )
    assert line_time("no time here", 2025) is None
    assert line_time("[2025-02-30 04:46:39] x", None) is None  # not a date: no time, no error
