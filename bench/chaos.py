"""The collector's fault suite (``make chaos``; a short form runs in the tests).

1. **Logs**: a writer process appends numbered server-log lines and, at random
   moments, rotates its log by rename, by copytruncate, or by copy + delete +
   create (usually on the same inode); meanwhile real ``leakcollect run``
   processes are started and SIGKILLed at random points. After a last clean
   run, the bucket's ``log_lines`` are de-duplicated on the table's key (what
   the analyzer does) and compared with what was written: lines lost, lines
   duplicated, parquet files unreadable must all be 0.
2. **Endpoints** on 127.0.0.1 (real HTTP servers in threads): hung, trickling
   body, trickling headers, 10 MB of garbage, a refused port, beside a good
   one. The run must end on time, keep the good samples and name each bad one.
3. **A full file system**: a 1 MiB tmpfs as the bucket (when mounting is
   permitted; otherwise skipped, saying why): the run fails with exit 2 and
   keeps its cursor; once there is room, the next run loses nothing.

``python bench/chaos.py --cycles 200`` prints the figures and exits 1 on any
loss, duplicate, unreadable file or endpoint misbehaviour.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
LINE = "[2026-01-01 00:00:00] Decode batch, #running-req: {n}, #token: 1, token usage: 0.01, gen throughput (token/s): 1.0, #queue-req: 0\n"
GENERATIONS = 60  # rotated files kept by the writer (the oldest is deleted past this)
LAST_KEYS: dict[tuple[Any, ...], int] = {}


# --- the writer process ---------------------------------------------------------------------


def _shift(log: Path) -> int:
    """log.N -> log.N+1 for every generation; returns 1 when the oldest was deleted."""
    dropped = 0
    oldest = log.with_name(f"{log.name}.{GENERATIONS}")
    if oldest.exists():
        oldest.unlink()
        dropped = 1
    for i in range(GENERATIONS - 1, 0, -1):
        p = log.with_name(f"{log.name}.{i}")
        if p.exists():
            os.rename(p, log.with_name(f"{log.name}.{i + 1}"))
    return dropped


def writer(log: Path, seed: int, op_every_s: float, counts_to: Path | None = None) -> None:
    """Append numbered lines until SIGTERM; rotate at random; print the counts as JSON
    (and after each rotation, replace ``counts_to`` with them)."""
    rnd = random.Random(seed)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    fd = os.open(log, flags, 0o644)
    counts = {"written": 0, "rename": 0, "copytruncate": 0, "recreate": 0, "same_inode": 0}
    counts["oldest_rotated_deleted"] = 0  # long read by then: the loss count says so
    next_op = time.monotonic() + rnd.expovariate(1 / op_every_s)
    while not stop.is_set():
        os.write(fd, LINE.format(n=counts["written"]).encode())
        counts["written"] += 1
        time.sleep(rnd.uniform(0.001, 0.008))
        if time.monotonic() < next_op:
            continue
        next_op = time.monotonic() + rnd.expovariate(1 / op_every_s)
        op = rnd.choice(("rename", "copytruncate", "recreate"))
        counts[op] += 1
        counts["oldest_rotated_deleted"] += _shift(log)
        first = log.with_name(f"{log.name}.1")
        if op == "rename":
            os.rename(log, first)
            os.close(fd)
            fd = os.open(log, flags, 0o644)
        elif op == "copytruncate":
            shutil.copyfile(log, first)
            os.ftruncate(fd, 0)
        else:
            ino = os.fstat(fd).st_ino
            shutil.copyfile(log, first)
            os.unlink(log)
            os.close(fd)
            fd = os.open(log, flags, 0o644)
            counts["same_inode"] += int(os.fstat(fd).st_ino == ino)
        if counts_to is not None:
            counts_to.with_suffix(".tmp").write_text(json.dumps(counts))
            os.replace(counts_to.with_suffix(".tmp"), counts_to)
    os.close(fd)
    print(json.dumps(counts), flush=True)


# --- 1. logs under kills and rotations -------------------------------------------------------


def _collector(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "collector.cli", "run", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )


def _bucket_lines(bucket: Path) -> tuple[list[int], int, int, list[str]]:
    """(line numbers after de-duplication on the table key, files, rows, unreadable files)."""
    from collector.schema import table

    key = table("log_lines").key
    seen: dict[tuple[Any, ...], int] = {}
    global LAST_KEYS
    LAST_KEYS = seen
    files = rows = 0
    bad = []
    for f in sorted((bucket / "log_lines").rglob("*.parquet")):
        if f.name.startswith("."):
            continue  # a temp file of a killed run: readers skip them
        files += 1
        try:
            data = pq.read_table(f).to_pylist()
        except Exception as e:  # any reader error is a finding of this suite
            bad.append(f"{f.name}: {e}")
            continue
        rows += len(data)
        for r in data:
            seen[tuple(r.get(c) for c in key)] = int(
                r["text"].split("#running-req: ")[1].split(",")[0]
            )
    for f in bucket.rglob("*.parquet"):  # every table's files, not only the logs'
        if "log_lines" not in f.parts and not f.name.startswith("."):
            files += 1
            try:
                pq.read_metadata(f)
            except Exception as e:
                bad.append(f"{f.name}: {e}")
    return sorted(seen.values()), files, rows, bad


def _rotations(counts: Path) -> int:
    try:
        c = json.loads(counts.read_text())
    except (OSError, ValueError):
        return 0
    return int(c["rename"] + c["copytruncate"] + c["recreate"])


def log_chaos(
    work: Path,
    cycles: int,
    seed: int,
    kill_p: float = 0.6,
    min_rotations: int = 4,
    max_extra_s: float = 30.0,
) -> dict[str, Any]:
    """``cycles`` collector runs, ``kill_p`` of them SIGKILLed, while a writer rotates the
    log; then more runs until it has rotated ``min_rotations`` times, for at most
    ``max_extra_s`` seconds: the rotations follow the clock (one per 0.6 s on average),
    and a fast machine finishes the runs sooner."""
    rnd = random.Random(seed)
    log, bucket, state = work / "logs" / "server.log", work / "bucket", work / "state"
    log.parent.mkdir(parents=True)
    args = ["--once", "--no-gpu", "--log", str(log), "--bucket", str(bucket)]
    args += ["--state-dir", str(state), "--host", "chaos"]
    # a server's log starts with its start-up lines; a first clean run sets the cursor on it
    # (a cursor on an empty file cannot tell a copytruncate from nothing: see logtail)
    log.write_text("server starting\n")
    t_run = time.monotonic()
    _collector(args).wait(timeout=120)
    # kill within a run's own length, so kills land mid-run on a fast machine too
    run_s = max(0.05, time.monotonic() - t_run)
    counts_file = work / "writer-counts.json"
    w = subprocess.Popen(
        [sys.executable, __file__, "writer", str(log), "--seed", str(seed)]
        + ["--counts", str(counts_file)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    kills = ran = 0
    t0 = time.monotonic()
    try:
        extra_until = None
        while ran < cycles or _rotations(counts_file) < min_rotations:
            if ran >= cycles:
                extra_until = extra_until or time.monotonic() + max_extra_s
                if time.monotonic() > extra_until:
                    break
            ran += 1
            p = _collector(args)
            if rnd.random() < kill_p:
                time.sleep(rnd.uniform(0.02, 0.9) * run_s)
                if p.poll() is None:
                    p.send_signal(signal.SIGKILL)
                    kills += 1
            p.wait(timeout=120)
    finally:
        w.send_signal(signal.SIGTERM)
        out, _ = w.communicate(timeout=30)
    counts = json.loads(out.strip().splitlines()[-1])
    for _ in range(2):  # the last lines, with nobody killing the run
        _collector(args).wait(timeout=120)
    found, files, rows, bad = _bucket_lines(bucket)
    written = counts.pop("written")
    unique = set(found)
    temp = [p.name for p in bucket.rglob(".*") if p.is_file()]
    said = [
        r["error"]
        for f in (bucket / "collector_runs").rglob("[!.]*.parquet")
        for r in pq.read_table(f).to_pylist()
        if r["source"] == "logs" and r["error"]
    ]
    return {
        "cycles": ran,
        "kills": kills,
        "seconds": round(time.monotonic() - t0, 1),
        "lines_written": written,
        "lines_found": len(unique),
        "lost": len(set(range(written)) - unique),
        "lost_examples": sorted(set(range(written)) - unique)[:10],
        "duplicated": len(found) - len(unique),
        "rows_before_dedupe": rows,
        "parquet_files": files,
        "unreadable_files": bad,
        "temp_files_left_by_killed_runs": len(temp),
        "runs_with_a_log_error": len(said),
        "what_they_said": said[:3],
        **counts,
    }


# --- 2. endpoints that misbehave ----------------------------------------------------------


class _Bad(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def _slow(self, head: bytes, unit: bytes) -> None:
        with contextlib.suppress(OSError):
            self.wfile.write(head)
            for k in range(600):
                self.wfile.write(unit[k % len(unit) : k % len(unit) + 1])
                self.wfile.flush()
                time.sleep(0.05)

    def do_GET(self) -> None:
        if self.path == "/good":
            body = b"# TYPE sglang:token_usage gauge\nsglang:token_usage 0.5\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/hang":
            time.sleep(30)
        elif self.path == "/trickle":
            self._slow(b"HTTP/1.0 200 OK\r\n\r\n", b"sglang:x 1\n")
        elif self.path == "/trickle-head":
            self._slow(b"HTTP/1.0 200 OK\r\n", b"X-A: b\r\n")
        elif self.path == "/huge":
            self.send_response(200)
            self.end_headers()
            with contextlib.suppress(OSError):
                for _ in range(160):
                    self.wfile.write(b"\x00{{garbage}} not metrics\n" * 2600)

    def log_message(self, *args: object) -> None:
        pass


def endpoint_chaos(work: Path) -> dict[str, Any]:
    from collector.run import Config, collect_run

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Bad)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    with socket_closed_port() as refused:
        bad = ["/hang", "/trickle", "/trickle-head", "/huge"]
        urls = [f"{base}/good", *(base + p for p in bad), f"http://127.0.0.1:{refused}/metrics"]
        cfg = Config(
            bucket=str(work / "bucket"),
            host="chaos",
            state_dir=work / "state",
            no_gpu=True,
            duration=3.0,
            interval=1.0,
            metrics_timeout=30.0,
            metrics_urls=urls,
        )
        t0 = time.monotonic()
        res = collect_run(cfg, say=lambda m: None)
        took = time.monotonic() - t0
    srv.shutdown()
    reasons = dict(res.failures).get("metrics", "")
    good = [
        r
        for f in (work / "bucket" / "metric_samples").rglob("*.parquet")
        for r in pq.read_table(f).to_pylist()
        if r["source"].endswith("/good")
    ]
    named = {u.split("/", 3)[-1]: u + ":" in reasons for u in urls[1:]}
    return {
        "run_seconds": round(took, 2),
        "run_limit_seconds": cfg.duration + cfg.interval,
        "good_samples": len(good),
        "each_bad_endpoint_named": named,
        "too_large_said": "too large" in reasons,
        "ok": took < cfg.duration + cfg.interval + 1.0 and len(good) >= 3 and all(named.values()),
    }


@contextlib.contextmanager
def socket_closed_port() -> Any:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now: connections are refused
    yield port


# --- 3. a full file system ----------------------------------------------------------------


def full_fs_chaos(work: Path) -> dict[str, Any]:
    mnt = work / "small"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if r.returncode != 0:
        why = (r.stderr.strip() or f"mount exited {r.returncode}").splitlines()[-1]
        return {"skipped": f"cannot mount a 1 MiB tmpfs here: {why}"}
    try:
        log = work / "full.log"
        with log.open("w") as f:
            for n in range(20000):  # 3.6 MB, half of it random: more than the bucket holds
                f.write(LINE.format(n=n)[:-1] + f" {os.urandom(32).hex()}\n")
        args = ["--once", "--no-gpu", "--log", str(log), "--bucket", str(mnt / "b")]
        args += ["--state-dir", str(work / "fstate"), "--host", "chaos"]
        first = subprocess.run(
            [sys.executable, "-m", "collector.cli", "run", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        cursor_kept = not (work / "fstate" / "log-cursors.json").exists()
        subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)
        second = subprocess.run(
            [sys.executable, "-m", "collector.cli", "run", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        found, files, _, bad = _bucket_lines(mnt / "b")
        temp = [p.name for p in (mnt / "b").rglob("*") if p.is_file() and p.suffix != ".parquet"]
        return {
            "temp_files_left": temp,
            "full_exit": first.returncode,
            "full_said": (first.stderr.strip().splitlines() or [""])[-1][:200],
            "cursor_kept": cursor_kept,
            "after_room_exit": second.returncode,
            "lines_written": 20000,
            "lost": len(set(range(20000)) - set(found)),
            "duplicated": len(found) - len(set(found)),
            "unreadable_files": bad,
            "parquet_files": files,
        }
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


# --- the suite ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd")
    wp = sub.add_parser("writer", help="(internal) the log-writing process")
    wp.add_argument("log", type=Path)
    wp.add_argument("--seed", type=int, default=1)
    wp.add_argument("--op-every", type=float, default=0.6, help="mean seconds between rotations")
    wp.add_argument("--counts", type=Path, help="replaced with the counts after each rotation")
    ap.add_argument("--cycles", type=int, default=200, help="collector runs, about half SIGKILLed")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    a = ap.parse_args(argv)
    if a.cmd == "writer":
        writer(a.log, a.seed, a.op_every, a.counts)
        return 0
    with tempfile.TemporaryDirectory(prefix="leakcollect-chaos-") as tmp:
        work = Path(tmp)
        figures = {
            "logs": log_chaos(work / "logs", a.cycles, a.seed),
            "endpoints": endpoint_chaos(work / "endpoints"),
            "full_fs": full_fs_chaos(work),
        }
    print(json.dumps(figures, indent=2))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(figures, indent=2) + "\n")
    lg, fs = figures["logs"], figures["full_fs"]
    ok = lg["lost"] == 0 and lg["duplicated"] == 0 and not lg["unreadable_files"]
    ok = ok and figures["endpoints"]["ok"]
    ok = ok and (
        "skipped" in fs or (fs["lost"] == 0 and fs["duplicated"] == 0 and fs["full_exit"] == 2)
    )
    print("chaos: " + ("all held" if ok else "FAILED"), file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
