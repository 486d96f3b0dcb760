"""`make bench`: every benchmark in one run, then bench/results.json and bench/results.md.

Usage: run_all.py OUT_DIR [--tiny | --table]. --table re-renders results.md only. --tiny (what CI runs) shrinks every size so the
code paths stay working; its numbers mean nothing.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def _run(script: str, *args: str) -> None:
    subprocess.run([sys.executable, str(REPO / "bench" / script), *args], check=True, cwd=REPO)


def table(res: dict[str, Any]) -> str:
    sc = res["scale"]
    fr = sc["fractions"]
    full_key = max(fr, key=float)
    scan = fr[full_key]["scan"]["seconds"]
    rows = [
        "| measurement | data | median s | × plain scan | peak RSS MB | checks |",
        "|---|---|---:|---:|---:|---|",
    ]

    def add(name: str, data: str, secs: float, rss: float | str, checks: str = "") -> None:
        ratio = f"{secs / scan:.1f}" if scan else "—"
        rows.append(f"| {name} | {data} | {secs:.3f} | {ratio} | {rss} | {checks} |")

    b = sc["bucket"]
    for f in sorted(fr, key=float):
        v = fr[f]
        add(
            "plain DuckDB scan-aggregate",
            f"{v['hosts']} hosts",
            v["scan"]["seconds"],
            v["scan"]["rss_mb"],
        )
        p = v["pack"]
        add(
            "full default pack (local, host batches)",
            f"{v['hosts']} hosts",
            p["seconds"],
            p["rss_mb"],
            f"leaking hosts found {p['leak_hosts_found']}/{p['leak_hosts_true']}, "
            f"false-positive hosts {p['leak_false_positive_hosts']}; "
            f"{v['pack_over_scan']}× its own scan",
        )
    mi = sc["minute_aggregate"]
    add(
        "per-GPU per-minute aggregate alone (the rollups' first pass)",
        "all hosts",
        mi["seconds"],
        mi["rss_mb"],
        f"{mi['gpus']:,} rows out",
    )
    d = sc["dask"]
    add(
        "full default pack on Dask (2 workers)",
        "all hosts",
        d["seconds"],
        f"{d['rss_mb']} (driver)",
        f"same findings count: {d['findings'] == fr[full_key]['pack']['findings']}",
    )
    st = res.get("stage")
    if st:
        add(
            f"S3 objects staged, {st['latency_ms']:g} ms a request: {st['threads']['threads']} at a time",
            f"{st['objects']} × {st['object_kb']} KB",
            st["threads"]["seconds"],
            "—",
            f"in turn {st['in_turn']['seconds']} s ({st['in_turn_over_threads']}× slower); "
            f"same bytes: {st['threads']['same_bytes'] and st['in_turn']['same_bytes']}",
        )
    fl = sc["fleet_report"]
    add(
        "weekly fleet report (build + render)",
        "all hosts",
        fl["seconds"],
        fl["rss_mb"],
        f"{fl['html_kb']} KB page",
    )
    if "s3" in sc and "seconds" in sc["s3"]:
        s3 = sc["s3"]
        add(
            "full default pack over S3 (moto, 127.0.0.1)",
            f"{s3['hosts']} of {s3['hosts_stored']} hosts stored",
            s3["seconds"],
            s3["rss_mb"],
            f"read {s3['bytes_read'] / 2**20:.1f} MiB of {s3['bytes_stored'] / 2**20:.1f} MiB stored "
            f"({s3['bytes_of_hosts_analysed'] / 2**20:.1f} MiB for the hosts analysed)",
        )
    lp = res["logparse"]
    floor = lp.get("floor_read_csv", {})  # older results lack the floor and the memory
    rows.append(
        f"| log parsing (`leakreport logs parse`) | {lp['bytes'] / 2**20:.0f} MiB, {lp['lines']:,} lines "
        f"| {lp['total_s']:.3f} | {lp['total_s'] / scan:.1f} | {lp.get('peak_rss_mb', '—')} "
        f"| {lp['mb_per_s']:.1f} MB/s ({lp['mb_per_cpu_s']:.0f} MB per CPU-s, load "
        f"{lp.get('load_avg_1m', '—')}), {lp['events']:,} events; {lp.get('ratio_to_read_csv', '—')}× "
        f"the time of polars' plain read of the file ({floor.get('mb_per_s', '—')} MB/s) |"
    )
    co = res["collector"]["once_run_8_gpus_3_logs"]
    rows.append(
        f"| collector `--once` (8 fake GPUs, 3 logs) | one run | {co['cpu_s']:.3f} CPU "
        f"| — | {co['peak_rss_mb']:.0f} | ≈{res['collector']['cron_minute_core_share_pct']} % of a core "
        f"per cron minute; import {res['collector']['import_s']['ratio_to_floor']}× pyarrow's |"
    )
    pr = res.get("prom", {})
    if "import" in pr:
        im = pr["import"]
        rows.append(
            f"| `leakcollect import prometheus` ({pr['hosts']} hosts, {pr['hours']:g} h at "
            f"{pr['step_s']} s) | {im['samples']:,} samples | {im['seconds']:.3f} "
            f"| {im['seconds'] / scan:.1f} | {im['peak_rss_mb']:.0f} | {im['samples_per_s']:,} "
            f"samples/s; a scan of the bucket it wrote: {pr['local_scan']['rows_per_s']:,} rows/s |"
        )
    elif pr:
        rows.append(f"| `leakcollect import prometheus` | — | — | — | — | {pr.get('skipped')} |")
    pw = res.get("prom_week", {})  # bench/prom_week.py; the size: --gpus 1000 --hours 168
    if "import" in pw:
        im = pw["import"]
        rows.append(
            f"| `leakcollect import prometheus`, dcgm-exporter only ({pw['gpus']:,} GPUs, "
            f"{pw['hours']:g} h at {pw['step_s']} s, real Prometheus) | {im['samples']:,} samples "
            f"| {im['seconds']:.3f} | {im['seconds'] / scan:.1f} | {im['peak_rss_mb']:.0f} "
            f"| {im['samples_per_s']:,} samples/s; a scan of the bucket it wrote: "
            f"{pw['local_scan']['rows_per_s']:,} rows/s |"
        )
    elif pw:
        rows.append(
            f"| `leakcollect import prometheus` (fleet) | — | — | — | — | {pw.get('skipped')} |"
        )
    rp = res.get("reports", {})
    if rp:
        rows.append(
            f"| HTML pages ({rp.get('gpus')} GPUs host report, {rp.get('fleet_gpus')} GPUs fleet) "
            f"| {rp.get('host_report_mb')} MB / {rp.get('fleet_html_mb')} MB | "
            f"{rp.get('host_report_render_s', 0):.3f} | — | — | laid out in "
            f"{rp.get('host_report_layout_s')} s; targets {rp.get('targets')} |"
        )
    growth = ", ".join(
        f"{float(k):.0%}: {v}"
        for k, v in sorted(sc.get("growth_per_host", {}).items(), key=lambda kv: float(kv[0]))
    )
    head = (
        f"Fleet week: {b.get('hosts')} hosts, {b.get('gpus')} GPUs, "
        f"{b['rows']['gpu_samples']:,} device samples, {sc['bucket_bytes'] / 2**20:.0f} MiB of Parquet; "
        f"memory limit {sc['memory_limit']} per process, batches of {sc['batch_hosts']} hosts; "
        f"median of {sc['runs']} runs, each in a fresh process. Pack time per host relative to the "
        f"smallest fraction (1.0 = linear): {growth}.\n\n"
    )
    return head + "\n".join(rows) + "\n\n" + targets(res) + "\n\n" + tier_table(res) + "\n"


def tier_table(res: dict[str, Any]) -> str:
    """The stored rollup tier: scan, cold, rollup, warm, full, fleet report; week and month."""
    t = res.get("tier")
    if not t:
        return ""
    rows = [
        "Rollup tier (`leakreport rollup`), the same hosts over a week and a month:",
        "",
        "| data | measurement | median s | × plain scan | peak RSS MB |",
        "|---|---|---:|---:|---:|",
    ]
    names = {
        "scan": "plain DuckDB scan-aggregate",
        "cold": "full pack, no tier (cold)",
        "rollup_finished": "`rollup` of the finished days",
        "warm": "full pack, tier for finished days, last day raw (warm)",
        "fleet_report": "fleet report of the warm run (page from its findings)",
        "fleet_command": "`leakreport fleet --week` (week + week before, tier read)",
        "rollup_last_day": "`rollup` of the last day",
        "full": "full pack over a full tier",
    }
    for span in ("week", "month"):
        v = t.get(span)
        if not v:
            continue
        scan = v["scan"]["seconds"]
        data = f"{v['hosts']} hosts, {v['days']} days"
        for k, name in names.items():
            m = v.get(k)
            if not m:
                continue
            rows.append(
                f"| {data} | {name} | {m['seconds']:.3f} | {m['seconds'] / scan:.1f} | {m['rss_mb']} |"
            )
    w = t["week"]
    rss = max(w[k]["rss_mb"] for k in names if k in w)
    lines = [
        "",
        "Targets (tier):",
        f"- warm pack <= 2x the scan: {w['warm_over_scan']}x, "
        + ("met." if w["warm_over_scan"] <= 2 else "not met."),
        f"- cold pack <= 15x the scan: {w['cold_over_scan']}x, "
        + ("met." if w["cold_over_scan"] <= 15 else "not met."),
        f"- fleet report <= 1x the scan: {w['fleet_report_over_scan']}x, "
        + ("met." if w["fleet_report_over_scan"] <= 1 else "not met."),
        f"- peak RSS <= 1 GB: {rss:.0f} MB, " + ("met." if rss <= 1024 else "not met."),
        f"- findings identical cold / warm / full: {w['same_findings']}"
        + (f" (month: {t['month']['same_findings']})" if "month" in t else ""),
    ]
    fp = w.get("first_pass")
    if fp:
        lines.append(
            f"- collector-written per-minute summaries (measured, not built): the first pass "
            f"(gpu_info + gpu_buckets) takes {fp['raw_over_scan']}x the scan from raw samples, "
            f"{fp['summary_over_scan']}x from summaries regrouped by minute, "
            f"{fp['summary_unique_over_scan']}x read as stored (the bound); "
            f"same rows: {fp['same_rows']}"
        )
    if "month_warm_over_week_warm" in t:
        g = t["month_warm_over_week_warm"]
        lines.append(
            f"- month warm within 1.5x of the week's: {g}x, " + ("met." if g <= 1.5 else "not met.")
        )
    return "\n".join(rows + lines + stage_table(t))


def stage_table(t: dict[str, Any], top: int = 12) -> list[str]:
    """The slowest stages of the week's cold and warm packs (median seconds, rows)."""
    w = t["week"]
    if "stages" not in w.get("cold", {}) or "stages" not in w.get("warm", {}):
        return []
    warm = {s["stage"]: s for s in w["warm"]["stages"]}
    out = [
        "",
        f"Where the week's pack spends its time (the {top} slowest stages cold; median s):",
        "",
        "| stage | cold s | warm s | rows | warm from |",
        "|---|---:|---:|---:|---|",
    ]
    for s in w["cold"]["stages"][:top]:
        ws = warm.get(s["stage"], {})
        src = "tier + last day raw" if ws.get("tier") else ""
        rows = "" if s.get("rows") is None else f"{s['rows']:,}"
        out.append(
            f"| {s['stage']} | {s['seconds']:.3f} | {ws.get('seconds', 0):.3f} | {rows} | {src} |"
        )
    return out


