"""Derive compact rollups from the trace views, once, before any rule runs.

The SQL lives in ``rollups/NN_name.sql`` and runs in file order. Rules query
these tables (:data:`ROLLUP_TABLES`, and ``log_events``) as well as the raw
views: each is derived once per analysis, not once per rule.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import duckdb

from analyzer.packs import referenced_params

ROLLUP_DIR = Path(__file__).parent / "rollups"
_CREATES = re.compile(r"CREATE OR REPLACE (?:TEMP )?(?:TABLE|VIEW|MACRO) (\w+)")

# Tunable with --param rollup.KEY=VALUE.
DEFAULTS: dict[str, Any] = {
    "bucket_s": 15,  # bucket width for device samples ...
    "long_bucket_s": 60,  # ... and for traces that span more than long_span_h
    "long_span_h": 24,
    "idle_util_pct": 5.0,  # GPU utilisation at or below this counts as idle
    "min_idle_s": 30,  # an idle window lasts at least this long
    "activity_stale_s": 120,  # a running-requests reading older than this is unknown
    "log_activity_stale_s": 30,  # ... this, when it came from batch-stats log lines alone
    "step_noise_mib": 8,  # baseline steps below this are noise
    "chart_block": 5,  # buckets per block of the chart series' store (gpu_blocks)
    "proc_bin_s": 300,  # per-process figures (NVML, /proc) are averaged per bin of this width
    "alloc_bin_s": 300,  # allocator-probe floors are taken per bin of this width
    # lifetimes without a process table (02b_lifetimes.sql)
    "lifetime_merge_s": 600,  # start-up lines and memory resets this close are one restart
    "reset_min_drop_mib": 1024,  # a memory reset drops at least this much in one bucket ...
    "reset_drop_fraction": 0.1,  # ... and at least this share of the card
    "loaded_fraction": 0.5,  # idle windows below this share of the lifetime's peak: still loading
}


WIDTHS = ("bucket_s", "long_bucket_s", "proc_bin_s", "alloc_bin_s", "chart_block")


def out_of_range(key: str, value: float) -> str | None:
    """Why a value cannot be the rollup parameter ``key``: None where it can be. A width
    of zero failed in DuckDB's words, negative ones ran and gave nonsense; a threshold
    of zero is a choice."""
    if key in WIDTHS:
        return None if value > 0 else "above 0 (a width)"
    if key == "idle_util_pct":
        return None if 0 <= value <= 100 else "a percentage, 0 to 100"
    if key.endswith("_fraction"):
        return None if 0 <= value <= 1 else "a share, 0 to 1"
    return None if value >= 0 else "0 or more"


ROLLUP_TABLES = (
    "gpu_info",
    "rollup_settings",
    "gpu_span",
    "gpu_buckets",
    "gpu_blocks",
    "metric_norm",
    "request_days",
    "requests",
    "kv_usage",
    "activity",
    "proc_bins",
    "log_starts",
    "gpu_lifetimes",
    "idle_segments",
    "idle_windows",
    "idle_trend",
    "server_parts",
    "server_info",
    "alloc_devices",
    "alloc_bins",
    "alloc_trend",
    "source_runs",
)


def _statements(sql: str) -> list[str]:
    return [s.strip() for s in sql.split(";\n") if s.strip().strip(";").strip()]


# bucket widths for samples sparser than the default buckets (seconds); past the last,
# idle windows of minutes cannot be told: such a host is named (analyzer.runner)
SPARSE_WIDTHS = (20, 30, 60, 120, 300)
# samples a width holds: up to 2 % further apart (nvidia-smi -l 60 drifts to 60.05 s; a
# bucket goes empty once a day or so, and the stored tier's 60 s buckets still serve)
JITTER = 1.02


def width_for_span(span_s: float, params: dict[str, Any], interval_s: float | None = None) -> float:
    """Fine buckets for hours of data, per-minute ones for days (bounded rollup size); and
    never narrower than the samples are apart (``interval_s``: a bucket that holds no
    sample ends every idle run, so samples 30 s apart in 15 s buckets made no idle window
    at all, and a leak read "clean"). The estimate counts collector gaps in, so it errs
    wide."""
    if span_s > float(params["long_span_h"]) * 3600:
        width = float(params["long_bucket_s"])
    else:
        width = float(params["bucket_s"])
    if interval_s is not None and interval_s > width * JITTER:
        fits = (w for w in SPARSE_WIDTHS if w * JITTER >= interval_s)
        width = float(next(fits, SPARSE_WIDTHS[-1]))
    return width


def bucket_width(
    con: duckdb.DuckDBPyConnection, params: dict[str, Any], interval_s: float | None = None
) -> float:
    """:func:`width_for_span` of the device samples' span (from ``gpu_info``)."""
    row = con.execute("SELECT epoch(max(last_ts)) - epoch(min(first_ts)) FROM gpu_info").fetchone()
    return width_for_span(float(row[0] or 0.0) if row else 0.0, params, interval_s)


