"""Fleet-week benchmark: the default pack against one plain DuckDB scan of the same files.

Usage: scale_bench.py OUT.json [--hosts 125] [--days 7] [--runs 3] [--fractions 0.1,0.3,1]
       [--memory-limit 1GB] [--batch-hosts 32] [--dask-workers 2] [--s3-hosts 12]

The bucket (bench/fleetweek.py: 125 hosts x 8 GPUs x 7 days at 10 s = 60 M device
samples) is generated once and cached under bench/data/. Every measurement runs in
a fresh child process (so its peak RSS is its own), ``--runs`` times; the median is
reported. Side by side in one run: the plain scan-aggregate, the full default pack
locally (host batches) at each fraction of the hosts, the pack on a local Dask
cluster, the weekly fleet report, and the pack over S3 (moto on 127.0.0.1 behind
a byte-counting proxy: bytes read vs bytes stored).
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

# the first pass of the rollups alone: per GPU and minute (what the pack keeps of the samples)
MINUTE_SQL = """SELECT count(*), sum(n) FROM (
    SELECT host, gpu_index, CAST(floor(epoch(ts) / 60) AS BIGINT) AS m, count(*) AS n,
           min(memory_used_bytes), max(memory_used_bytes), avg(memory_used_bytes),
           max(utilization_gpu_pct)
    FROM read_parquet({files}) GROUP BY ALL)"""
SCAN_SQL = """SELECT count(*), sum(n) FROM (
    SELECT host, gpu_index, count(*) AS n, min(memory_used_bytes), max(memory_used_bytes),
           avg(memory_used_bytes)
    FROM read_parquet({files}) GROUP BY ALL)"""


def _rss_mb() -> float:
    """This process's peak RSS (VmHWM: ru_maxrss can carry the parent's over exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _hosts(bucket: Path, k: int) -> list[str]:
    days = sorted((bucket / "gpu_samples").glob("date=*"))
    return sorted(p.name[5:] for p in days[0].glob("host=*"))[:k] if days else []


