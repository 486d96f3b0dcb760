"""One chart per GPU (or per tensor-parallel server): what it shows, decided once.

The static SVG (read with JavaScript off) and the interactive uPlot chart are both drawn
from a ChartSpec, so they show the same band, trend, projection and markers. Values are
MiB, times epoch seconds.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from dataclasses import dataclass, field

from analyzer.findings import (
    EVENT_SIGNATURES,
    MAX_EVENTS_PER_KIND,
    AllocSeries,
    Event,
    GpuSeries,
    KvSeries,
)

MIB = 2**20
RANK_COLORS = (
    "#1570ef",
    "#dc6803",
    "#039855",
    "#6941c6",
    "#c11574",
    "#0e9384",
    "#475467",
    "#b42318",
)
EVENT_STYLE = {
    "oom": ("OOM", "#b42318"),
    "restart": ("restart", "#667085"),
    "kv_leak_check": ("KV leak check", "#6941c6"),
    "image_processor": ("fast image processor", "#dc6803"),
    "server_args": ("server start", "#98a2b3"),
    "engine_version": ("engine version", "#98a2b3"),
    "memory_snapshot": ("memory snapshot", "#0e9384"),
}
MERGE_ABOVE = 5  # more events of one kind than this: ticks and one label with the count
LANES = 3
CHAR_PX = 6.4  # label width estimate at 11 px (the SVG and canvas fonts)


@dataclass
class Series:
    name: str
    color: str
    t: list[float]
    v: list[float | None]
    scale: str = "mib"  # mib | kv (percent, right axis)
    width: float = 1.5
    dash: bool = False


@dataclass
class Marker:
    t: float
    label: str
    color: str
    lane: int | None  # None: no room for the label (the title still says it)
    title: str
    ticks: list[float] = field(default_factory=list)  # merged repeats: one tick each


@dataclass
class ChartSpec:
    id: str
    title: str
    x0: float
    x1: float
    y0: float  # MiB, the band the data lives in
    y1: float
    total: float | None
    total_in_view: bool
    series: list[Series]
    band: tuple[int, int] | None = None  # indexes of the (upper, lower) series filled between
    idle: list[tuple[float, float]] = field(default_factory=list)
    trend: list[tuple[float, float, float, float]] = field(default_factory=list)
    projection: tuple[float, float, float, float] | None = None
    projection_note: str = ""
    thresholds: list[tuple[float, str]] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    kv: bool = False

    def to_json(self) -> str:
        """Compact data for the page's script: times relative to x0, whole MiB."""

        def rel(ts: list[float]) -> list[int]:
            return [round(t - self.x0) for t in ts]

        def val(vs: list[float | None]) -> list[float | None]:
            return [None if v is None else round(v, 1) for v in vs]

        d = {
            "x0": round(self.x0),
            "x": [0, round(self.x1 - self.x0)],
            "y": [round(self.y0), round(self.y1)],
            "total": self.total,
            "tin": self.total_in_view,
            "s": [
                {
                    "n": s.name,
                    "c": s.color,
                    "t": rel(s.t),
                    "v": val(s.v),
                    "k": s.scale,
                    "w": s.width,
                    "d": s.dash,
                }
                for s in self.series
            ],  # fmt: skip
            "band": list(self.band) if self.band else None,
            "idle": [[round(a - self.x0), round(b - self.x0)] for a, b in self.idle],
            "trend": [
                [round(a - self.x0), round(va), round(b - self.x0), round(vb)]
                for a, va, b, vb in self.trend
            ],  # fmt: skip
            "proj": None
            if self.projection is None
            else [
                round(self.projection[0] - self.x0),
                round(self.projection[1]),
                round(self.projection[2] - self.x0),
                round(self.projection[3]),
            ],  # fmt: skip
            "thr": [[round(v), label] for v, label in self.thresholds],
            "mk": [
                [round(m.t - self.x0), m.label, m.color, m.lane, rel(m.ticks)] for m in self.markers
            ],
        }
        # no "<" at all inside the inline <script> block (so never "</script" or "<!--")
        return json.dumps(d, separators=(",", ":")).replace("<", "\\u003c")


def _iso_epoch(ts: str) -> float:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%m-%d %H:%M UTC")


