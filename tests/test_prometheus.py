"""`leakcollect import prometheus` against a real Prometheus server.

A simulated fleet is written natively (the collector's tables), turned into the
OpenMetrics text dcgm-exporter and the engines would have exposed, backfilled with
``promtool tsdb create-blocks-from openmetrics`` and served by ``prometheus`` on
127.0.0.1. The import must give the analyzer the same verdicts as the native
tables Prometheus holds (device and engine series), per GPU.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import promfleet  # noqa: E402

pytestmark = pytest.mark.skipif(
    not promfleet.have_prometheus(),
    reason="prometheus and promtool are not installed (Debian package `prometheus`)",
)

# 8 hours in CI; LEAKREPORT_PROM_HOURS=168 runs the same comparison over a week
HOURS = int(os.environ.get("LEAKREPORT_PROM_HOURS", "8"))
START = "2026-11-23T00:00:00Z"
END = (  # the native trace's last sample
    dt.datetime(2026, 11, 23, tzinfo=dt.UTC) + dt.timedelta(hours=HOURS, seconds=-10)
).strftime("%Y-%m-%dT%H:%M:%SZ")
K8S = {"cache-warmup-00", "cache-restarted-00"}


def _scenarios() -> list[Any]:
    from simulator.scenarios import SCENARIOS

    return [
        SCENARIOS["healthy-static"],
        SCENARIOS["cache-warmup"],
        SCENARIOS["latency-pressure"],  # leaks, no restart within the window
        # the pod restarts mid-span: a new pod name from then on
        dataclasses.replace(
            SCENARIOS["cache-warmup"], name="cache-restarted", restart_every_s=HOURS * 1800
        ),
        SCENARIOS["host-rss-leak"],  # process_resident_memory_bytes of the server
    ]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from simulator.generate import DEFAULT_START, HostPlan, generate_host

    root = tmp_path_factory.mktemp("prom")
    native = root / "native"
    for k, s in enumerate(_scenarios()):
        generate_host(
            HostPlan(f"{s.name}-00", s, 7100 + k, 4000 + 100 * k), HOURS, DEFAULT_START, native
        )
    # what Prometheus holds: the device and engine series (and the runs that wrote them)
    ref = root / "ref"
    for t in ("gpu_samples", "metric_samples", "collector_runs"):
        shutil.copytree(native / t, ref / t)
    om = root / "fleet.om"
    with open(om, "w", encoding="utf-8") as f:
        promfleet.openmetrics(native, f, K8S)
    tsdb = root / "tsdb"
    promfleet.backfill(om, tsdb)
    spare = root / "tsdb-limited"
    shutil.copytree(tsdb, spare)
    with promfleet.PromServer(tsdb, root) as server:
        yield {"root": root, "native": native, "ref": ref, "url": server.url, "spare": spare}


def _import(
    url: str, bucket: Path | str, *extra: str, start: str = START, end: str = END
) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "collector.cli", "import", "prometheus", "--url", url]
    args += ["--start", start]
    args += ["--end", end, "--step", "10s", "--bucket", str(bucket), "--retries", "1", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=REPO)


def _analyze(bucket: Path) -> dict[str, Any]:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "leakreport",
            "analyze",
            str(bucket),
            "--format",
            "json",
            "--fail-on",
            "never",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode in (0, 1, 3), r.stderr[-2000:]
    return dict(json.loads(r.stdout))


def _verdicts(doc: dict[str, Any]) -> dict[tuple[str, int | None], set[str]]:
    out: dict[tuple[str, int | None], set[str]] = {}
    for f in doc["findings"]:
        out.setdefault((f["host"], f["gpu"]), set()).add(f"{f['rule_id']}:{f['category']}")
    return out


def _rows(bucket: Path, table: str) -> list[dict[str, Any]]:
    return ds.dataset(bucket / table, format="parquet", partitioning="hive").to_table().to_pylist()


@pytest.fixture(scope="module")
def imported(fleet: dict[str, Any]) -> dict[str, Any]:
    bucket = fleet["root"] / "imported"
    r = _import(fleet["url"], bucket)
    assert r.returncode == 0, r.stderr[-3000:]
    return {"bucket": bucket, "stderr": r.stderr}


def test_import_gives_the_native_verdicts_per_gpu(
    fleet: dict[str, Any], imported: dict[str, Any]
) -> None:
    ref, got = _analyze(fleet["ref"]), _analyze(imported["bucket"])
    assert _verdicts(got) == _verdicts(ref)
    # the same rules ran, and those that need what Prometheus lacks say so
    status = {r["rule_id"]: (r["status"], r["reason"]) for r in got["run"]["rules"]}
    assert status == {r["rule_id"]: (r["status"], r["reason"]) for r in ref["run"]["rules"]}
    assert status["KB001"][0] == "skipped" and "processes" in status["KB001"][1]
    v = _verdicts(got)
    cats = {k: {x.split(":")[1] for x in s} for k, s in v.items()}
    assert "leak.gpu" in cats[("latency-pressure-00", 0)]
    assert "cache.growth" in cats[("cache-warmup-00", 0)]
    assert "leak.gpu" not in cats.get(("cache-warmup-00", 0), set())
    assert "leak.gpu" not in cats.get(("cache-restarted-00", 0), set())
    assert not any(h == "healthy-static-00" for h, _ in v)
    assert "leak.host_rss" in cats[("host-rss-leak-00", None)]
    # a finding on a Kubernetes GPU names the pod(s) on it during the finding
    pods = {
        (r["host"], r["gpu_index"], f"{r['namespace']}/{r['pod']}")
        for r in _rows(imported["bucket"], "gpu_samples")
        if r["pod"]
    }
    for f in got["findings"]:
        if f["host"] in K8S and f["gpu"] is not None:
            assert f["evidence"]["pods"], f
            assert all((f["host"], f["gpu"], p) in pods for p in f["evidence"]["pods"])
        else:
            assert "pods" not in f["evidence"], f
    restarted = [f for f in got["findings"] if f["host"] == "cache-restarted-00" and f["gpu"] == 0]
    assert len({p for f in restarted for p in f["evidence"]["pods"]}) == 2


def test_device_rows_match_the_native_samples(
    fleet: dict[str, Any], imported: dict[str, Any]
) -> None:
    want = {(r["host"], r["gpu_index"], r["ts"]): r for r in _rows(fleet["ref"], "gpu_samples")}
    got = {
        (r["host"], r["gpu_index"], r["ts"]): r for r in _rows(imported["bucket"], "gpu_samples")
    }
    assert got.keys() == want.keys()
    for k, w in want.items():
        g = got[k]
        assert abs(g["memory_used_bytes"] - w["memory_used_bytes"]) <= 1
        assert abs(g["memory_total_bytes"] - w["memory_total_bytes"]) <= 2
        assert g["gpu_uuid"] == w["gpu_uuid"] and g["gpu_name"] == w["gpu_name"]
        assert g["utilization_gpu_pct"] == pytest.approx(w["utilization_gpu_pct"], abs=1e-3)
        assert (g["pod"] is not None) == (k[0] in K8S)
    restarted = {g["pod"] for k, g in got.items() if k[0] == "cache-restarted-00"}
    assert len(restarted) == 2  # a new pod after the restart


def test_files_from_before_the_pod_columns_still_read(tmp_path: Path) -> None:
    import datetime as dt

    import pyarrow.parquet as pq

    from analyzer.bucket import open_bucket
    from collector.schema import GPU_SAMPLES
    from collector.writer import BucketWriter, to_arrow

    when = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
    row = {"ts": when, "host": "old", "gpu_index": 0, "memory_used_bytes": 1 << 30}
    BucketWriter(tmp_path, "old").write("gpu_samples", [row])
    f = next((tmp_path / "gpu_samples").glob("*/*/*.parquet"))
    t = pq.read_table(f)
    old = t.drop_columns(list(GPU_SAMPLES.optional))  # as written before the columns existed
    pq.write_table(old.replace_schema_metadata(t.schema.metadata), f)
    con, counts = open_bucket(tmp_path)
    assert counts["gpu_samples"] == 1
    assert con.execute("SELECT count(*), count(pod) FROM gpu_samples").fetchone() == (1, 0)
    # beside a new file that has them, both are read
    new = to_arrow("gpu_samples", [{**row, "ts": when + dt.timedelta(seconds=10), "pod": "p"}])
    BucketWriter(tmp_path, "old").write("gpu_samples", new)
    con, counts = open_bucket(tmp_path)
    assert con.execute("SELECT count(*), count(pod) FROM gpu_samples").fetchone() == (2, 1)


def test_engine_series_keep_names_labels_and_find_their_host(
    fleet: dict[str, Any], imported: dict[str, Any]
) -> None:
    rows = _rows(imported["bucket"], "metric_samples")
    want = {(r["host"], r["name"], r["ts"]) for r in _rows(fleet["ref"], "metric_samples")}
    got = {(r["host"], r["name"], r["ts"]) for r in rows}
    assert want <= got  # every scraped sample (steps between scrapes repeat the last value)
    assert {r["name"] for r in rows} == {n for _, n, _ in want}
    # Prometheus' own process series stay out; the servers' stay in
    assert not [r for r in rows if dict(r["labels"]).get("job") == "prometheus"]
    assert [
        r
        for r in rows
        if r["name"] == "process_resident_memory_bytes" and r["host"] == "host-rss-leak-00"
    ]
    # Kubernetes: the engine's instance is a pod IP; the host comes from the GPU's pod,
    # and the restarted server's series name both pods
    pods = {dict(r["labels"]).get("pod") for r in rows if r["host"] == "cache-restarted-00"}
    assert len(pods) == 2 and all(p and p.startswith("cache-restarted-00-") for p in pods)
    assert all(
        dict(r["labels"])["instance"].startswith("10.1.0.") for r in rows if r["host"] in K8S
    )


def test_host_filter_and_match(fleet: dict[str, Any]) -> None:
    bucket = fleet["root"] / "one-host"
    r = _import(
        fleet["url"], bucket, "--host", "cache-restarted-00", "--match", '{namespace="llm"}'
    )
    assert r.returncode == 0, r.stderr
    hosts = {p.name for p in (bucket / "gpu_samples").glob("date=*/host=*")}
    assert hosts == {"host=cache-restarted-00"}
    assert (bucket / "metric_samples").exists()


def test_unreachable_server(tmp_path: Path) -> None:
    r = _import(f"http://127.0.0.1:{promfleet.free_port()}", tmp_path / "b")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot connect" in lines[0] and "--url" in lines[0]
    assert not (tmp_path / "b").exists()


def test_empty_result(fleet: dict[str, Any], tmp_path: Path) -> None:
    r = _import(fleet["url"], tmp_path / "b", start="2026-06-01", end="2026-06-02")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no series" in r.stderr
    r = _import(fleet["url"], tmp_path / "b", "--host", "no-such-host")
    assert r.returncode == 2 and "no-such-host" in r.stderr


class _AuthProxy(http.server.BaseHTTPRequestHandler):
    upstream = ""
    token = "Bearer s3cret"

    def do_POST(self) -> None:  # noqa: N802
        if self.headers.get("Authorization") != self.token:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Bearer realm="prometheus"')
            self.end_headers()
            self.wfile.write(b"Unauthorized\n")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        req = urllib.request.Request(self.upstream + self.path, data=body, method="POST")
        req.add_header("Content-Type", self.headers.get("Content-Type", ""))
        with urllib.request.urlopen(req, timeout=60) as up:
            data = up.read()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_a: object) -> None:
        pass


def test_auth_required(fleet: dict[str, Any], tmp_path: Path) -> None:
    handler = type("H", (_AuthProxy,), {"upstream": fleet["url"]})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        r = _import(url, tmp_path / "no", start=START, end="2026-11-23T01:00:00Z")
        assert r.returncode == 2
        assert r.stderr.strip().count("\n") == 0 and "401" in r.stderr and "--header" in r.stderr
        r = _import(
            url,
            tmp_path / "yes",
            "--header",
            "Authorization: Bearer s3cret",
            end="2026-11-23T01:00:00Z",
        )
        assert r.returncode == 0, r.stderr
        assert list((tmp_path / "yes" / "gpu_samples").glob("*/*/*.parquet"))
    finally:
        srv.shutdown()
        srv.server_close()


def _requests(stderr: str) -> int:
    m = re.search(r"([0-9,]+) requests\)", stderr)
    assert m, stderr
    return int(m.group(1).replace(",", ""))


def test_sample_limit(fleet: dict[str, Any], tmp_path: Path) -> None:
    one_hour = "2026-11-23T01:00:00Z"
    full = tmp_path / "full"
    r = _import(fleet["url"], full, end=one_hour)
    assert r.returncode == 0, r.stderr
    n_full, asked = len(_rows(full, "gpu_samples")), _requests(r.stderr)
    with promfleet.PromServer(fleet["spare"], tmp_path, max_samples=1000) as small:
        # chunks are split until they fit: more requests, the same rows
        split = tmp_path / "split"
        r = _import(small.url, split, end=one_hour)
        assert r.returncode == 0, r.stderr
        assert _requests(r.stderr) > asked
        assert len(_rows(split, "gpu_samples")) == n_full
    with promfleet.PromServer(fleet["spare"], tmp_path, max_samples=60) as tiny:
        part = tmp_path / "part"
        r = _import(tiny.url, part, "--points", "10000", end=one_hour)
        skipped = [ln for ln in r.stderr.splitlines() if ln.startswith("skipped: ")]
        assert skipped and all(
            "sample limit" in ln and "--query.max-samples" in ln for ln in skipped
        )
        wrote = (part / "gpu_samples").exists() or (part / "metric_samples").exists()
        assert r.returncode == (1 if wrote else 2), r.stderr
        if wrote:
            runs = _rows(part, "collector_runs")
            failed = [x for x in runs if x["status"] == "failed"]
            assert failed and all("sample limit" in x["error"] for x in failed)
            assert all(x["error"] is None for x in runs if x["status"] == "ok")


class _Odd(http.server.BaseHTTPRequestHandler):
    """Not a Prometheus: a web page at /, nothing at /api, or an answer that never comes."""

    def do_POST(self) -> None:  # noqa: N802
        if self.path.startswith("/slow"):
            threading.Event().wait(5)
            return
        code, body = (200, b"<html>grafana</html>") if self.path.startswith("/html") else (404, b"")
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_a: object) -> None:
        pass


def test_wrong_url_and_timeout(tmp_path: Path) -> None:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Odd)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        for path, words in (
            ("", "no Prometheus API here"),
            ("/html", "not JSON"),
            ("/slow", "no answer within 1 s"),
        ):
            r = _import(base + path, tmp_path / "b", "--timeout", "1", "--retries", "0")
            assert r.returncode == 2, r.stderr
            assert r.stderr.strip().count("\n") == 0 and words in r.stderr, r.stderr
        r = _import("ftp://example.invalid", tmp_path / "b")
        assert r.returncode == 2 and "not an http(s) URL" in r.stderr
    finally:
        srv.shutdown()
        srv.server_close()


def test_mapping_is_data_users_extend(fleet: dict[str, Any], tmp_path: Path) -> None:
    from collector.promplan import MappingError, load_mapping

    bad = tmp_path / "bad.toml"
    bad.write_text('[[gpu]]\nmetric = "x"\ncolumn = "memory_used_mib"\n')
    with pytest.raises(MappingError, match=r"bad.toml: \[\[gpu\]\] entry 1: column"):
        load_mapping(bad)
    bad.write_text("[[gpu]\n")
    with pytest.raises(MappingError, match=r"bad.toml: .*line 1"):
        load_mapping(bad)
    # a renamed metric: the utilisation read from a recording rule's name instead
    mine = tmp_path / "mine.toml"
    mine.write_text(
        '[labels]\nhost = ["node_name"]\n'
        '[[gpu]]\nmetric = "DCGM_FI_DEV_GPU_UTIL"\ncolumn = "utilization_memory_pct"\nunit = "percent"\n'
    )
    m = load_mapping(mine)
    assert m.gpu["DCGM_FI_DEV_GPU_UTIL"][0] == "utilization_memory_pct"
    assert m.labels["host"][0] == "node_name" and "Hostname" in m.labels["host"]
    bucket = tmp_path / "mapped"
    r = _import(fleet["url"], bucket, "--mapping", str(mine), end="2026-11-23T00:30:00Z")
    assert r.returncode == 0, r.stderr
    rows = [x for x in _rows(bucket, "gpu_samples") if x["utilization_memory_pct"] is not None]
    assert rows and all(x["utilization_gpu_pct"] is None for x in rows)
    r = _import(fleet["url"], bucket, "--mapping", str(bad))
    assert r.returncode == 2 and "bad.toml" in r.stderr


def test_prom_bench_runs(tmp_path: Path) -> None:
    out = tmp_path / "prom.json"
    subprocess.run(
        [sys.executable, "bench/prom_bench.py", str(out), "2", "1"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    res = json.loads(out.read_text())
    assert res["import"]["samples"] > 0 and res["import"]["peak_rss_mb"] > 0
    # the first two scenarios: 2 + 1 GPUs, an hour at 10 s each
    assert res["local_scan"]["rows"] == 3 * 360


def test_an_overlapping_window_is_not_imported_twice(fleet: dict[str, Any], tmp_path: Path) -> None:
    b = tmp_path / "b"
    first = _import(fleet["url"], b, start="2026-11-23T01:00:00Z", end="2026-11-23T02:00:00Z")
    assert first.returncode == 0, first.stderr
    n = len(_rows(b, "gpu_samples"))
    later = _import(fleet["url"], b, start="2026-11-23T02:00:10Z", end="2026-11-23T03:00:00Z")
    assert later.returncode == 0, later.stderr
    again = _import(fleet["url"], b, start="2026-11-23T00:30:00Z", end="2026-11-23T01:30:00Z")
    assert again.returncode == 2
    assert again.stderr.strip().count("\n") == 0 and "already holds" in again.stderr
    assert "2026-11-23T01:00:00Z .. 2026-11-23T02:00:00Z" in again.stderr
    # the next window from where the last ended (cron, weekly): its shared step is skipped
    nxt = _import(fleet["url"], b, start="2026-11-23T03:00:00Z", end="2026-11-23T03:30:00Z")
    assert nxt.returncode == 0 and "starting at 2026-11-23T03:00:10Z" in nxt.stderr, nxt.stderr
    # a start between two steps means the first step after it (it was rounded down, into
    # the import before, and refused)
    mid = _import(fleet["url"], b, start="2026-11-23T03:30:05Z", end="2026-11-23T04:00:00Z")
    assert mid.returncode == 0, mid.stderr
    rows = _rows(b, "gpu_samples")
    gpus = n // 361  # 01:00:00 .. 02:00:00 holds 361 steps, 02:00:10 .. 03:00:00 360
    assert len(rows) == n + gpus * (360 + 180 + 180)  # each step once
    assert len({(r["host"], r["gpu_index"], r["ts"]) for r in rows}) == len(rows)
    # other hosts of the same window are still welcome in a bucket that lacks them
    other = tmp_path / "other"
    assert _import(fleet["url"], other, "--host", "cache-warmup-00").returncode == 0
    assert _import(fleet["url"], other, "--host", "healthy-static-00").returncode == 0


def test_prom_week_bench_runs(tmp_path: Path) -> None:
    out = tmp_path / "week.json"
    subprocess.run(
        [sys.executable, "bench/prom_week.py", str(out), "--gpus", "8", "--hours", "2"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    res = json.loads(out.read_text())
    # 8 GPUs, 2 h at 15 s: 480 steps of used, free and utilisation each, read once
    assert res["backfill"]["samples"] == res["import"]["samples"] == 8 * 480 * 3
    assert res["local_scan"]["rows"] == 8 * 480
    assert 0 < res["import"]["peak_rss_mb"] < 1024
    assert "real server" in res["source"]