def child(kind: str, bucket: str, k: int, opts: dict[str, Any]) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    from analyzer.bucket import Scope
    from analyzer.packs import load_packs
    from collector import layout

    hosts = _hosts(Path(opts.get("local_bucket") or bucket), k)
    scope = Scope(hosts=hosts)
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    if kind in ("scan", "minute"):
        import duckdb

        # the plain scan lists the files and reads them: no footer checks, no views
        files = [
            e.path
            for e in layout.list_entries(bucket, "gpu_samples", None, scope.date_ok, scope.host_ok)
        ]
        con = duckdb.connect()
        if opts.get("memory_limit"):
            con.execute(f"SET memory_limit = '{opts['memory_limit']}'")
        sql = (SCAN_SQL if kind == "scan" else MINUTE_SQL).format(
            files="[" + ", ".join(f"'{f}'" for f in files) + "]"
        )
        out["gpus"], out["samples"] = con.execute(sql).fetchone() or (None, None)
    elif kind in ("pack", "dask", "s3"):
        from analyzer.daskpool import dask_executor
        from analyzer.fanout import analyze_fanout, analyze_local

        if kind == "dask":
            pool, closer = dask_executor(None, int(opts["dask_workers"]))
            t0 = time.perf_counter()  # the cluster's start-up is not the analysis
            try:
                doc = analyze_fanout(
                    bucket,
                    load_packs(),
                    pool,
                    scope=scope,
                    memory_limit=opts.get("memory_limit"),
                    hosts_per_task=max(1, -(-k // (4 * int(opts["dask_workers"])))),
                )
            finally:
                closer.close()
        else:
            said: list[str] = []
            import datetime as dt

            now = dt.datetime.fromisoformat(opts["now"]) if opts.get("now") else None
            stages: list[dict[str, Any]] = []
            doc = analyze_local(
                bucket,
                load_packs(),
                scope=scope,
                memory_limit=opts.get("memory_limit"),
                batch_hosts=int(opts["batch_hosts"]),
                progress=said.append,
                now=now,  # the analysis as of the trace's end (a generated month can end later than today)
                timings=stages,
            )
            out["tier"] = [x for x in said if x.startswith("rollup tier")]
            out["stages"] = stages
        truth = json.loads((Path(opts["local_bucket"] or bucket) / "truth.json").read_text())
        leak = {f.host for f in doc.findings if f.category == "leak.gpu"}
        cache = {f.host for f in doc.findings if f.category == "cache.growth"}
        want_leak = set(truth["leaking_hosts"]) & set(hosts)
        out.update(
            findings=len(doc.findings),
            leak_hosts_found=len(leak & want_leak),
            leak_hosts_true=len(want_leak),
            leak_false_positive_hosts=len(leak - want_leak),
            cache_hosts_found=len(cache & set(truth["caching_hosts"])),
            cache_on_leaking_hosts=len(cache & want_leak),
        )
        if opts.get("doc_out"):
            Path(opts["doc_out"]).write_text(doc.to_json(indent=None))
    elif kind == "minute_summary":
        import minute_summary

        src = Path(opts["local_bucket"])
        files = [
            e.path
            for e in layout.list_entries(
                str(src), "gpu_samples", None, scope.date_ok, scope.host_ok
            )
        ]
        out.update(
            minute_summary.measure(src, files, int(opts["inner_runs"]), opts.get("memory_limit"))
        )
    elif kind == "rollup":
        import datetime as dt

        from analyzer import tier

        r = tier.build(bucket, before=dt.date.fromisoformat(opts["before"]))
        out.update(host_days_built=r.built, host_days_current=r.current)
    elif kind == "fleet_command":
        import dataclasses
        import datetime as dt

        from analyzer import fleet
        from analyzer.fanout import analyze_local
        from reports.fleet import render_fleet

        # what `leakreport fleet --week W` does: the week and the week before, then the page
        now = dt.datetime.fromisoformat(opts["now"])
        week = opts.get("week", "2026-W48")
        docs = []
        for w in (week, fleet.previous_week(week)):
            start, end = fleet.week_range(w)
            docs.append(
                analyze_local(
                    bucket,
                    load_packs(),
                    scope=dataclasses.replace(scope, since=start, until=end),
                    memory_limit=opts.get("memory_limit"),
                    batch_hosts=int(opts["batch_hosts"]),
                    now=now,
                )
            )
        html = render_fleet(fleet.build(week, docs[0], docs[1] if docs[1].hosts else None))
        out["html_kb"] = round(len(html.encode()) / 1024, 1)
        if opts.get("html_out"):
            Path(opts["html_out"]).write_text(html)
    elif kind == "rollup_weeks":
        import datetime as dt

        from leakreport.cmd_bucket import store_weeks

        # the week step of `leakreport rollup --before B` (after its tier step)
        r = store_weeks(bucket, dt.date.fromisoformat(opts["before"]))
        out.update(weeks_stored=r.stored, weeks_current=r.current, weeks_unclean=r.unclean)
    elif kind == "fleet_stored":
        from leakreport.cmd_analyze import fleet_page
        from leakreport.common import Console
        from leakreport.options import AnalysisOptions

        class Kept(Console):  # where each week came from, kept instead of printed
            lines: list[str] = []

            def __call__(self, msg: str) -> None:
                self.lines.append(msg)

        # `leakreport fleet --week W` itself: stored findings where current, else analysed
        o = AnalysisOptions(
            memory_limit=opts.get("memory_limit"), batch_hosts=int(opts["batch_hosts"])
        )
        html, _doc, _view = fleet_page(bucket, opts.get("week", "2026-W48"), o, Kept(0))
        out["weeks"] = [m for m in Kept.lines if m.startswith("week ")]
        out["html_kb"] = round(len(html.encode()) / 1024, 1)
        if opts.get("html_out"):
            Path(opts["html_out"]).write_text(html)
    elif kind == "fleet":
        from analyzer import fleet
        from analyzer.findings import FindingsDocument
        from collector.atomic import write_atomic
        from reports.fleet import render_fleet

        doc = FindingsDocument.from_json(Path(opts["doc_out"]).read_text())
        t0 = time.perf_counter()
        page = write_atomic(
            Path(opts["doc_out"]).with_suffix(".html"), render_fleet(fleet.build("2026-W48", doc))
        )
        out["html_kb"] = round(page.stat().st_size / 1024, 1)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    out["rss_mb"] = _rss_mb()
    return out


def measure(kind: str, bucket: str, k: int, runs: int, opts: dict[str, Any]) -> dict[str, Any]:
    results = []
    plain = {k: v for k, v in opts.items() if k != "env"}
    for _ in range(runs):
        r = subprocess.run(
            [sys.executable, __file__, "--child", kind, bucket, str(k), json.dumps(plain)],
            capture_output=True,
            text=True,
            check=False,
            cwd=REPO,
            env=opts.get("env"),
        )
        if r.returncode != 0:
            raise RuntimeError(f"{kind} failed: {r.stderr[-2000:]}")
        results.append(json.loads(r.stdout.strip().splitlines()[-1]))
    best = dict(results[0])
    if "stages" in best:  # per stage: the median of the runs (seconds; rows, tier or raw)
        med: dict[str, dict[str, Any]] = {}
        for st in best["stages"]:
            runs_s = [
                y["seconds"] for x in results for y in x["stages"] if y["stage"] == st["stage"]
            ]
            med[st["stage"]] = {**st, "seconds": round(statistics.median(runs_s), 4)}
        best["stages"] = sorted(med.values(), key=lambda x: -x["seconds"])
    best["seconds"] = statistics.median(x["seconds"] for x in results)
    best["seconds_all"] = [x["seconds"] for x in results]
    best["rss_mb"] = max(x["rss_mb"] for x in results)
    return best


def tier_section(bucket: Path, runs: int, opts: dict[str, Any], tmp: str) -> dict[str, Any]:
    """Scan, pack with no tier (cold), ``leakreport rollup`` of the finished days, pack
    with the tier for those (warm: only the last day raw), the fleet report of that
    run, rollup of the last day, pack over a full tier; on a hard-linked copy."""
    import datetime as dt
    import os
    import shutil

    copy = Path(tmp) / f"tiered-{bucket.name}"
    shutil.copytree(bucket, copy, copy_function=os.link)
    hosts = json.loads((bucket / "truth.json").read_text())["hosts"]
    days = sorted(p.name[5:] for p in (bucket / "gpu_samples").glob("date=*"))
    last = dt.date.fromisoformat(days[-1])
    nxt = str(last + dt.timedelta(days=1))
    o = {**opts, "local_bucket": str(bucket), "now": f"{nxt}T00:00:00+00:00"}
    docs = {k: f"{tmp}/{bucket.name}-{k}.json" for k in ("cold", "warm", "full")}
    print(f"tier section on {bucket.name}", file=sys.stderr)
    res: dict[str, Any] = {"hosts": hosts, "days": len(days)}
    res["scan"] = measure("scan", str(copy), hosts, runs, o)
    res["cold"] = measure("pack", str(copy), hosts, runs, {**o, "doc_out": docs["cold"]})
    # the first pass over raw samples, against per-minute summaries a collector could write
    res["first_pass"] = measure("minute_summary", str(copy), hosts, 1, {**o, "inner_runs": 3})
    res["rollup_finished"] = measure("rollup", str(copy), hosts, 1, {**o, "before": str(last)})
    res["warm"] = measure("pack", str(copy), hosts, runs, {**o, "doc_out": docs["warm"]})
    res["fleet_report"] = measure("fleet", str(copy), hosts, runs, {**o, "doc_out": docs["warm"]})
    res["fleet_command"] = measure(
        "fleet_command", str(copy), hosts, runs, {**o, "html_out": f"{tmp}/{bucket.name}-fc.html"}
    )
    res["rollup_last_day"] = measure("rollup", str(copy), hosts, 1, {**o, "before": nxt})
    res["full"] = measure("pack", str(copy), hosts, runs, {**o, "doc_out": docs["full"]})
    # the bucket's week (2026-W48) ends the day before nxt: with --before nxt it is finished
    # (and so is the empty week before it, which fleet no longer analyses); today is later
    res["rollup_weeks"] = measure("rollup_weeks", str(copy), hosts, 1, {**o, "before": nxt})
    res["fleet_stored"] = measure(
        "fleet_stored", str(copy), hosts, runs, {**o, "html_out": f"{tmp}/{bucket.name}-fs.html"}
    )

    def findings(k: str) -> list[Any]:
        d = json.loads(Path(docs[k]).read_text())
        return [(f["rule_id"], f["host"], f["gpu"], f["summary"]) for f in d["findings"]]

    res["same_findings"] = findings("cold") == findings("warm") == findings("full")

    def page(k: str) -> str:  # the stored page names when its findings were analysed
        return re.sub(r" · generated [^<]*", "", Path(f"{tmp}/{bucket.name}-{k}.html").read_text())

    res["same_fleet_page"] = page("fc") == page("fs")
    scan = res["scan"]["seconds"]
    for k in ("cold", "warm", "full", "fleet_report", "fleet_command", "fleet_stored"):
        res[f"{k}_over_scan"] = round(res[k]["seconds"] / max(scan, 1e-9), 1)
    first = res["first_pass"]
    for k in ("raw", "summary", "summary_unique"):  # scan and passes: one after the other
        first[f"{k}_over_scan"] = round(first[k] / max(scan, 1e-9), 1)
    res["peak_rss_mb"] = max(
        res[k]["rss_mb"] for k in ("cold", "warm", "full", "fleet_command", "rollup_finished")
    )
    shutil.rmtree(copy, ignore_errors=True)
    return res


def bucket_for(hosts: int, days: int) -> Path:
    import fleetweek

    path = REPO / "bench" / "data" / f"fleetweek-{hosts}h-{days}d"
    if not (path / ".done").exists():
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        t0 = time.perf_counter()
        info = fleetweek.generate(path, hosts=hosts, days=days)
        info["generate_s"] = round(time.perf_counter() - t0, 1)
        (path / "truth.json").write_text(json.dumps(info, indent=1, default=str))
        (path / ".done").write_text("")
        print(f"generated {path} in {info['generate_s']} s", file=sys.stderr)
    return path


def main(argv: list[str]) -> dict[str, Any]:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hosts", type=int, default=125)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fractions", default="0.1,0.3,1")
    ap.add_argument("--memory-limit", default="1GB")
    ap.add_argument("--batch-hosts", type=int, default=32)
    ap.add_argument("--dask-workers", type=int, default=2)
    ap.add_argument("--s3-hosts", type=int, default=12, help="0 = skip the S3 measurement")
    ap.add_argument("--tier-hosts", type=int, default=25, help="hosts of the tier week/month runs")
    ap.add_argument("--month-days", type=int, default=30, help="0 = no month run")
    ap.add_argument("--tier-only", action="store_true", help="only the rollup-tier section")
    a = ap.parse_args(argv)
    if a.tier_only:
        return tier_main(a)
    bucket = bucket_for(a.hosts, a.days)
    truth = json.loads((bucket / "truth.json").read_text())
    opts: dict[str, Any] = {
        "memory_limit": a.memory_limit,
        "batch_hosts": a.batch_hosts,
        "dask_workers": a.dask_workers,
        "local_bucket": str(bucket),
    }
    res: dict[str, Any] = {
        "bucket": {k: truth[k] for k in ("rows", "files", "hosts", "gpus") if k in truth},
        "bucket_bytes": sum(f.stat().st_size for f in bucket.rglob("*.parquet")),
        "memory_limit": a.memory_limit,
        "batch_hosts": a.batch_hosts,
        "runs": a.runs,
        "fractions": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for frac in (float(x) for x in a.fractions.split(",")):
            k = max(1, round(a.hosts * frac))
            say = f"{frac:.0%} ({k} hosts)"
            print(f"{say}: scan, pack", file=sys.stderr)
            scan = measure("scan", str(bucket), k, a.runs, opts)
            pack = measure("pack", str(bucket), k, a.runs, {**opts, "doc_out": f"{tmp}/doc.json"})
            res["fractions"][f"{frac:g}"] = {
                "hosts": k,
                "scan": scan,
                "pack": pack,
                "pack_over_scan": round(pack["seconds"] / max(scan["seconds"], 1e-9), 1),
            }
        res["minute_aggregate"] = measure("minute", str(bucket), a.hosts, a.runs, opts)
        print("dask", file=sys.stderr)
        res["dask"] = measure("dask", str(bucket), a.hosts, max(1, a.runs - 1), opts)
        res["fleet_report"] = measure(
            "fleet", str(bucket), a.hosts, a.runs, {**opts, "doc_out": f"{tmp}/doc.json"}
        )
        if a.s3_hosts:
            import s3bench

            print("s3", file=sys.stderr)
            res["s3"] = s3bench.run(bucket, min(a.s3_hosts, a.hosts), opts, measure)
    full = res["fractions"].get("1")
    if full:
        res["dask_over_scan"] = round(res["dask"]["seconds"] / full["scan"]["seconds"], 1)
    fr = res["fractions"]
    if len(fr) > 1:
        base = fr[min(fr, key=float)]
        res["growth_per_host"] = {
            f: round(
                (v["pack"]["seconds"] / v["hosts"]) / (base["pack"]["seconds"] / base["hosts"]), 2
            )
            for f, v in fr.items()
        }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    return res


def tier_main(a: argparse.Namespace) -> dict[str, Any]:
    """The rollup tier: a week and a month of the same hosts, scan/cold/warm/full."""
    opts: dict[str, Any] = {"memory_limit": a.memory_limit, "batch_hosts": a.batch_hosts}
    res: dict[str, Any] = {"runs": a.runs, "memory_limit": a.memory_limit}
    with tempfile.TemporaryDirectory() as tmp:
        res["week"] = tier_section(bucket_for(a.tier_hosts, a.days), a.runs, opts, tmp)
        if a.month_days:
            month = bucket_for(a.tier_hosts, a.month_days)
            res["month"] = tier_section(month, a.runs, opts, tmp)
            res["month_warm_over_week_warm"] = round(
                res["month"]["warm"]["seconds"] / res["week"]["warm"]["seconds"], 2
            )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        kind, bucket, k, opts = sys.argv[2], sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5])
        print(json.dumps(child(kind, bucket, k, opts)))
    else:
        main(sys.argv[1:])