def targets(res: dict[str, Any]) -> str:
    sc = res["scale"]
    fr = sc["fractions"]
    full = fr[max(fr, key=float)]
    ratio = full["pack_over_scan"]
    minute = sc["minute_aggregate"]["seconds"] / full["scan"]["seconds"]
    rss = max(v["pack"]["rss_mb"] for v in fr.values())
    growth = list(sc.get("growth_per_host", {}).values())
    lin = max((abs(g - 1) for g in growth), default=0.0)
    lines = [
        "Targets:",
        f"- full pack within 2x the plain scan: {ratio}x, "
        + (
            "met."
            if ratio <= 2
            else f"not met, by {ratio / 2:.0f}x. Keeping per-minute resolution "
            f"costs {minute:.1f}x the scan in that first aggregate alone "
            f"({sc['minute_aggregate']['gpus']:,} groups against {full['scan']['gpus']:,}); "
            "the rest is idle windows, metric normalisation, per-process bins and chart "
            "series. Rollups written at collection time would remove the first part."
        ),
        f"- peak RSS under 2 GB: {rss:.0f} MB, " + ("met." if rss < 2048 else "not met."),
        f"- cost linear in data (time per host within 15 % across fractions): largest deviation "
        f"{lin:.0%}, " + ("met." if lin <= 0.15 else "not met."),
    ]
    return "\n".join(lines)