def with_width(
    overrides: dict[str, dict[str, Any]], span_s: float | None, interval_s: float | None = None
) -> dict[str, dict[str, Any]]:
    """``overrides`` with the bucket width fixed for a trace spanning ``span_s`` seconds,
    sampled every ``interval_s`` (unless set already): every host batch of one analysis
    then buckets alike."""
    mine = dict(overrides.get("rollup", {}))
    if span_s is None or "bucket_s" in mine:
        return overrides
    mine["bucket_s"] = width_for_span(span_s, {**DEFAULTS, **mine}, interval_s)
    return {**overrides, "rollup": mine}


def rollup_files() -> list[Path]:
    """The rollup SQL files, in order; an install that lost them is an error naming the folder."""
    files = sorted(ROLLUP_DIR.glob("*.sql"))
    if not files:
        raise RuntimeError(
            f"{ROLLUP_DIR}: no rollup SQL files (*.sql) - this installation is incomplete; "
            "reinstall leakreport"
        )
    return files


def build(
    con: duckdb.DuckDBPyConnection,
    overrides: dict[str, Any] | None = None,
    tier: Any = None,
    timings: list[dict[str, Any]] | None = None,
    interval_s: float | None = None,
) -> None:
    """Run the rollup SQL in file order. With ``tier`` (an analyzer.tierread.TierUse: views
    over the stored rollup tier exist), the first-stage tables it stores are read from
    it for the host-days it covers and derived from raw samples for the rest.
    ``timings`` gets one entry per statement (file, table, seconds, tier or raw);
    ``interval_s``: how far apart device samples are, where the width is not given."""
    unknown = set(overrides or {}) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown rollup parameter(s): {', '.join(sorted(unknown))}")
    params = {**DEFAULTS, **(overrides or {})}
    with_tier: Any = None
    if tier is not None:
        from analyzer import tierread as with_tier
    # the host-days whose idle segments the stored tier holds (analyzer.tierread): none here
    con.execute("CREATE TABLE IF NOT EXISTS idle_cover (host VARCHAR, dn BIGINT)")
    checked = False
    for f in rollup_files():
        if f.name.startswith("01_") and "bucket_s" not in (overrides or {}):
            params["bucket_s"] = bucket_width(con, params, interval_s)
        for stmt in _statements(f.read_text(encoding="utf-8")):
            refs = referenced_params(stmt)
            if with_tier is not None and "idle_cover" in stmt and not checked:
                with_tier.check_joint(con, params, tier)
                checked = True
            t0 = time.perf_counter()
            try:
                read_tier = with_tier is not None and with_tier.rollup_with_tier(
                    con, stmt, params, tier
                )
                if not read_tier:
                    con.execute(stmt, {k: params[k] for k in refs} if refs else None)
            except duckdb.Error as e:
                raise RuntimeError(f"{f.name}: {e}") from e
            if timings is not None:
                took = round(time.perf_counter() - t0, 4)
                m = _CREATES.search(stmt)
                rows = None
                if m and " TABLE " in m.group(0):
                    row = con.execute(f"SELECT count(*) FROM {m.group(1)}").fetchone()
                    rows = int(row[0]) if row else None
                timings.append(
                    {
                        "stage": f"{f.name}:{m.group(1) if m else '?'}",
                        "seconds": took,
                        "rows": rows,
                        "tier": bool(read_tier),
                    }
                )
