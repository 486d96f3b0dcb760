"""The simulator's shapes: files as the tools write them, imported by the real importers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analyzer.packs import load_packs
from analyzer.runner import analyze
from simulator.generate import simulate


def _col(bucket: Path, table: str, col: str) -> list:
    files = sorted((bucket / table).rglob("*.parquet"))
    return [v for f in files for v in pq.read_table(f).column(col).to_pylist()]


def test_nvidia_smi_csv_is_written_as_nvidia_smi_prints_it(tmp_path: Path) -> None:
    b = tmp_path / "b"
    simulate("rank-skew", b, hosts=1, hours=0.2, seed=3, shape="nvidia-smi-csv", tz="Europe/Berlin")
    (csv,) = (tmp_path / "b-files").rglob("nvidia-smi.csv")
    lines = csv.read_text().splitlines()
    assert lines[0] == (
        "timestamp, index, name, uuid, memory.total [MiB], memory.used [MiB], "
        "memory.free [MiB], utilization.gpu [%]"
    )
    # local time (Berlin is UTC+1 in November) with milliseconds, one row per GPU per interval
    row = re.compile(
        r"^2026/11/23 \d\d:\d\d:\d\d\.\d{3}, [0-3], NVIDIA H200, GPU-[\w-]+, 143771 MiB, "
        r"\d+ MiB, \d+ MiB, \d+ %$"
    )
    assert all(row.match(x) for x in lines[1:]) and lines[1].startswith("2026/11/23 01:00:00.")
    assert [x.split(", ")[1] for x in lines[1:5]] == ["0", "1", "2", "3"]
    # the importer read them back as UTC, every row
    native = tmp_path / "n"
    simulate("rank-skew", native, hosts=1, hours=0.2, seed=3)
    assert len(_col(b, "gpu_samples", "ts")) == len(_col(native, "gpu_samples", "ts")) == 4 * 72
    assert min(_col(b, "gpu_samples", "ts")).hour == 0
    used = sorted(u >> 20 for u in _col(b, "gpu_samples", "memory_used_bytes"))
    assert used == sorted(u >> 20 for u in _col(native, "gpu_samples", "memory_used_bytes"))


def test_memory_log_is_a_date_and_nvidia_smi_loop(tmp_path: Path) -> None:
    b = tmp_path / "b"
    simulate("independent-servers", b, hosts=1, hours=0.1, seed=3, shape="memory-log")
    (log,) = (tmp_path / "b-files").rglob("gpu-memory.log")
    lines = log.read_text().splitlines()
    assert lines[0] == "Mon Nov 23 00:00:00 UTC 2026" and re.match(r"^\d+ MiB$", lines[1])
    assert len(lines) == 3 * 36  # a date line and two GPU lines per 10 s
    assert sorted(set(_col(b, "gpu_samples", "gpu_index"))) == [0, 1]
    assert set(_col(b, "gpu_samples", "memory_total_bytes")) == {46068 << 20}


def test_server_log_goes_through_the_importer(tmp_path: Path) -> None:
    b = tmp_path / "b"
    simulate("vision-oom-hourly", b, hosts=1, hours=0.5, seed=3, shape="logs-only")
    (log,) = (tmp_path / "b-files").rglob("server.log")
    text = log.read_text()
    assert "(APIServer pid=" in text and "vLLM API server version 0.11.0" in text
    assert not (b / "gpu_samples").exists()
    assert set(_col(b, "log_lines", "signature")) >= {"engine_version", "batch_stats"}


def test_labels_say_what_a_shape_cannot_decide(tmp_path: Path) -> None:
    simulate(
        "all",
        tmp_path / "b",
        hosts=1,
        hours=0.1,
        seed=3,
        shape="logs-only",
        labels_path=tmp_path / "l.json",
    )
    hosts = json.loads((tmp_path / "l.json").read_text())["hosts"]
    leak = hosts["fast-image-processor-leak-00"]
    assert "leak.gpu" in leak["undecidable"] and "leak.gpu" not in leak["expect"]["gpu:0"]
    assert leak["expect"]["gpu:0"] == ["oom.event"]
    assert "allocator_samples" in hosts["probe-cache-growth-00"]["undecidable_scenario"]
    assert hosts["healthy-static-00"]["undecidable_scenario"] is None
    with pytest.raises(ValueError, match="unknown shape"):
        simulate("all", tmp_path / "x", shape="dcgm")


@pytest.fixture(scope="module")
def two_gpu_hosts(tmp_path_factory: pytest.TempPathFactory):
    b = tmp_path_factory.mktemp("sk") / "b"
    simulate("rank-skew", b, hosts=1, hours=6, seed=11, shape="nvidia-smi-csv")
    simulate("independent-servers", b, hosts=1, hours=6, seed=11, shape="nvidia-smi-csv")
    return analyze(b, load_packs(), with_series=False)


def test_rank_skew_from_nvidia_smi_and_serverargs(two_gpu_hosts) -> None:
    (sk,) = [f for f in two_gpu_hosts.findings if f.rule_id == "SK001"]
    assert sk.host.startswith("rank-skew") and sk.evidence["rank_gpu"] == 0
    assert sk.evidence["tp_size"] == 4 and sk.evidence["tp_source"] == "server log (ServerArgs)"


def test_independent_servers_are_never_ranks(two_gpu_hosts) -> None:
    ind = [f for f in two_gpu_hosts.findings if f.host.startswith("independent-servers")]
    assert any(f.rule_id == "GM001" and f.gpu == 0 for f in ind)  # the leak is found ...
    assert not any(f.category == "skew.rank" for f in ind)  # ... and not called a rank skew
