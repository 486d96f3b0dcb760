"""Chart geometry for inline SVG: everything computed here, templates only print.

One chart per GPU: device memory over time (peak line over a min-max band),
idle windows shaded, fitted idle-baseline trend, 75 % / 90 % thresholds, and
log events (OOM, restart, leak check, known-bug signals) as markers.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from analyzer.findings import AllocSeries, Event, GpuSeries, KvSeries

GIB = 2**30
W, H = 860, 250
ML, MR, MT, MB = 58, 16, 14, 34  # margins
PW, PH = W - ML - MR, H - MT - MB

_TIME_STEPS = [60 * m for m in (5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080)]
EVENT_STYLE = {
    "oom": ("OOM", "ev-oom"),
    "restart": ("restart", "ev-restart"),
    "kv_leak_check": ("KV leak check", "ev-kv"),
    "image_processor": ("fast image processor", "ev-bug"),
    "server_args": ("server start (ServerArgs)", "ev-start"),
    "engine_version": ("engine version", "ev-start"),
}


@dataclass
class Tick:
    pos: str
    label: str


@dataclass
class Rect:
    x: str
    w: str


@dataclass
class Line:
    x1: str
    y1: str
    x2: str
    y2: str
    css: str
    title: str = ""


@dataclass
class LegendItem:
    label: str
    css: str


@dataclass
class Polyline:
    points: str
    css: str


@dataclass
class Chart:
    title: str
    width: int = W
    height: int = H
    plot_x: int = ML
    plot_y: int = MT
    plot_w: int = PW
    plot_h: int = PH
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    y_label: str = "GiB used"
    line: str = ""  # polyline points
    band: str = ""  # polygon points
    idle: list[Rect] = field(default_factory=list)
    trend: list[Line] = field(default_factory=list)
    thresholds: list[Line] = field(default_factory=list)
    threshold_labels: list[Tick] = field(default_factory=list)
    markers: list[Line] = field(default_factory=list)
    legend: list[LegendItem] = field(default_factory=list)
    empty: bool = False
    lines: list[Polyline] = field(default_factory=list)  # more series (allocator chart)
    kv_y: int = 0  # second panel: the host's KV-cache usage, on the same time axis
    kv_h: int = 0
    kv_line: str = ""
    kv_ticks: list[Tick] = field(default_factory=list)


def _f(v: float) -> str:
    return f"{v:.1f}"


def _iso_epoch(ts: str) -> float:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _nice(step: float) -> float:
    for e in range(-3, 6):
        for m in (1, 2, 2.5, 5):
            if m * 10**e >= step:
                return float(m * 10**e)
    return step


def _axes(
    c: Chart,
    t0: float,
    t1: float,
    ymax: float,
    x: Callable[[float], float],
    y: Callable[[float], float],
    ymin: float = 0.0,
) -> None:
    step = next((st for st in _TIME_STEPS if (t1 - t0) / st <= 8), _TIME_STEPS[-1])
    first = (int(t0) // step + 1) * step
    for k, tt in enumerate(range(first, int(t1) + 1, step)):
        d = dt.datetime.fromtimestamp(tt, dt.UTC)
        label = (
            d.strftime("%m-%d %H:%M")
            if k == 0 or (d.hour == 0 and d.minute == 0)
            else d.strftime("%H:%M")
        )
        c.x_ticks.append(Tick(_f(x(tt)), label))
    ystep = _nice((ymax - ymin) / GIB / 5)
    v = ymin / GIB
    while v * GIB <= ymax:
        c.y_ticks.append(Tick(_f(y(v * GIB)), f"{v:g}"))
        v += ystep


def build_chart(
    s: GpuSeries, events: list[Event], *, small: bool = False, kv: KvSeries | None = None
) -> Chart:
    name = f" ({s.gpu_name})" if s.gpu_name else ""
    c = Chart(title=f"{s.host} — GPU {s.gpu}{name}")
    if small:
        c.height, c.plot_h = 170, 170 - MT - MB
    if not s.t:
        c.empty = True
        return c
    t0, t1 = s.t[0], max(s.t[-1], s.t[0] + 60)
    total = s.total_bytes or max(s.used_max) or 1
    ymax = total * 1.02

    def x(t: float) -> float:
        return c.plot_x + (t - t0) / (t1 - t0) * c.plot_w

    def y(v: float) -> float:
        return c.plot_y + c.plot_h - max(min(v, ymax), 0) / ymax * c.plot_h

    c.line = " ".join(f"{_f(x(t))},{_f(y(v))}" for t, v in zip(s.t, s.used_max, strict=True))
    upper = [f"{_f(x(t))},{_f(y(v))}" for t, v in zip(s.t, s.used_max, strict=True)]
    lower = [
        f"{_f(x(t))},{_f(y(v))}" for t, v in zip(reversed(s.t), reversed(s.used_min), strict=True)
    ]
    c.band = " ".join(upper + lower)
    _axes(c, t0, t1, ymax, x, y)
    for start, end, _base in s.idle_windows:
        xs, xe = x(max(start, t0)), x(min(end, t1))
        if xe > xs:
            c.idle.append(Rect(_f(xs), _f(xe - xs)))
    for a, va, b, vb in s.trend:
        c.trend.append(Line(_f(x(a)), _f(y(va)), _f(x(b)), _f(y(vb)), "trend"))
    if s.total_bytes:
        for pct, css in ((75, "thr-warn"), (90, "thr-crit")):
            yy = _f(y(s.total_bytes * pct / 100))
            c.thresholds.append(
                Line(_f(c.plot_x), yy, _f(c.plot_x + c.plot_w), yy, css, f"{pct} %")
            )
            c.threshold_labels.append(Tick(yy, f"{pct} %"))
    kinds: set[str] = set()
    for e in events:
        if e.host != s.host or e.kind not in EVENT_STYLE or (e.gpu is not None and e.gpu != s.gpu):
            continue
        et = _iso_epoch(e.ts)
        if not t0 <= et <= t1:
            continue
        label, css = EVENT_STYLE[e.kind]
        xx = _f(x(et))
        c.markers.append(
            Line(
                xx,
                _f(c.plot_y),
                xx,
                _f(c.plot_y + c.plot_h),
                css,
                f"{e.ts} {label}: {e.text[:300]}",
            )
        )
        kinds.add(e.kind)
    if kv is not None and kv.t and not small:
        c.kv_y, c.kv_h = c.height + 6, 64
        c.height += c.kv_h + 14

        def ky(v: float) -> float:
            return c.kv_y + c.kv_h - max(min(v, 1.0), 0.0) * c.kv_h

        c.kv_line = " ".join(
            f"{_f(x(t))},{_f(ky(v))}" for t, v in zip(kv.t, kv.kv, strict=True) if t0 <= t <= t1
        )
        c.kv_ticks = [Tick(_f(ky(v)), f"{v * 100:.0f} %") for v in (0.0, 0.5, 1.0)]
    c.legend = [LegendItem("used (peak, min-max band)", "lg-used")]
    if c.kv_line:
        c.legend.append(LegendItem("KV-cache usage (lower panel)", "lg-kv"))
    if c.idle:
        c.legend.append(LegendItem("idle windows", "lg-idle"))
    if c.trend:
        c.legend.append(LegendItem("idle-baseline trend", "lg-trend"))
    if c.thresholds:
        c.legend.append(LegendItem("75 % / 90 % alert levels", "lg-thr"))
    for kind in sorted(kinds):
        label, css = EVENT_STYLE[kind]
        c.legend.append(LegendItem(label, "lg-" + css))
    return c


ALLOC_LINES = (
    ("nvml", "NVML: the process's GPU memory", "al-nvml"),
    ("reserved", "PyTorch reserved (allocator cache included)", "al-reserved"),
    ("allocated", "PyTorch allocated (live tensors)", "al-allocated"),
)


def build_alloc_chart(a: AllocSeries) -> Chart:
    """Allocated, reserved and NVML memory of one process: floors per bin."""
    where = f"GPU {a.gpu}" if a.gpu is not None else f"device {a.device}"
    c = Chart(title=f"{a.host} — pid {a.pid} ({a.role or 'process'}), {where}: allocator view")
    if not a.t:
        c.empty = True
        return c
    t0, t1 = a.t[0], max(a.t[-1], a.t[0] + 60)
    values: dict[str, list[int | None]] = {
        "allocated": list(a.allocated),
        "reserved": list(a.reserved),
        "nvml": list(a.nvml),
    }
    # zoom on the band the lines live in (after start-up), on a whole-GiB-step floor:
    # at 0-based scale, allocated, reserved and NVML of a full GPU draw as one line
    settled = [v for vs in values.values() for v in vs[len(vs) // 10 :] if v is not None]
    top = max(settled, default=0) or GIB / 4
    low = min(settled, default=0)
    step = _nice(max(top - low, GIB / 4) * 1.2 / GIB / 5) * GIB
    ymin = max(0.0, (low - 0.1 * (top - low)) // step * step)
    ymax = max(top + 0.1 * (top - low), ymin + step)

    def x(t: float) -> float:
        return c.plot_x + (t - t0) / (t1 - t0) * c.plot_w

    def y(v: float) -> float:
        frac = (min(max(v, ymin), ymax) - ymin) / (ymax - ymin)
        return c.plot_y + c.plot_h - frac * c.plot_h

    _axes(c, t0, t1, ymax, x, y, ymin)
    for key, label, css in ALLOC_LINES:
        pts = " ".join(
            f"{_f(x(t))},{_f(y(v))}" for t, v in zip(a.t, values[key], strict=True) if v is not None
        )
        if pts:
            c.lines.append(Polyline(pts, css))
            c.legend.append(LegendItem(label, "lg-" + css))
    return c
