"""Importer units, times and bookkeeping: the details a mutation check found untested.

nvidia-smi prints MiB when asked for ``nounits`` (and in ``[MiB]`` headers); a value
with its own unit (GiB, KiB, MB, B ...) keeps it. An 8311 that imports as 8311
bytes instead of 8311 MiB would make every leak look 1,048,576 times smaller.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from collector.importers import (
    Imported,
    ImportError_,
    nvidia_smi_csv,
    read_nvidia_smi_csv,
    zone,
)
from collector.memlog import gpu_memory_log, read_gpu_memory_log

MIB = 1 << 20
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _csv(tmp_path: Path, text: str, **kw) -> list[dict]:
    f = tmp_path / "smi.csv"
    f.write_text(text)
    return nvidia_smi_csv(f, "h", start=T0, **kw)


def test_unitless_values_with_columns_are_mib(tmp_path) -> None:
    # `--format=csv,noheader,nounits` output, header given with --columns, no units anywhere
    rows = _csv(
        tmp_path,
        "0, 8311, 16303\n1, 103, 16303\n",
        columns="index,memory.used,memory.total",
    )
    assert [(r["gpu_index"], r["memory_used_bytes"]) for r in rows] == [
        (0, 8311 * MIB),
        (1, 103 * MIB),
    ]
    assert rows[0]["memory_total_bytes"] == 16303 * MIB
    assert rows[0]["memory_free_bytes"] == (16303 - 8311) * MIB
    assert all(r["host"] == "h" for r in rows)


def test_unitless_values_under_a_unit_header(tmp_path) -> None:
    rows = _csv(tmp_path, "index, memory.used [GiB]\n0, 2\n1, 0.5\n")
    assert [r["memory_used_bytes"] for r in rows] == [2 << 30, 1 << 29]
    rows = _csv(tmp_path, "index, memory.used [KiB]\n0, 2048\n")
    assert rows[0]["memory_used_bytes"] == 2048 << 10
    rows = _csv(tmp_path, "index, memory.used [ MiB ]\n0, 7\n")  # spaces inside the brackets
    assert rows[0]["memory_used_bytes"] == 7 * MIB
    rows = _csv(tmp_path, "INDEX, MEMORY.USED [GIB]\n0, 3\n")  # case does not matter
    assert rows[0]["memory_used_bytes"] == 3 << 30


@pytest.mark.parametrize(
    "value,expected",
    [
        ("8311 MiB", 8311 * MIB),
        ("8311 mib", 8311 * MIB),
        ("2 GiB", 2 << 30),
        ("1.5 GiB", int(1.5 * (1 << 30))),
        ("512 KiB", 512 << 10),
        ("4096 B", 4096),
        ("100 MB", 100 * MIB),  # nvidia-smi's "MB" is MiB
        ("2 GB", 2 << 30),
        ("64 KB", 64 << 10),
        ("8311", 8311 * MIB),
    ],
)
def test_a_value_keeps_its_own_unit(tmp_path, value, expected) -> None:
    # the header says MiB; the value's own unit wins where it has one
    rows = _csv(tmp_path, f"index, memory.used [MiB]\n0, {value}\n")
    assert rows[0]["memory_used_bytes"] == expected
    assert isinstance(rows[0]["memory_used_bytes"], int)


def test_indexes_and_pids_are_integers_percentages_floats(tmp_path) -> None:
    f = tmp_path / "apps.csv"
    f.write_text(
        "index, uuid, memory.used [MiB], utilization.gpu [%]\n"
        "1, GPU-b, 100 MiB, 7 %\n"
        "pid, process_name, gpu_uuid, used_gpu_memory [MiB]\n"
        "4242, python3, GPU-b, 90 MiB\n"
    )
    got = read_nvidia_smi_csv(f, "h", start=T0)
    (row,) = got.rows
    assert type(row["gpu_index"]) is int and row["gpu_index"] == 1
    assert type(row["utilization_gpu_pct"]) is float and row["utilization_gpu_pct"] == 7.0
    (proc,) = got.processes
    assert type(proc["pid"]) is int and proc["pid"] == 4242
    assert proc["used_gpu_memory_bytes"] == 90 * MIB and proc["gpu_index"] == 1


def test_times_in_rows_and_zones(tmp_path) -> None:
    text = (
        "timestamp, index, memory.used [MiB]\n"
        "2026/01/01 10:00:00, 0, 1\n"  # no fraction
        "2026/01/01 10:00:05.250, 0, 2\n"
        "2026-01-01T10:00:10Z, 0, 3\n"  # ISO with Z is UTC whatever tz says
    )
    rows = _csv(tmp_path, text, tz="Europe/Berlin")  # UTC+1 in January
    assert [r["ts"] for r in rows] == [
        dt.datetime(2026, 1, 1, 9, 0, 0, tzinfo=dt.UTC),
        dt.datetime(2026, 1, 1, 9, 0, 5, 250000, tzinfo=dt.UTC),
        dt.datetime(2026, 1, 1, 10, 0, 10, tzinfo=dt.UTC),
    ]
    f = tmp_path / "bad.csv"
    f.write_text("timestamp, index, memory.used [MiB]\nyesterday, 0, 1\n")
    with pytest.raises(ImportError_, match=r"bad.csv:2: unreadable timestamp 'yesterday'"):
        read_nvidia_smi_csv(f, "h", start=T0, strict=True)


def test_zone_names() -> None:
    assert zone(None) is dt.UTC
    assert zone("utc") is dt.UTC and zone("Z") is dt.UTC and zone("z") is dt.UTC
    fixed = dt.timezone(dt.timedelta(hours=5))
    assert zone(fixed) is fixed
    assert str(zone("Asia/Tokyo")) == "Asia/Tokyo"
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        zone("Mars/Olympus")
    assert zone("+02:00") == dt.timezone(dt.timedelta(hours=2))
    assert zone("UTC+5:30") == zone("+0530") == dt.timezone(dt.timedelta(hours=5, minutes=30))
    assert zone("-08") == dt.timezone(dt.timedelta(hours=-8))
    assert zone("+00:00") is dt.UTC
    for bad in ("+25:00", "+02:61", "2", "+"):
        with pytest.raises(ValueError, match="unknown time zone"):
            zone(bad)


def test_rows_without_times_step_by_interval(tmp_path) -> None:
    text = "index, memory.used [MiB]\n0, 1\n1, 1\n0, 2\n1, 2\n0, 3\n"
    rows = _csv(tmp_path, text)  # default: one second apart
    assert [(r["ts"] - T0).total_seconds() for r in rows] == [0, 0, 1, 1, 2]
    rows = _csv(tmp_path, text, interval=2.5)
    assert [(r["ts"] - T0).total_seconds() for r in rows] == [0, 0, 2.5, 2.5, 5]


def test_skip_summary_counts_and_shows_the_first_five() -> None:
    got = Imported(rows=[{}, {}], processes=[{}])
    assert got.summary() == "kept 2 rows and 1 process rows"
    for n in range(1, 8):
        got.skip("f.csv", n, f"bad {n}")
    assert got.skipped == 7 and len(got.skipped_examples) == 5
    assert got.summary() == (
        "kept 2 rows and 1 process rows; skipped 7 lines (f.csv:1: bad 1; f.csv:2: bad 2; "
        "f.csv:3: bad 3; f.csv:4: bad 4; f.csv:5: bad 5, ...)"
    )
    few = Imported(rows=[{}])
    few.skip("f.csv", 3, "why")
    assert few.summary() == "kept 1 rows; skipped 1 lines (f.csv:3: why)"


def test_memory_log_units_gpus_and_totals(tmp_path) -> None:
    f = tmp_path / "mem.log"
    f.write_text(
        "2026-01-01T00:00:00Z 8311\n"
        "2026-01-01T00:00:10+01:00 8400 MiB\n"  # its own offset
        "2026-01-01 00:00:20 8500.5\n"  # naive: read in tz
    )
    rows = gpu_memory_log(f, "h", gpu=3, total_mib=16000, tz="Europe/Berlin")
    assert [r["memory_used_bytes"] for r in rows] == [8311 * MIB, 8400 * MIB, int(8500.5 * MIB)]
    assert [r["ts"] for r in rows] == [
        dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        dt.datetime(2025, 12, 31, 23, 0, 10, tzinfo=dt.UTC),
        dt.datetime(2025, 12, 31, 23, 0, 20, tzinfo=dt.UTC),
    ]
    assert {r["gpu_index"] for r in rows} == {3} and {r["host"] for r in rows} == {"h"}
    assert rows[0]["memory_total_bytes"] == 16000 * MIB
    assert rows[0]["memory_free_bytes"] == (16000 - 8311) * MIB
    bare = gpu_memory_log(f, "h")
    assert bare[0]["memory_total_bytes"] is None and bare[0]["memory_free_bytes"] is None
    assert bare[0]["gpu_index"] == 0


def test_memory_log_date_loop_numbers_gpus_from_gpu(tmp_path) -> None:
    f = tmp_path / "loop.log"
    f.write_text(
        "Mon Nov 23 00:00:10 UTC 2026\n"
        "100 MiB\n"
        "200 MiB\n"
        "Mon Nov 23 01:00:10 CET 2026\n"  # not UTC: read in tz
        "110\n"
        "210\n"
    )
    got = read_gpu_memory_log(f, "h", gpu=2, tz="Europe/Berlin")
    assert [(r["gpu_index"], r["memory_used_bytes"] // MIB) for r in got.rows] == [
        (2, 100),
        (3, 200),
        (2, 110),
        (3, 210),
    ]
    assert got.rows[0]["ts"] == dt.datetime(2026, 11, 23, 0, 0, 10, tzinfo=dt.UTC)
    assert got.rows[2]["ts"] == dt.datetime(2026, 11, 23, 0, 0, 10, tzinfo=dt.UTC)
    assert got.skipped == 0


def test_memory_log_with_nothing_readable_names_the_first_bad_line(tmp_path) -> None:
    f = tmp_path / "junk.log"
    f.write_text("# a comment\n\nnvidia-smi has failed\nagain\n")
    with pytest.raises(ImportError_, match=r"junk.log:3: no samples; expected '<ISO-8601"):
        read_gpu_memory_log(f, "h")
    f.write_text("")
    with pytest.raises(ImportError_, match=r"junk.log:1: no samples$"):
        read_gpu_memory_log(f, "h")
    f.write_text("2026-13-45T00:00:00 12\n2026-01-01T00:00:00Z 5\n")
    got = read_gpu_memory_log(f, "h")
    assert len(got.rows) == 1 and got.skipped == 1
    assert got.skipped_examples == ["" + str(f) + ":1: unreadable time '2026-13-45T00:00:00'"]


def test_noheader_without_an_index_numbers_gpus_by_position(tmp_path) -> None:
    rows = _csv(tmp_path, "100\n200\n", columns="memory.used")
    assert [(r["gpu_index"], r["memory_used_bytes"] // MIB) for r in rows] == [(0, 100), (1, 200)]
    assert [r["ts"] for r in rows] == [T0, T0]


def test_a_given_free_value_is_kept_not_recomputed(tmp_path) -> None:
    rows = _csv(
        tmp_path,
        "index, memory.used [MiB], memory.free [MiB], memory.total [MiB]\n0, 100, 50, 1000\n",
    )
    assert rows[0]["memory_free_bytes"] == 50 * MIB  # NVML's free is not total - used


def test_process_rows_take_gpu_and_time_from_the_gpu_rows(tmp_path) -> None:
    f = tmp_path / "apps.csv"
    f.write_text(
        "pid, process_name, gpu_uuid, used_gpu_memory [MiB]\n"
        "11, early, GPU-a, 10 MiB\n"  # printed before any GPU sample: the next sample's time
        "timestamp, index, uuid, memory.used [MiB]\n"
        "2026/01/01 00:00:05, 0, GPU-a, 100 MiB\n"
        "pid, process_name, gpu_uuid, used_gpu_memory [MiB]\n"
        "12, late, GPU-a, 20 MiB\n"
        "13, elsewhere, GPU-z, 30 MiB\n"
    )
    got = read_nvidia_smi_csv(f, "h", start=T0)
    when = dt.datetime(2026, 1, 1, 0, 0, 5, tzinfo=dt.UTC)
    assert [(p["pid"], p["gpu_index"], p["ts"]) for p in got.processes] == [
        (11, 0, when),
        (12, 0, when),
        (13, None, when),
    ]
    assert all("process_name" not in p and p["host"] == "h" for p in got.processes)
    assert all("pid" not in r for r in got.rows)
    # only process rows: they take the file's start
    f.write_text("pid, gpu_uuid, used_gpu_memory [MiB]\n14, GPU-a, 5 MiB\n")
    (only,) = read_nvidia_smi_csv(f, "h", start=T0).processes
    assert only["ts"] == T0 and only["gpu_index"] is None


def test_times_are_utc_whatever_the_machine_zone(tmp_path, monkeypatch) -> None:
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        f = tmp_path / "smi.csv"
        f.write_text("timestamp, index, memory.used [MiB]\n2026/01/01 10:00:00, 0, 1\n")
        (row,) = nvidia_smi_csv(f, "h", tz="Europe/Berlin")
        assert row["ts"].tzinfo is dt.UTC and row["ts"].hour == 9
        f.write_text("index, memory.used [MiB]\n0, 1\n")
        os.utime(f, (1767225600, 1767225600))  # 2026-01-01T00:00:00Z
        (row,) = nvidia_smi_csv(f, "h")  # no times: the last sample is at the file's mtime
        assert row["ts"] == dt.datetime(2026, 1, 1, tzinfo=dt.UTC) and row["ts"].tzinfo is dt.UTC
        m = tmp_path / "mem.log"
        m.write_text("2026-01-01 10:00:00 5\n")
        (mem,) = gpu_memory_log(m, "h", tz="Europe/Berlin")
        assert mem["ts"].tzinfo is dt.UTC and mem["ts"].hour == 9
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_concatenated_exports_bad_bytes_and_comments(tmp_path) -> None:
    f = tmp_path / "cat.csv"
    part = "\ufeffindex, memory.used [MiB]\n0, 100 MiB\n"
    # the second export's byte-order mark is mid-file: its header is still a header
    again = "\ufeffmemory.used [MiB], index\n300 MiB, 1\n"
    f.write_bytes(
        (part + "# 0, 999 MiB  a comment, not data\n" + again).encode("utf-8")
        + b"banner \xff\xfe not utf-8\n"
    )
    got = read_nvidia_smi_csv(f, "h", start=T0)
    assert [(r["gpu_index"], r["memory_used_bytes"] // MIB) for r in got.rows] == [
        (0, 100),
        (1, 300),
    ]
    assert got.skipped == 1 and got.skipped_examples[0].startswith(f"{f}:6: ")
    m = tmp_path / "mem.log"
    m.write_bytes("\ufeff2026-01-01T00:00:00Z 5\n".encode() + b"\xff junk\n")
    got = read_gpu_memory_log(m, "h")
    assert len(got.rows) == 1 and got.skipped == 1


def test_skip_reasons_and_empty_files(tmp_path) -> None:
    f = tmp_path / "s.csv"
    f.write_text("0, 1\nindex, memory.used [MiB]\n0, 1, 2\n0, 5\n")
    got = read_nvidia_smi_csv(f, "h", start=T0)
    assert got.skipped_examples == [
        f"{f}:1: data before any header line (give --columns for noheader output)",
        f"{f}:3: 3 fields, header has 2",
    ]
    f.write_text("index, memory.used [MiB]\n")
    with pytest.raises(ImportError_) as e:
        read_nvidia_smi_csv(f, "h", start=T0)
    assert str(e.value) == f"{f}:1: no data rows"
    m = tmp_path / "m.log"
    m.write_text("a: b: c\n")
    with pytest.raises(ImportError_) as e:
        read_gpu_memory_log(m, "h")
    assert (
        str(e.value)
        == f"{m}:1: no samples; expected '<ISO-8601 time> <MiB>' or a date line, got 'a: b: c'"
    )
    long = "x" * 100
    m.write_text(long + "\n")
    got_err = pytest.raises(ImportError_, read_gpu_memory_log, m, "h")
    assert repr("x" * 80) in str(got_err.value) and repr("x" * 81) not in str(got_err.value)


def test_a_skip_reason_is_the_whole_message(tmp_path) -> None:
    folder = tmp_path / "smi exports"  # a space in the path
    folder.mkdir()
    f = folder / "s.csv"
    f.write_text("index, memory.used [MiB]\n0, a: b\n0, 5\n")
    got = read_nvidia_smi_csv(f, "h", start=T0)
    assert got.skipped_examples == [f"{f}:2: unreadable memory_used_bytes value 'a: b'"]
    assert [r["memory_used_bytes"] for r in got.rows] == [5 * MIB]


def test_date_loop_zone_names_and_gpu_counting(tmp_path) -> None:
    f = tmp_path / "loop.log"
    f.write_text(
        "Mon Nov 23 00:00:10 GMT 2026\n100\n200\n"
        "Mon Nov 23 00:01:10 +0000 2026\n110\n"
        "Mon Nov 23 01:02:10 CET 2026\n120\n"
    )
    got = read_gpu_memory_log(f, "h", tz="Europe/Berlin")
    assert [(r["gpu_index"], r["ts"].strftime("%H:%M:%S")) for r in got.rows] == [
        (0, "00:00:10"),
        (1, "00:00:10"),
        (0, "00:01:10"),  # GPU numbering starts again after each date line
        (0, "00:02:10"),  # CET read in the given zone
    ]


def test_server_log_rows_are_complete(tmp_path) -> None:
    from collector.logimport import server_log
    from collector.logsig import MAX_LINE_BYTES

    batch = "Decode batch, #running-req: 1, #token: 7, token usage: 0.04, gen throughput (token/s): 1.0, #queue-req: 0"
    exact = "[2025-11-11 04:28:31] " + batch
    exact += "X" * (MAX_LINE_BYTES - len(exact) - 1)  # with its newline: exactly the limit
    lines = [
        b"[2025-11-11 04:28:30] " + batch.encode() + b" \r\n",  # only CR LF go
        b"INFO 11-12 05:00:00 " + batch.encode() + b"\n",  # MM-DD: the year is given
        b"no time here \xff " + batch.encode() + b"\n",  # takes the line before's time
        exact.encode() + b"\n",
        b"[2025-11-11 04:28:32] " + batch.encode() + b" " + b"y" * MAX_LINE_BYTES + b"\n",
    ]
    f = tmp_path / "server.log"
    f.write_bytes(b"".join(lines))
    os.utime(f, (1767225600, 1767225600))  # mtime 2026-01-01
    rows = server_log(f, "h", year=2025)
    offsets = [sum(len(x) for x in lines[:i]) for i in range(len(lines))]
    assert [r["offset"] for r in rows] == offsets
    assert {r["host"] for r in rows} == {"h"} and {r["file"] for r in rows} == {str(f)}
    assert {r["inode"] for r in rows} == {f.stat().st_ino}
    assert [r["truncated"] for r in rows] == [False, False, False, False, True]
    assert rows[0]["text"] == "[2025-11-11 04:28:30] " + batch + " " and rows[3]["text"] == exact
    assert "\ufffd" in rows[2]["text"]
    utc = dt.UTC
    assert [r["ts"] for r in rows[:3]] == [
        dt.datetime(2025, 11, 11, 4, 28, 30, tzinfo=utc),
        dt.datetime(2025, 11, 12, 5, 0, 0, tzinfo=utc),
        dt.datetime(2025, 11, 12, 5, 0, 0, tzinfo=utc),
    ]
    # no year given: MM-DD stamps take the year that puts them before the file's mtime
    # (2026-01-01: a November line was written in 2025)
    assert server_log(f, "h")[1]["ts"].year == 2025
    # no time anywhere: the file's mtime, as UTC
    f.write_bytes(b"no time " + batch.encode() + b"\n")
    os.utime(f, (1767225600, 1767225600))
    (row,) = server_log(f, "h")
    assert row["ts"] == dt.datetime(2026, 1, 1, tzinfo=utc) and row["ts"].tzinfo is utc


def test_a_skip_reason_survives_a_path_holding_colon_space(tmp_path) -> None:
    folder = tmp_path / "exports: node 7"  # ': ' inside the path itself
    folder.mkdir()
    f = folder / "s.csv"
    f.write_text("index, memory.used [MiB]\n0, 1, 2\n0, 5\n")
    got = read_nvidia_smi_csv(f, "h", start=T0)
    assert got.skipped_examples == [f"{f}:2: 3 fields, header has 2"]


def test_samples_without_times_end_at_the_file_s_last_write(tmp_path) -> None:
    """A capture with no timestamp column was last written at its last sample: without
    --start the samples end at the file's mtime (they used to start there, in the future,
    and the analysis left them out); process rows move with their sample; --start wins."""
    f = tmp_path / "smi.csv"
    f.write_text(
        "pid, gpu_uuid, used_gpu_memory [MiB]\n7, GPU-a, 5 MiB\n"  # before any sample
        "index, uuid, memory.used [MiB]\n0, GPU-a, 1\n1, GPU-b, 1\n"
        "pid, gpu_uuid, used_gpu_memory [MiB]\n8, GPU-b, 6 MiB\n"
        "index, uuid, memory.used [MiB]\n0, GPU-a, 2\n1, GPU-b, 2\n0, GPU-a, 3\n1, GPU-b, 3\n"
    )
    end = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
    os.utime(f, (end.timestamp(), end.timestamp()))
    got = read_nvidia_smi_csv(f, "h", interval=5)
    assert [(r["gpu_index"], r["ts"]) for r in got.rows] == [
        (g, end - dt.timedelta(seconds=s)) for s in (10, 5, 0) for g in (0, 1)
    ]
    assert [(p["pid"], p["ts"]) for p in got.processes] == [
        (7, end - dt.timedelta(seconds=10)),
        (8, end - dt.timedelta(seconds=10)),
    ]
    assert "3 samples placed every 5 s, the last at the file's modification time" in got.summary()
    assert "2026-01-01T12:00:00Z" in got.summary()
    given = read_nvidia_smi_csv(f, "h", interval=5, start=T0)
    assert [r["ts"] for r in given.rows][::2] == [T0 + dt.timedelta(seconds=s) for s in (0, 5, 10)]
    assert given.note == "" and {p["ts"] for p in given.processes} == {T0}


def test_date_less_stamps_are_dated_back_from_the_file_s_last_write(tmp_path) -> None:
    """SGLang's [HH:MM:SS TP0] prefix has no date: the last such stamp is on the day of
    the file's mtime (the day before when it is later in the day than the mtime), and each
    midnight the log crosses moves the earlier lines a day back. They all took the mtime."""
    from collector.logimport import server_log, time_of_day

    batch = "Decode batch, #running-req: 1, #token: 7, token usage: 0.04, #queue-req: 0"
    stamps = ["22:00:00 TP0", "23:59:50 TP0", "23:59:48 TP1", "00:00:10 TP0", "09:00:00 DP0 TP1"]
    stamps += ["23:30:00", "00:05:00 TP0"]  # two more midnights
    lines = [f"[{s}] {batch}" for s in stamps] + ["a continuation with no stamp " + batch]
    f = tmp_path / "sglang.log"
    f.write_text("\n".join(lines) + "\n")
    end = dt.datetime(2026, 12, 3, 0, 6, tzinfo=dt.UTC)  # written at 00:05, touched at 00:06
    os.utime(f, (end.timestamp(), end.timestamp()))
    got = [r["ts"] for r in server_log(f, "h")]
    day = [dt.datetime(2026, 12, d, tzinfo=dt.UTC) for d in (1, 2, 3)]
    h = dt.timedelta(hours=1)
    assert got == [
        day[0] + 22 * h,
        day[0] + 24 * h - dt.timedelta(seconds=10),
        day[0] + 24 * h - dt.timedelta(seconds=12),  # a rank a little behind: same day
        day[1] + dt.timedelta(seconds=10),
        day[1] + 9 * h,
        day[1] + 23.5 * h,
        day[2] + dt.timedelta(minutes=5),
        day[2] + dt.timedelta(minutes=5),  # no stamp: the line before's
    ]
    # a last stamp later in the day than the mtime was written the day before
    g = tmp_path / "late.log"
    g.write_text(f"[23:50:00 TP0] {batch}\n")
    os.utime(g, (day[2].timestamp() + 60, day[2].timestamp() + 60))  # touched at 00:01
    assert [r["ts"] for r in server_log(g, "h")] == [day[2] - dt.timedelta(minutes=10)]
    # in a zone: read as local wall time
    os.utime(f, (day[2].timestamp() + 3600, day[2].timestamp() + 3600))  # 02:00 in Berlin
    berlin = server_log(f, "h", tz="Europe/Berlin")
    assert berlin[-1]["ts"] == day[2] - h + dt.timedelta(minutes=5)
    assert berlin[0]["ts"] == day[0] + 21 * h
    assert time_of_day("[25:00:00 TP0] x") is None and time_of_day("x [10:00:00]") is None


@pytest.mark.parametrize(
    "line",
    [
        "Tue Dec  1 10:00:00 PM UTC 2026",  # en_US: 12-hour clock
        "Tue 01 Dec 2026 10:00:00 PM UTC",  # en_US of older coreutils: year before time
        "Tue  1 Dec 22:00:00 UTC 2026",  # en_GB: day before month
        "Tue Dec  1 22:00:00 UTC 2026",  # C
        "Tue, 01 Dec 2026 22:00:00 +0000",  # date -R
        "2026-12-01T22:00:00+00:00",  # date -Is
        "2026-12-01 23:00:00+01:00",  # date --rfc-3339=seconds
    ],
)
def test_a_date_line_in_any_common_form_dates_the_samples_after_it(tmp_path, line) -> None:
    f = tmp_path / "mem.log"
    f.write_text(f"{line}\n28000 MiB\n1200 MiB\n")
    got = read_gpu_memory_log(f, "h", gpu=0)
    assert [(r["gpu_index"], r["ts"]) for r in got.rows] == [
        (g, dt.datetime(2026, 12, 1, 22, tzinfo=dt.UTC)) for g in (0, 1)
    ]
    assert got.skipped == 0 and got.note == ""


def test_a_date_line_naming_a_zone_is_read_in_tz_and_said_without_one(tmp_path) -> None:
    f = tmp_path / "mem.log"
    f.write_text("Tue Dec  1 12:00:00 AM CET 2026\n100 MiB\n")  # midnight, 12-hour clock
    (row,) = read_gpu_memory_log(f, "h", tz="Europe/Berlin").rows
    assert row["ts"] == dt.datetime(2026, 11, 30, 23, tzinfo=dt.UTC)
    got = read_gpu_memory_log(f, "h")
    assert got.rows[0]["ts"] == dt.datetime(2026, 12, 1, 0, tzinfo=dt.UTC)
    assert "date lines name the zone CET: read as UTC (give --tz)" in got.summary()


def test_the_hour_a_dst_fall_back_repeats_is_read_twice_in_order(tmp_path) -> None:
    """Berlin, 2026-10-25: 02:00-02:59 local happens twice. Samples every 10 min read in
    order come out 10 min apart in UTC; the second pass was laid over the first (720
    duplicate times and an hour's gap in the helper's repro, and a false RM001)."""
    start = dt.datetime(2026, 10, 24, 23, 30, tzinfo=dt.UTC)  # 01:30 CEST
    utc = [start + dt.timedelta(minutes=10 * i) for i in range(18)]
    berlin = zone("Europe/Berlin")
    local = [t.astimezone(berlin).strftime("%Y/%m/%d %H:%M:%S") for t in utc]
    assert len(set(local)) == len(local) - 6  # the repeated hour, as nvidia-smi prints it
    f = tmp_path / "smi.csv"
    f.write_text("timestamp, index, memory.used [MiB]\n" + "".join(f"{x}, 0, 1\n" for x in local))
    assert [r["ts"] for r in read_nvidia_smi_csv(f, "h", tz="Europe/Berlin").rows] == utc
    m = tmp_path / "mem.log"
    m.write_text("".join(f"{x.replace('/', '-')} 100\n" for x in local))
    assert [r["ts"] for r in read_gpu_memory_log(m, "h", tz="Europe/Berlin").rows] == utc


def test_mm_dd_stamps_across_new_year_take_their_years(tmp_path) -> None:
    """vLLM's MM-DD across New Year: December lines are the year before January's. Without
    --year the last line's year is the mtime's; with it, the first line's. December lines
    were put a year ahead, or January's a year back."""
    from collector.logimport import server_log

    stats = "Avg prompt throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs"
    stamps = ["12-31 23:58:00", "12-31 23:59:59", "01-01 00:00:30", "01-01 10:00:00"]
    f = tmp_path / "vllm.log"
    f.write_text("".join(f"INFO {s} [loggers.py:1] {stats}\n" for s in stamps))
    want = [
        dt.datetime(2025, 12, 31, 23, 58, tzinfo=dt.UTC),
        dt.datetime(2025, 12, 31, 23, 59, 59, tzinfo=dt.UTC),
        dt.datetime(2026, 1, 1, 0, 0, 30, tzinfo=dt.UTC),
        dt.datetime(2026, 1, 1, 10, tzinfo=dt.UTC),
    ]
    end = dt.datetime(2026, 1, 1, 10, 0, 5, tzinfo=dt.UTC).timestamp()
    os.utime(f, (end, end))
    assert [r["ts"] for r in server_log(f, "h")] == want
    assert [r["ts"] for r in server_log(f, "h", year=2025)] == want


