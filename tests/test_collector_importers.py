"""Importers: every nvidia-smi CSV block of the corpus, memory logs, whole server logs."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from collector import exitcodes
from collector.importers import (
    ImportError_,
    nvidia_smi_csv,
    read_nvidia_smi_csv,
)
from collector.logimport import server_log
from collector.memlog import gpu_memory_log, read_gpu_memory_log

CORPUS = Path(__file__).resolve().parent / "corpus"
MIB = 1 << 20


def csv_blocks() -> list[list[str]]:
    out, cur = [], None
    for line in (CORPUS / "nvidia_smi.txt").read_text().splitlines():
        if line.startswith("# source:"):
            cur = []
            out.append(cur)
        elif cur is not None and line and not line.startswith("#"):
            cur.append(line)
    return [b for b in out if b and "," in b[0] and not b[0].startswith(("|", "+", "DCGM"))]


def test_every_corpus_csv_block_imports(tmp_path) -> None:
    blocks = csv_blocks()
    assert len(blocks) == 3
    got = []
    for i, b in enumerate(blocks):
        f = tmp_path / f"b{i}.csv"
        f.write_text("\n".join(b) + "\n")
        got.append(nvidia_smi_csv(f, "h", start=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)))
    assert [(r["gpu_index"], r["memory_used_bytes"]) for r in got[0]] == [
        (0, 103 * MIB),
        (1, 8311 * MIB),
    ]
    assert (
        got[1][0]["gpu_name"] == "NVIDIA GeForce RTX 4090"
        and got[1][0]["utilization_gpu_pct"] == 0.0
    )
    assert got[1][0]["memory_total_bytes"] == 49140 * MIB
    assert got[2][0]["memory_used_bytes"] is None  # [N/A]


def test_repeated_rows_and_timestamps(tmp_path) -> None:
    f = tmp_path / "l.csv"
    f.write_text(
        "timestamp, index, memory.used [MiB], memory.total [MiB], utilization.gpu [%]\n"
        "2026/01/01 00:00:00.000, 0, 100 MiB, 16303 MiB, Not Supported\n"
        "2026/01/01 00:00:00.000, 1, 200 MiB, 16303 MiB, 5 %\n"
        "2026/01/01 00:00:05.000, 0, 110 MiB, 16303 MiB, 7 %\n"
        "2026/01/01 00:00:05.000, 1, 210 MiB, 16303 MiB, 9 %\n"
    )
    rows = nvidia_smi_csv(f, "h")
    assert [r["ts"].second for r in rows] == [0, 0, 5, 5] and rows[0]["utilization_gpu_pct"] is None
    f.write_text("index, memory.used [MiB]\n0, 100 MiB\n1, 200 MiB\n0, 110 MiB\n1, 210 MiB\n")
    rows = nvidia_smi_csv(f, "h", start=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), interval=5)
    assert [(r["gpu_index"], r["ts"].second) for r in rows] == [(0, 0), (1, 0), (0, 5), (1, 5)]


@pytest.mark.parametrize(
    "text,line,msg",
    [
        ("0, 100 MiB\n", 1, "before any header"),
        ("index, memory.used [MiB]\n0, 100 MiB, 3\n", 2, "3 fields"),
        ("index, memory.used [MiB]\n0, lots\n", 2, "unreadable"),
    ],
)
def test_bad_csv_names_file_and_line(tmp_path, text: str, line: int, msg: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(ImportError_, match=rf"bad.csv:{line}: .*{msg}"):
        nvidia_smi_csv(f, "h")


def test_gpu_memory_log(tmp_path) -> None:
    f = tmp_path / "m.log"
    f.write_text("2026-01-01T00:00:00Z 8311\n2026-01-01T00:01:00+00:00 8400\n")
    rows = gpu_memory_log(f, "h", total_mib=16303)
    assert [r["memory_used_bytes"] for r in rows] == [8311 * MIB, 8400 * MIB] and rows[1][
        "ts"
    ].minute == 1
    f.write_text("2026-01-01T00:00:00Z 8311\nyesterday lots\n")
    got = read_gpu_memory_log(f, "h")
    assert len(got.rows) == 1 and got.skipped == 1 and "m.log:2:" in got.summary()
    f.write_text("# header\nyesterday lots\n")
    with pytest.raises(ImportError_, match="m.log:2: no samples"):
        gpu_memory_log(f, "h")


def test_server_log_keeps_signatures_with_line_times(tmp_path) -> None:
    rows = server_log(CORPUS / "sglang_logs.txt", "h")
    sigs = {r["signature"] for r in rows}
    assert {"kv_leak_check", "oom", "server_args", "batch_stats", "kv_capacity"} <= sigs
    dated = [r for r in rows if r["text"].startswith("[2025-11-11 04:28:30]")]
    assert dated and dated[0]["ts"] == dt.datetime(2025, 11, 11, 4, 28, 30, tzinfo=dt.UTC)


def _import(
    kind: str, path: Path, bucket: Path, *extra: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``leakcollect import KIND PATH --host h --bucket BUCKET EXTRA...``, run as a user would."""
    args = ["import", kind, str(path), "--host", "h", "--bucket", str(bucket), *extra]
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_gzip_server_log_imports_as_the_plain_one_and_nothing_found_is_an_error(
    tmp_path,
) -> None:
    import gzip

    log = CORPUS / "sglang_logs.txt"
    packed = tmp_path / "sglang.log.1.gz"
    packed.write_bytes(gzip.compress(log.read_bytes()))
    os.utime(packed, ns=(log.stat().st_atime_ns, log.stat().st_mtime_ns))  # unstamped lines' time
    want = [(r["ts"], r["text"], r["signature"]) for r in server_log(log, "h")]
    assert [(r["ts"], r["text"], r["signature"]) for r in server_log(packed, "h")] == want
    r = _import("server-log", packed, tmp_path / "b")
    assert r.returncode == 0, r.stderr
    assert f"{len(want)} rows into " in r.stderr  # a file per day
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(packed.read_bytes()[:-100])
    for bad, says in [
        (cut, "cut.log.gz: "),
        (tmp_path / "quiet.log", "quiet.log: no line matched a known server-log signature"),
    ]:
        if bad.suffix == ".log":
            bad.write_text("[2026-12-01 10:00:00] INFO: nothing to see\n")
        r = _import("server-log", bad, tmp_path / "nothing")
        assert r.returncode == exitcodes.NOTHING, r.stderr
        assert says in r.stderr and "Traceback" not in r.stderr
        assert not (tmp_path / "nothing").exists()