def y_band(values: list[float], total: float | None) -> tuple[float, float, bool]:
    """The y-range the data lives in: from a low percentile (a restart's dip to zero does
    not squash a leak) to the peak, padded; the total only where it is close above."""
    vs = sorted(values)
    if not vs:
        return 0.0, float(total or 1), True
    lo, hi = vs[len(vs) // 50], vs[-1]
    span = max(hi - lo, hi * 0.03, 1024.0)  # flat data: noise is not drawn as a trend
    mid = (hi + lo) / 2
    lo, hi = min(lo, mid - span / 2), max(hi, mid + span / 2)
    y0, y1 = max(0.0, lo - 0.08 * span), hi + 0.08 * span
    near = total is not None and total - hi <= 0.6 * span
    if near and total is not None:
        y1 = max(y1, total + 0.04 * span)
    return y0, y1, near


def _signature(e: Event) -> str:
    return re.sub(r"\d+", "#", re.sub(r"^\[[^\]]*\]\s*", "", e.text))[:200]


def markers(events: list[Event], x0: float, x1: float, plot_w: float) -> list[Marker]:
    """Events as markers: same-time events share one; a kind repeated more than
    MERGE_ABOVE times becomes ticks under one label with its count; labels get the first
    of LANES rows where they do not overlap (or none, with the text kept in the title)."""
    by_kind: dict[str, list[Event]] = {}
    totals = Counter(e.kind for e in events)  # in the document, on the plot or not
    for e in sorted(events, key=lambda e: e.ts):
        if e.kind in EVENT_STYLE and x0 <= _iso_epoch(e.ts) <= x1:
            by_kind.setdefault(e.kind, []).append(e)
    out: list[Marker] = []
    at: dict[float, Marker] = {}
    for kind, evs in by_kind.items():
        label, color = EVENT_STYLE[kind]
        if len(evs) > MERGE_ABOVE:
            ts = [_iso_epoch(e.ts) for e in evs]
            same = len({_signature(e) for e in evs}) == 1
            # as many of a server-log kind as the analysis keeps: there may be more
            capped = kind in EVENT_SIGNATURES and totals[kind] >= MAX_EVENTS_PER_KIND
            text = f"{label} ×{len(evs)}"
            kept = (
                f"; the analysis keeps the last {MAX_EVENTS_PER_KIND} of each kind"
                if capped
                else ""
            )
            title = f"{text} ({'identical lines' if same else 'similar lines'}{kept}), {_clock(ts[0])} → {_clock(ts[-1])}: {evs[-1].text[:300]}"
            out.append(Marker(ts[0], text, color, None, title, ts))
            continue
        for e in evs:
            t = _iso_epoch(e.ts)
            if t in at:  # one marker, one label for events at the same moment
                m = at[t]
                if label not in m.label.split(" + "):
                    m.label += f" + {label}"
                m.title += f"\n{e.ts} {label}: {e.text[:300]}"
                if kind == "oom":
                    m.color = color
                continue
            m = Marker(t, label, color, None, f"{e.ts} {label}: {e.text[:300]}")
            at[t] = m
            out.append(m)
    out.sort(key=lambda m: (m.t, m.label))
    # lanes: greedy, left to right, in plot pixels
    ends = [-1e9] * LANES
    for m in out:
        px = (m.t - x0) / max(x1 - x0, 1.0) * plot_w
        wpx = len(m.label) * CHAR_PX + 8
        px = min(px, plot_w - wpx)  # a label near the right edge is drawn leftwards
        for lane in range(LANES):
            if px >= ends[lane]:
                m.lane, ends[lane] = lane, px + wpx
                break
    return out


def _trend_end(s: GpuSeries) -> tuple[float, float] | None:
    if not s.trend:
        return None
    t0, v0, t1, v1 = s.trend[-1]
    return t1, v1 / MIB


def build_spec(
    cid: str,
    title: str,
    gpus: list[GpuSeries],
    events: list[Event],
    *,
    kv: KvSeries | None = None,
    alloc: list[AllocSeries] | None = None,
    rate_mib_per_h: float | None = None,
    oom_at: float | None = None,
    lead: int | None = None,
    plot_w: float = 780,
) -> ChartSpec:
    """One chart for one GPU, or for the ranks of one server overlaid."""
    gpus = [g for g in gpus if g.t]
    alloc = [a for a in alloc or [] if a.t]
    ts = [t for g in gpus for t in (g.t[0], g.t[-1])] + [
        t for a in alloc for t in (a.t[0], a.t[-1])
    ]
    x0, x1 = (min(ts), max(ts)) if ts else (0.0, 60.0)
    x1 = max(x1, x0 + 60)
    data_end = x1
    total_b = max((g.total_bytes or 0 for g in gpus), default=0)
    total = total_b / MIB if total_b else None
    series: list[Series] = []
    band = None
    single = len(gpus) == 1
    for i, g in enumerate(gpus):
        color = RANK_COLORS[0] if single else RANK_COLORS[i % len(RANK_COLORS)]
        name = f"GPU {g.gpu} used" + (" (peak)" if single else "")
        series.append(Series(name, color, g.t, [v / MIB for v in g.used_max]))
        if single:
            series.append(
                Series(
                    f"GPU {g.gpu} used (low)", color, g.t, [v / MIB for v in g.used_min], width=0.5
                )
            )
            band = (0, 1)
    per_pid = Counter(a.pid for a in alloc)
    for a in alloc:
        who = f"pid {a.pid}"
        if per_pid[a.pid] > 1:  # a PID handed out again: which process is which
            when = dt.datetime.fromtimestamp(a.t[0], dt.UTC)
            who += f" from {when:%m-%d %H:%M}"
        for name, vs, color in (
            ("allocated", a.allocated, "#039855"),
            ("reserved", a.reserved, "#c11574"),
            ("NVML", a.nvml, "#0e9384"),
        ):
            series.append(Series(f"{who} {name}", color, a.t,
                                 [None if v is None else v / MIB for v in vs], width=1.2, dash=name == "NVML"))  # fmt: skip
    values = [v for s in series for v in s.v if v is not None]
    trend = [(a, va / MIB, b, vb / MIB) for g in gpus for a, va, b, vb in g.trend]
    y0, y1, near = y_band(values + [v for tr in trend for v in (tr[1], tr[3])], total)
    projection, note = None, ""
    lead_s = next((g for g in gpus if g.gpu == lead), gpus[0] if single else None)
    end = _trend_end(lead_s) if lead_s is not None else None
    if total and rate_mib_per_h and rate_mib_per_h > 0 and end is not None:
        t_end, v_end = end
        t_oom = (
            oom_at
            if oom_at is not None
            else t_end + max(total - v_end, 0.0) / rate_mib_per_h * 3600
        )
        # drawn to where it meets the limit; where the limit is above the view, to where it
        # leaves the view; the x-axis grows by at most the data's own span
        top = total if near else y1
        t_top = t_end + max(top - v_end, 0.0) / rate_mib_per_h * 3600
        shown = min(t_oom, t_top, data_end + (data_end - x0))
        x1 = max(x1, shown)
        projection = (t_end, v_end, shown, v_end + rate_mib_per_h * (shown - t_end) / 3600)
        note = (
            f"at {rate_mib_per_h:,.0f} MiB/h the trend reaches the {total / 1024:,.1f} GiB limit "
            f"at {_clock(t_oom)}" + ("" if shown >= t_oom else " (beyond the right edge)")
        )
    thresholds = []
    if total:
        for pct in (75, 90):
            v = total * pct / 100
            if y0 <= v <= y1:
                thresholds.append((v, f"{pct} %"))
        if near:
            thresholds.append((total, "limit"))
    if kv is not None and kv.t:
        series.append(
            Series(
                "KV-cache usage %", "#344054", kv.t, [v * 100 for v in kv.kv], scale="kv", width=1.0
            )
        )
    evs = [e for e in events if e.gpu is None or any(e.gpu == g.gpu for g in gpus)]
    idle = [(max(s, x0), min(e, x1)) for g in gpus[:1] for s, e, _b in g.idle_windows if e > s]
    return ChartSpec(
        cid, title, x0, x1, y0, y1, total, near, series, band, idle, trend, projection, note,
        thresholds, markers(evs, x0, x1, plot_w), kv=kv is not None and bool(kv.t),
    )  # fmt: skip
