"""procfs: a real child process, and a procfs tree built from real /proc/PID/maps text."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

from collector.procfs import ProcFS, summarize_maps

CORPUS = Path(__file__).resolve().parent / "corpus"
NOW = dt.datetime.now(dt.UTC)


def test_real_child_process() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; x = bytearray(20 << 20); time.sleep(30)"]
    )
    try:
        import time

        time.sleep(0.5)
        d = ProcFS().describe(child.pid, NOW, "h")
        assert d is not None
        assert d["status"]["vm_rss_bytes"] > 20 << 20
        assert abs((d["start"] - dt.datetime.now(dt.UTC)).total_seconds()) < 30
        assert d["maps"]["other_count"] > 10 and d["maps"]["nvidia_device_count"] == 0
        # the maps row names its process: a PID that comes back is another one
        assert d["maps"]["process_start"] == d["start"] == d["process"]["process_start"]
        assert d["process"]["cmdline"].startswith(sys.executable)
        assert d["process"]["engine"] is None
    finally:
        child.kill()
        child.wait()
    assert ProcFS().describe(child.pid, NOW, "h") is None  # vanished: quietly nothing


def _blocks() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    key = None
    for line in (CORPUS / "proc_maps.txt").read_text().splitlines():
        if line.startswith("# source:"):
            key = line.split()[2]
            out[key] = []
        elif key and line and not line.startswith("#"):
            out[key].append(line)
    return out


def test_maps_summary_of_real_cuda_processes() -> None:
    b = _blocks()
    uvm = summarize_maps(b["pytorch/pytorch#35609"])
    assert (uvm["nvidia_device_count"], uvm["nvidia_uvm_count"], uvm["other_count"]) == (11, 2, 5)
    assert uvm["nvidia_uvm_bytes"] == 2 * 0x200000
    gvisor = summarize_maps(b["google/gvisor#9827"])  # log prefix lines are not maps
    assert (gvisor["nvidia_device_count"], gvisor["other_count"]) == (3, 10)
    arch = summarize_maps(b["bloomberg/memray#547"])
    assert (arch["libcuda_count"], arch["other_count"]) == (3, 10)
    criu = summarize_maps(b["checkpoint-restore/criu#2515"])  # maps embedded after a prefix
    assert criu["other_count"] == 4


def _server_tree(tmp_path: Path) -> Path:
    """A procfs root holding one SGLang server, pid 4242."""
    root = tmp_path / "proc"
    (root / "4242").mkdir(parents=True)
    (root / "stat").write_text("cpu 1 2 3\nbtime 1767225600\n")
    argv = [
        "/usr/bin/python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "--mem-fraction-static",
        "0.7",
    ]
    (root / "4242" / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (root / "4242" / "status").write_text(
        "Name:\tpython3\nVmSize:\t 48000000 kB\nVmRSS:\t 3200000 kB\n"
    )
    fields = ["S"] + ["0"] * 18 + [str(100 * os.sysconf("SC_CLK_TCK"))] + ["0"] * 20
    (root / "4242" / "stat").write_text("4242 (python3 x) " + " ".join(fields) + "\n")
    (root / "4242" / "maps").write_text("\n".join(_blocks()["pytorch/pytorch#35609"]) + "\n")
    sp = root / "4242" / "root" / "usr" / "lib" / "python3.10" / "site-packages"
    for dist in ("sglang-0.4.9.post6.dist-info", "torch-2.7.1.dist-info", "numpy-2.0.0.dist-info"):
        (sp / dist).mkdir(parents=True)
    (root / "4242" / "exe").symlink_to("/usr/bin/python3")
    return root


def test_fake_procfs_tree_of_a_server(tmp_path) -> None:
    fs = ProcFS(_server_tree(tmp_path))
    assert fs.servers() == [4242]
    d = fs.describe(4242, NOW, "h")
    assert d is not None
    assert d["start"] == dt.datetime(2026, 1, 1, 0, 1, 40, tzinfo=dt.UTC)
    assert d["status"] == {"vm_rss_bytes": 3200000 * 1024, "vm_size_bytes": 48000000 * 1024}
    p = d["process"]
    assert (
        p["engine"],
        p["model"],
        p["mem_fraction_static"],
        p["disable_fast_image_processor"],
    ) == ("sglang", "Qwen/Qwen2.5-VL-7B-Instruct", 0.7, False)
    assert d["maps"]["nvidia_uvm_count"] == 2
    assert (p["engine_version"], p["torch_version"]) == (
        "0.4.9.post6",
        "2.7.1",
    )  # the process's own site-packages


def test_proc_maps_written_before_process_start_read_as_null_times(tmp_path) -> None:
    """proc_maps files from before the column are read with process_start NULL, typed
    as a time, alone and beside files that have it."""
    import pyarrow.parquet as pq

    from analyzer.bucket import open_bucket
    from collector.writer import BucketWriter

    row = {"ts": NOW, "host": "h", "pid": 7, "nvidia_device_count": 3}
    BucketWriter(tmp_path, "h").write("proc_maps", [row])
    f = next((tmp_path / "proc_maps").glob("*/*/*.parquet"))
    t = pq.read_table(f)
    pq.write_table(t.drop_columns(["process_start"]).replace_schema_metadata(t.schema.metadata), f)
    con, counts = open_bucket(tmp_path)
    assert counts["proc_maps"] == 1
    got = con.execute(
        "SELECT any_value(typeof(process_start)), count(process_start) FROM proc_maps"
    )
    assert got.fetchall() == [("TIMESTAMP WITH TIME ZONE", 0)]
    later = NOW + dt.timedelta(seconds=10)
    BucketWriter(tmp_path, "h").write("proc_maps", [{**row, "ts": later, "process_start": NOW}])
    con, _ = open_bucket(tmp_path)
    got = con.execute("SELECT count(*), count(process_start) FROM proc_maps")
    assert got.fetchone() == (2, 1)


def test_another_users_server_keeps_its_row_and_says_maps_were_not_read(tmp_path) -> None:
    """A collector not run as root reads another user's cmdline and status, but opening
    its maps gives EACCES: the process is still described, and the run says why its
    maps are missing (it is not a vanished pid)."""
    from collector.sources import ProcfsSource

    class NoMaps(ProcFS):
        def _read(self, pid: int, name: str) -> str:
            if name == "maps":
                raise PermissionError(13, "Permission denied")
            return super()._read(pid, name)

    src = ProcfsSource(NoMaps(_server_tree(tmp_path)), NOW, "h", set(), set())
    out = src.collect(float("inf"))
    assert [r["pid"] for r in out.rows["processes"]] == [4242] and out.rows["proc_maps"] == []
    assert out.extra[4242]["vm_rss_bytes"] == 3200000 * 1024
    assert out.errors == [
        "procfs: pid 4242: maps not readable (Permission denied): run as the server's user or root"
    ]
    # another user's GPU job (no inference server) on a shared host: its row, no failure
    (tmp_path / "proc" / "4242" / "cmdline").write_bytes(b"python3\0train.py\0")
    src = ProcfsSource(NoMaps(tmp_path / "proc"), NOW, "h", {4242}, set())
    out = src.collect(float("inf"))
    assert [r["pid"] for r in out.rows["processes"]] == [4242] and out.errors == []


def test_a_proc_root_that_is_not_there_fails_the_source(tmp_path) -> None:
    from collector.sources import ProcfsSource

    src = ProcfsSource(ProcFS(tmp_path / "nope"), NOW, "h", set(), set())
    out = src.collect(float("inf"))
    assert out.errors and f"cannot list {tmp_path / 'nope'}" in out.errors[0]