def test_a_start_without_an_offset_is_read_in_tz(tmp_path) -> None:
    """--tz named the log's zone, but a --start without an offset was read as UTC: every
    sample an hour off in Berlin's winter."""
    import datetime as dt

    f = tmp_path / "nots.csv"
    f.write_text(
        "index, memory.used [MiB], memory.total [MiB]\n0, 100 MiB, 800 MiB\n0, 101 MiB, 800 MiB\n"
    )
    firsts = {}
    for start, tz in [
        ("2026-11-23T10:00:00", "Europe/Berlin"),
        ("2026-11-23T10:00:00+02:00", "Europe/Berlin"),
        ("2026-11-23T10:00:00", None),
    ]:
        b = tmp_path / f"b{len(firsts)}"
        zone = ["--tz", tz] if tz else []
        r = _import("nvidia-smi-csv", f, b, "--start", start, "--interval", "10", *zone)
        assert r.returncode == 0, r.stderr
        (p,) = b.rglob("gpu_samples/*/*/*.parquet")
        firsts[(start, tz)] = min(pq.read_table(p)["ts"].to_pylist())
    utc = dt.UTC
    assert list(firsts.values()) == [
        dt.datetime(2026, 11, 23, 9, tzinfo=utc),  # 10:00 in Berlin (UTC+1 in November)
        dt.datetime(2026, 11, 23, 8, tzinfo=utc),  # its own offset wins
        dt.datetime(2026, 11, 23, 10, tzinfo=utc),
    ]


