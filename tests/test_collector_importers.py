"""Importers: every nvidia-smi CSV block of the corpus, memory logs, whole server logs."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from collector import exitcodes
from collector.importers import ImportError_, gpu_memory_log, nvidia_smi_csv, server_log

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
    with pytest.raises(ImportError_, match="m.log:2:"):
        gpu_memory_log(f, "h")


def test_server_log_keeps_signatures_with_line_times(tmp_path) -> None:
    rows = server_log(CORPUS / "sglang_logs.txt", "h")
    sigs = {r["signature"] for r in rows}
    assert {"kv_leak_check", "oom", "server_args", "batch_stats", "kv_capacity"} <= sigs
    dated = [r for r in rows if r["text"].startswith("[2025-11-11 04:28:30]")]
    assert dated and dated[0]["ts"] == dt.datetime(2025, 11, 11, 4, 28, 30, tzinfo=dt.UTC)


def test_cli_imports_into_the_bucket(tmp_path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("\n".join(csv_blocks()[0]) + "\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "collector.cli",
            "import",
            "nvidia-smi-csv",
            str(f),
            "--host",
            "h",
            "--bucket",
            str(tmp_path / "b"),
            "--start",
            "2026-01-01T00:00:00Z",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    (p,) = (tmp_path / "b" / "gpu_samples").rglob("*.parquet")
    assert pq.read_table(p).num_rows == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("0, 1\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "collector.cli",
            "import",
            "nvidia-smi-csv",
            str(bad),
            "--host",
            "h",
            "--bucket",
            str(tmp_path / "b"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == exitcodes.NOTHING and "bad.csv:1:" in r.stderr