def test_a_utf16_file_as_powershell_writes_it_reads_as_utf8(tmp_path) -> None:
    """`nvidia-smi ... > smi.csv` in Windows PowerShell writes UTF-16 with a byte-order
    mark: it read as 'data before any header line'."""
    text = "timestamp, index, memory.used [MiB]\r\n2026/12/01 10:00:00, 0, 100 MiB\r\n"
    (tmp_path / "a.csv").write_text(text, encoding="utf-8")
    (tmp_path / "b.csv").write_bytes(text.encode("utf-16"))
    want = read_nvidia_smi_csv(tmp_path / "a.csv", "h").rows
    assert want and read_nvidia_smi_csv(tmp_path / "b.csv", "h").rows == want
    mem = "2026-12-01T10:00:00Z 100\n"
    (tmp_path / "m.log").write_bytes(mem.encode("utf-16"))
    (row,) = read_gpu_memory_log(tmp_path / "m.log", "h").rows
    assert row["memory_used_bytes"] == 100 * 2**20


def test_a_large_csv_is_handed_on_a_chunk_at_a_time_with_the_same_rows(tmp_path) -> None:
    """With ``flush``, GPU rows leave the reader ``chunk`` at a time (memory holds a chunk,
    not the file: 1.2 M rows peaked at 1.0 GB before, 0.2 GB after, through the CLI),
    and together they are the rows of one pass; process rows still find their GPU by
    UUID. Rows placed back from the mtime (no time column, no --start) are held to the end."""
    lines = ["timestamp, index, uuid, memory.used [MiB]"]
    for s in range(50):
        lines += [f"2026/12/01 10:00:{s:02d}, {g}, GPU-{g}, {100 + s} MiB" for g in range(2)]
        if s == 30:
            lines += ["pid, gpu_uuid, used_gpu_memory [MiB]", "77, GPU-1, 5 MiB"]
            lines += ["timestamp, index, uuid, memory.used [MiB]"]
    f = tmp_path / "smi.csv"
    f.write_text("\n".join(lines) + "\n")
    whole = read_nvidia_smi_csv(f, "h")
    chunks: list[list[dict]] = []
    befores: list[int] = []

    def flush(rows: list[dict], before: int) -> None:
        chunks.append(list(rows))
        befores.append(before)

    got = read_nvidia_smi_csv(f, "h", flush=flush, chunk=7)
    assert all(len(c) == 7 for c in chunks) and len(chunks) == 100 // 7
    assert befores == [7 * i for i in range(len(chunks))]  # rows handed on before each
    assert [r for c in chunks for r in c] + got.rows == whole.rows
    assert got.written == 98 and "kept 100 rows" in got.summary()
    assert got.processes == whole.processes and got.processes[0]["gpu_index"] == 1
    f.write_text("index, memory.used [MiB]\n" + "".join(f"0, {i}\n" for i in range(20)))
    held: list[list[dict]] = []
    got = read_nvidia_smi_csv(f, "h", flush=lambda rows, _n: held.append(rows), chunk=5)
    assert held == [] and len(got.rows) == 20