def test_cli_imports_into_the_bucket(tmp_path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("\n".join(csv_blocks()[0]) + "\n")
    r = _import("nvidia-smi-csv", f, tmp_path / "b", "--start", "2026-01-01T00:00:00Z")
    assert r.returncode == 0, r.stderr
    (p,) = (tmp_path / "b" / "gpu_samples").rglob("*.parquet")
    assert pq.read_table(p).num_rows == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("0, 1\n")
    r = _import("nvidia-smi-csv", bad, tmp_path / "b")
    assert r.returncode == exitcodes.NOTHING and "bad.csv:1:" in r.stderr


# A paste as people post it: a BOM, a banner, the table view, a -l 5 CSV log with a
# blank line, then a --query-compute-apps section (real header and value forms, see
# tests/corpus/nvidia_smi.txt).
PASTE = (
    "\ufeff$ nvidia-smi --query-gpu=timestamp,index,uuid,memory.used,memory.total,utilization.gpu"
    " --format=csv -l 5\n"
    "Mon Aug 22 15:24:23 2022\n"
    "+-----------------------------------------------------------------------------+\n"
    "| NVIDIA-SMI 515.65.01    Driver Version: 515.65.01    CUDA Version: 11.7     |\n"
    "timestamp, index, uuid, memory.used [MiB], memory.total [MiB], utilization.gpu [%]\n"
    "2026/11/23 09:00:00.101, 0, GPU-aaa, 12012 MiB, 16303 MiB, 83 %\n"
    "2026/11/23 09:00:00.109, 1, GPU-bbb, 9000 MiB, 16303 MiB, 0 %\n"
    "\n"
    "2026/11/23 09:00:05.102, 0, GPU-aaa, 12020 MiB, 16303 MiB, 80 %\n"
    "2026/11/23 09:00:05.11\n"
    "2026/11/23 09:00:05.110, 1, GPU-bbb, 9000 MiB, 16303 MiB, 0 %\n"
    "pid, process_name, gpu_uuid, used_gpu_memory [MiB]\n"
    "4101, python3, GPU-aaa, 11500 MiB\n"
    "4102, python3, GPU-bbb, 8600 MiB\n"
)


def test_mixed_paste_keeps_valid_rows_and_counts_the_rest(tmp_path) -> None:
    f = tmp_path / "paste.txt"
    f.write_text(PASTE, encoding="utf-8")
    got = read_nvidia_smi_csv(f, "h", tz="Europe/Berlin")
    assert [(r["gpu_index"], r["memory_used_bytes"] // MIB) for r in got.rows] == [
        (0, 12012),
        (1, 9000),
        (0, 12020),
        (1, 9000),
    ]
    # local time in Berlin (UTC+1 in November) -> UTC
    assert got.rows[0]["ts"] == dt.datetime(2026, 11, 23, 8, 0, 0, 101000, tzinfo=dt.UTC)
    assert got.skipped == 4  # command line, banner date, table border and row, cut-off line
    assert "paste.txt:2:" in got.summary() and "skipped 4 lines" in got.summary()
    procs = sorted(
        (p["pid"], p["gpu_index"], p["used_gpu_memory_bytes"] // MIB) for p in got.processes
    )
    assert procs == [(4101, 0, 11500), (4102, 1, 8600)]
    assert all(p["ts"] == got.rows[-1]["ts"] for p in got.processes)
    with pytest.raises(ImportError_, match="paste.txt:2: "):
        read_nvidia_smi_csv(f, "h", strict=True)


def test_tz_defaults_to_utc_and_rejects_unknown_zones(tmp_path) -> None:
    f = tmp_path / "l.csv"
    f.write_text("timestamp, index, memory.used [MiB]\n2026/11/23 09:00:00.000, 0, 5 MiB\n")
    assert nvidia_smi_csv(f, "h")[0]["ts"] == dt.datetime(2026, 11, 23, 9, tzinfo=dt.UTC)
    ny = nvidia_smi_csv(f, "h", tz="America/New_York")[0]["ts"]
    assert ny == dt.datetime(2026, 11, 23, 14, tzinfo=dt.UTC)
    with pytest.raises(ValueError, match="Mars/Olympus"):
        nvidia_smi_csv(f, "h", tz="Mars/Olympus")


def test_date_and_memory_loop(tmp_path) -> None:
    f = tmp_path / "mem.log"
    # while true; do date; nvidia-smi --query-gpu=memory.used --format=csv,noheader; sleep 10; done
    f.write_text(
        "Mon Nov 23 09:00:00 CET 2026\n12012 MiB\n9000 MiB\n"
        "Mon Nov 23 09:00:10 CET 2026\n"
        "Failed to initialize NVML: Driver/library version mismatch\n"
        "Mon Nov 23 09:00:20 CET 2026\n12030 MiB\n9001 MiB\n"
        "Tue Nov  3 00:00:00 UTC 2026\n100\n"
    )
    got = read_gpu_memory_log(f, "h", total_mib=16303, tz="Europe/Berlin")
    assert [(r["gpu_index"], r["memory_used_bytes"] // MIB) for r in got.rows] == [
        (0, 12012),
        (1, 9000),
        (0, 12030),
        (1, 9001),
        (0, 100),
    ]
    assert got.rows[0]["ts"] == dt.datetime(2026, 11, 23, 8, tzinfo=dt.UTC)
    assert got.rows[-1]["ts"] == dt.datetime(2026, 11, 3, tzinfo=dt.UTC)  # says UTC itself
    assert got.rows[0]["memory_free_bytes"] == (16303 - 12012) * MIB
    assert got.skipped == 1 and "mem.log:5:" in got.summary()


def test_server_log_times_read_in_tz(tmp_path) -> None:
    f = tmp_path / "s.log"
    f.write_text("[2026-11-23 09:00:00] The server is fired up and ready to roll!\n")
    (row,) = server_log(f, "h", tz="Asia/Tokyo")
    assert row["ts"] == dt.datetime(2026, 11, 23, 0, tzinfo=dt.UTC)


def test_an_import_that_fails_after_writing_some_chunks_says_so_and_exits_1(tmp_path) -> None:
    """GPU rows go into the bucket 100,000 at a time: when a later write fails, the rows
    already in are said and the exit is 1 (some written), not 2 ('nothing written')."""
    t0 = dt.datetime(2026, 11, 1)
    f = tmp_path / "smi.csv"
    with f.open("w") as out:
        out.write("timestamp, index, memory.used [MiB]\n")
        for s in range(55_000):  # 2 GPUs every 5 s: 110,000 rows over 3.2 days
            ts = (t0 + dt.timedelta(seconds=5 * s)).strftime("%Y/%m/%d %H:%M:%S")
            out.write(f"{ts}, 0, 100 MiB\n{ts}, 1, 100 MiB\n")
    blocked = tmp_path / "b" / "gpu_samples" / "date=2026-11-04"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the day's folder would go")
    r = _import("nvidia-smi-csv", f, tmp_path / "b", timeout=300)
    assert r.returncode == exitcodes.PARTIAL, r.stderr
    assert "100000 rows were written before it" in r.stderr and "Traceback" not in r.stderr
    kept = sum(pq.read_table(p).num_rows for p in (tmp_path / "b").rglob("*.parquet"))
    assert 100_000 <= kept < 110_000


def test_history_imported_before_the_collector_ran_is_not_quarantined(tmp_path) -> None:
    """The README's upgrade path, found by a user's pass: a host's nvidia-smi log imported,
    then `leakcollect run` started on it. Device samples stamped before a host's first
    collector run are quarantined (a clock that went back), so every imported sample was,
    and the leak in them read "no findings", exit 0. An import now records a run stamped
    at its first sample."""
    from analyzer.bucket import Scope, open_checked
    from collector.writer import BucketWriter

    bucket = tmp_path / "b"
    f = tmp_path / "smi.csv"
    f.write_text(PASTE)
    assert _import("nvidia-smi-csv", f, bucket).returncode == 0
    mem = tmp_path / "mem.log"
    mem.write_text("2026-11-22 08:00:00 1000\n2026-11-22 08:00:10 1010\n")
    assert _import("gpu-memory-log", mem, bucket, "--gpu", "3").returncode == 0
    later = dt.datetime(2026, 11, 23, 12, tzinfo=dt.UTC)  # the collector's first run
    run = {"ts": later, "run_id": "r1", "source": "nvml", "status": "ok", "finished": later}
    BucketWriter(bucket, "h").write("collector_runs", [run])
    o = open_checked(bucket, Scope(), now=later + dt.timedelta(hours=1))
    assert not o.quarantined and not o.unread, (o.quarantined, o.unread)
    assert o.con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (6,)
    runs = o.con.execute(
        "SELECT source, ts, rows FROM collector_runs WHERE source LIKE 'import:%' ORDER BY ts"
    ).fetchall()
    assert [(s, t.astimezone(dt.UTC), n) for s, t, n in runs] == [
        ("import:gpu-memory-log", dt.datetime(2026, 11, 22, 8, tzinfo=dt.UTC), 2),
        ("import:nvidia-smi-csv", dt.datetime(2026, 11, 23, 9, 0, 0, 101000, tzinfo=dt.UTC), 6),
    ]


def _fall_back_log(path: Path) -> list[dt.datetime]:
    """A server log in New York wall time every 10 min through the night the clocks went
    back (2026-11-01: 01:00-01:59 twice); the true times."""
    from zoneinfo import ZoneInfo

    ny = ZoneInfo("America/New_York")
    truth = [
        dt.datetime(2026, 11, 1, 4, tzinfo=dt.UTC) + dt.timedelta(minutes=10 * k) for k in range(25)
    ]
    lines = [
        f"[{t.astimezone(ny):%Y-%m-%d %H:%M:%S}] Decode batch, #running-req: 1, #token: 1, "
        "token usage: 0.05, gen throughput (token/s): 1.0, #queue-req: 0"
        for t in truth
    ]
    path.write_text("\n".join(lines) + "\n")
    return truth


def test_a_log_through_the_night_clocks_go_back_keeps_its_order(tmp_path) -> None:
    """Found by a user's pass: the repeated hour's second pass was read as the first, an
    hour early, so an out-of-memory error and a restart in it moved, and a lifetime's
    leak was lost. A wall time shown twice that reads earlier than a line before it is
    the second. Both the import and `leakreport logs parse`."""
    import polars as pl

    from analyzer.logparse import parse_frame

    f = tmp_path / "ny.log"
    truth = _fall_back_log(f)
    rows = server_log(f, "h", tz="America/New_York")
    assert [r["ts"] for r in rows] == truth
    parsed = parse_frame(pl.Series(f.read_text().splitlines()), tz="America/New_York")
    assert parsed["ts"].to_list() == [f"{t:%Y-%m-%dT%H:%M:%S}" for t in truth]


def test_a_clock_step_and_repeated_samples_are_said(tmp_path) -> None:
    """Found by a user's pass: a log whose clock stepped back an hour skewed the leak
    rate 12 %, and the import said only "kept 8640 rows"."""
    head = "timestamp, index, memory.used [MiB], memory.total [MiB]\n"
    times = ["09:00:00", "09:00:10", "09:00:10", "08:00:20", "08:00:30"]
    f = tmp_path / "step.csv"
    f.write_text(head + "".join(f"2026/11/23 {t}.000, 0, 100 MiB, 1000 MiB\n" for t in times))
    got = read_nvidia_smi_csv(f, "h")
    said = got.summary()
    assert f"the time went back (1 rows, first at {f}:5, by 60 min)" in said, said
    assert "1 samples repeat the one before (read once)" in said, said
    r = _import("nvidia-smi-csv", f, tmp_path / "b")
    assert r.returncode == 0 and "the time went back" in r.stderr, r.stderr
