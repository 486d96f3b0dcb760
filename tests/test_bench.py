"""Benchmarks are not tests: this only keeps the benchmark code working (one tiny repeat)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_collector_bench_runs(tmp_path) -> None:
    out = tmp_path / "c.json"
    subprocess.run(
        [sys.executable, "bench/collector_bench.py", str(out), "1"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    res = json.loads(out.read_text())
    assert res["once_run_8_gpus_3_logs"]["samples"] == 1 and res["import_s"]["pyarrow_floor"] > 0


def test_logparse_bench_runs(tmp_path) -> None:
    out = tmp_path / "l.json"
    subprocess.run(
        [sys.executable, "bench/logparse_bench.py", str(out), "2"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    res = json.loads(out.read_text())
    assert res["lines"] > 10_000 and res["events"] > 0


def test_fleet_bench_runs(tmp_path, monkeypatch) -> None:
    out = tmp_path / "f.json"
    subprocess.run(
        [sys.executable, "bench/fleet_bench.py", str(out), "14", "0.5"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    res = json.loads(out.read_text())
    assert res["gpus"] >= 14 and res["fleet_html_mb"] > 0


def test_run_all_tiny_writes_results(tmp_path) -> None:
    subprocess.run(
        [sys.executable, "bench/run_all.py", str(tmp_path), "--tiny"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=600,
    )
    res = json.loads((tmp_path / "results.json").read_text())
    scale = res["scale"]
    full = scale["fractions"]["1"]
    assert full["scan"]["samples"] == scale["bucket"]["rows"]["gpu_samples"]
    assert full["pack"]["leak_hosts_found"] == full["pack"]["leak_hosts_true"] >= 1
    assert full["pack"]["leak_false_positive_hosts"] == 0
    assert scale["dask"]["findings"] == full["pack"]["findings"]
    s3 = scale["s3"]
    assert s3["bytes_of_hosts_analysed"] < s3["bytes_stored"]  # the other host was pruned
    assert s3["bytes_read"] < s3["bytes_stored"]
    first = res["tier"]["week"]["first_pass"]  # raw samples vs per-minute summaries
    assert first["same_rows"] is True and first["mib_summary"] > 0
    stage = res["stage"]  # staged in turn and 8 at a time, the same bytes either way
    assert stage["in_turn"]["same_bytes"] and stage["threads"]["same_bytes"]
    assert stage["threads"]["threads"] > stage["in_turn"]["threads"] == 1
    md = (tmp_path / "results.md").read_text()
    assert "× plain scan" in md and "Dask" in md and "S3" in md and "staged" in md
    assert "per-minute summaries (measured, not built)" in md