def test_the_repeated_hour_in_date_lines_and_sparse_samples(tmp_path) -> None:
    """A date line naming CEST or CET says which pass of the repeated hour it is; without a
    name, samples further apart than the first rule allowed (40 min) stay in order."""
    f = tmp_path / "loop.log"
    f.write_text(
        "".join(
            f"Sun Oct 25 {hm}:00 {name} 2026\n100 MiB\n"
            for hm, name in [
                ("02:10", "CEST"),
                ("02:50", "CEST"),
                ("02:10", "CET"),
                ("02:50", "CET"),
            ]
        )
    )
    got = [r["ts"].strftime("%H:%M") for r in read_gpu_memory_log(f, "h", tz="Europe/Berlin").rows]
    assert got == ["00:10", "00:50", "01:10", "01:50"]
    g = tmp_path / "iso.log"
    g.write_text(
        "".join(f"2026-10-25T{hm}:00 100\n" for hm in ["02:10", "02:50", "02:10", "02:50", "03:30"])
    )
    got = [r["ts"].strftime("%H:%M") for r in read_gpu_memory_log(g, "h", tz="Europe/Berlin").rows]
    assert got == ["00:10", "00:50", "01:10", "01:50", "02:30"]


def test_a_quiet_night_between_date_less_stamps_is_a_day(tmp_path) -> None:
    """18:00, then nothing until 08:00: the 08:00 line is the next day, and no line is put
    after the file's last write (the 18:00 line was dated 10 h after it)."""
    from collector.logimport import server_log

    batch = "Decode batch, #running-req: 1, #token: 7, token usage: 0.04, #queue-req: 0"
    f = tmp_path / "sglang.log"
    f.write_text(f"[18:00:00 TP0] {batch}\n[08:00:00 TP0] {batch}\n")
    end = dt.datetime(2026, 12, 2, 8, 1, tzinfo=dt.UTC)
    os.utime(f, (end.timestamp(), end.timestamp()))
    assert [r["ts"] for r in server_log(f, "h")] == [
        dt.datetime(2026, 12, 1, 18, tzinfo=dt.UTC),
        dt.datetime(2026, 12, 2, 8, tzinfo=dt.UTC),
    ]