def main(out_dir: str, tiny: bool) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if tiny:
        scale = [
            "--hosts",
            "4",
            "--days",
            "1",
            "--runs",
            "1",
            "--s3-hosts",
            "1",
            "--fractions",
            "0.5,1",
        ]
        _run("collector_bench.py", str(out / "collector.json"), "1")
        _run("logparse_bench.py", str(out / "logparse.json"), "2")
    else:
        scale = []
        _run("collector_bench.py", str(out / "collector.json"), "5")
        _run("logparse_bench.py", str(out / "logparse.json"), "1024")
    _run("scale_bench.py", str(out / "scale.json"), *scale)
    _run("prom_bench.py", str(out / "prom.json"), *(["4", "2"] if tiny else ["16", "24"]))
    week = ["--gpus", "16", "--hours", "6"] if tiny else ["--gpus", "64", "--hours", "24"]
    _run("prom_week.py", str(out / "prom_week.json"), *week)
    _run(
        "fleet_bench.py",
        str(out / "reports.json"),
        *(["8", "1", "50"] if tiny else ["100", "2", "1000"]),
    )
    _run("stage_bench.py", str(out / "stage.json"), *(["24"] if tiny else ["200"]))
    tier_args = ["--tier-hosts", "2", "--days", "2", "--month-days", "3", "--runs", "1"]
    _run("scale_bench.py", str(out / "tier.json"), "--tier-only", *(tier_args if tiny else []))
    res: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "tiny": tiny,
    }
    for name in ("collector", "logparse", "scale", "tier", "prom", "prom_week", "reports", "stage"):
        res[name] = json.loads((out / f"{name}.json").read_text())
    (out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / "results.md").write_text(table(res))
    print(table(res))


if __name__ == "__main__":
    a = sys.argv[1:]
    if "--table" in a:  # re-render results.md from a results.json
        out = Path(a[0])
        (out / "results.md").write_text(table(json.loads((out / "results.json").read_text())))
        sys.exit(0)
    main(a[0] if a and not a[0].startswith("-") else "bench", "--tiny" in a)