@pytest.mark.parametrize("kind", ["nvidia-smi-csv", "gpu-memory-log", "server-log", "gzip"])
def test_an_import_reads_a_pipe_whole(tmp_path, kind) -> None:
    """/dev/stdin: the file is opened once and its first bytes peeked at (for a byte-order
    mark or gzip), so none is lost; the first 8 KiB went to that sniffing read."""
    import gzip
    import subprocess
    import sys

    batch = "Decode batch, #running-req: 1, #token: 7, token usage: 0.04, #queue-req: 0"
    text = {
        "nvidia-smi-csv": "timestamp, index, memory.used [MiB]\n"
        + "".join(f"2026/12/01 10:{m:02d}:00, 0, {m} MiB\n" for m in range(60)),
        "gpu-memory-log": "".join(f"2026-12-01T10:{m:02d}:00Z {m}\n" for m in range(60)),
        "server-log": "".join(f"[2026-12-01 10:{m:02d}:00 TP0] {batch}\n" for m in range(60)),
    }
    data = gzip.compress(text["server-log"].encode()) if kind == "gzip" else text[kind].encode()
    what = "server-log" if kind == "gzip" else kind
    r = subprocess.run(
        [sys.executable, "-m", "collector.cli", "import", what, "/dev/stdin", "--host", "h"]
        + ["--bucket", str(tmp_path / "b")],
        input=data,
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 0 and b"60 rows into" in r.stderr, r.stderr
