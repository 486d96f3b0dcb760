"""The static SVG of a ChartSpec: geometry computed here, the template only prints.

This is what a reader sees with JavaScript off (and what the interactive chart replaces):
the same y-band, idle windows, trend, OOM projection, markers and lanes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from reports.chartdata import LANES, ChartSpec

W = 860
ML, MR, MB = 58, 50, 30
LANE_H = 13
MT = LANES * LANE_H + 8
PH = 220
PW = W - ML - MR
MAX_SVG_POINTS = 240

_TIME_STEPS = [60 * m for m in (5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080)]


@dataclass
class Text:
    x: str
    y: str
    text: str
    css: str = "tick"
    anchor: str = "middle"
    title: str = ""


@dataclass
class Line:
    x1: str
    y1: str
    x2: str
    y2: str
    css: str
    color: str = ""
    title: str = ""


@dataclass
class Poly:
    points: str
    color: str
    width: float
    dash: bool = False


@dataclass
class Rect:
    x: str
    y: str
    w: str
    h: str
    css: str


@dataclass
class Chart:
    id: str
    title: str
    note: str
    data: str  # JSON for the interactive chart
    width: int = W
    height: int = MT + PH + MB
    plot_x: int = ML
    plot_y: int = MT
    plot_w: int = PW
    plot_h: int = PH
    rects: list[Rect] = field(default_factory=list)
    band: str = ""
    band_color: str = ""
    polys: list[Poly] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)  # (label, color)
    y_min_gib: float = 0.0  # the y-band, for tests and readers
    y_max_gib: float = 0.0


def _f(v: float) -> str:
    return f"{v:.1f}"


def _nice(step: float) -> float:
    for e in range(-3, 6):
        for m in (1, 2, 2.5, 5):
            if m * 10**e >= step:
                return float(m * 10**e)
    return step


def _thin(
    t: list[float], v: list[float | None], keep_max: bool
) -> tuple[list[float], list[float | None]]:
    """At most MAX_SVG_POINTS points, each the peak (or trough) of its chunk."""
    step = max(1, -(-len(t) // MAX_SVG_POINTS))
    if step == 1:
        return t, v
    ot: list[float] = []
    ov: list[float | None] = []
    for i in range(0, len(t), step):
        chunk = [x for x in v[i : i + step] if x is not None]
        ot.append(t[i])
        ov.append((max(chunk) if keep_max else min(chunk)) if chunk else None)
    return ot, ov


def _segments(t: list[float], v: list[float | None], x: Callable[[float], float],
              y: Callable[[float], float]) -> list[str]:  # fmt: skip
    out: list[str] = []
    cur: list[str] = []
    for tt, vv in zip(t, v, strict=True):
        if vv is None:
            if cur:
                out.append(" ".join(cur))
            cur = []
            continue
        cur.append(f"{_f(x(tt))},{_f(y(vv))}")
    if cur:
        out.append(" ".join(cur))
    return out


def _time_ticks(c: Chart, x0: float, x1: float, x: Callable[[float], float]) -> None:
    step = next((st for st in _TIME_STEPS if (x1 - x0) / st <= 8), _TIME_STEPS[-1])
    first = (int(x0) // step + 1) * step
    for k, tt in enumerate(range(first, int(x1) + 1, step)):
        d = dt.datetime.fromtimestamp(tt, dt.UTC)
        fmt = "%m-%d %H:%M" if k == 0 or (d.hour == 0 and d.minute == 0) else "%H:%M"
        xx = x(tt)
        base = c.plot_y + c.plot_h
        c.lines.append(Line(_f(xx), _f(base), _f(xx), _f(base + 4), "tickmark"))
        c.texts.append(Text(_f(xx), _f(base + 16), d.strftime(fmt)))


def render_spec(spec: ChartSpec) -> Chart:
    note = spec.projection_note
    if spec.total and not spec.total_in_view:  # named, not forced into view
        note = f"limit {spec.total / 1024:,.1f} GiB, above the view" + (f"; {note}" if note else "")
    c = Chart(spec.id, spec.title, note, spec.to_json())
    c.y_min_gib, c.y_max_gib = round(spec.y0 / 1024, 3), round(spec.y1 / 1024, 3)
    x0, x1, y0, y1 = spec.x0, spec.x1, spec.y0, spec.y1

    def x(t: float) -> float:
        return ML + (t - x0) / (x1 - x0) * PW

    def y(v: float) -> float:
        return MT + PH - (min(max(v, y0), y1) - y0) / (y1 - y0) * PH

    def ky(v: float) -> float:  # KV usage, percent, right axis
        return MT + PH - min(max(v, 0.0), 100.0) / 100 * PH

    c.rects.append(Rect(_f(ML), _f(MT), _f(PW), _f(PH), "plot"))
    for a, b in spec.idle:
        if x(b) > x(a):
            c.rects.append(Rect(_f(x(a)), _f(MT), _f(x(b) - x(a)), _f(PH), "idle"))
    gstep = _nice((y1 - y0) / 1024 / 5)
    g = (y0 / 1024 // gstep + 1) * gstep
    while g * 1024 <= y1:
        gy = _f(y(g * 1024))
        c.lines.append(Line(_f(ML), gy, _f(ML + PW), gy, "grid"))
        c.texts.append(Text(_f(ML - 6), gy, f"{g:g}", "tick", "end"))
        g += gstep
    _time_ticks(c, x0, x1, x)
    c.texts.append(Text("13", _f(MT + PH / 2), "GiB used", "axis ylabel"))
    last_label = 1e9
    for v, name in sorted(spec.thresholds, key=lambda th: -th[0]):
        yy = y(v)
        css = "thr-limit" if name == "limit" else ("thr-crit" if name == "90 %" else "thr-warn")
        c.lines.append(Line(_f(ML), _f(yy), _f(ML + PW), _f(yy), css))
        ly = yy + 11 if yy + 11 <= MT + PH - 2 else yy - 3  # inside the plot, by its line
        if abs(ly - last_label) >= 13:  # never on another label
            c.texts.append(Text(_f(ML + 4), _f(ly), name, "thr-label", "start"))
            last_label = ly
    if spec.band is not None:
        up, lo = spec.series[spec.band[0]], spec.series[spec.band[1]]
        ut, uv = _thin(up.t, up.v, True)
        lt, lv = _thin(lo.t, lo.v, False)
        upper = [f"{_f(x(t))},{_f(y(v))}" for t, v in zip(ut, uv, strict=True) if v is not None]
        lower = [f"{_f(x(t))},{_f(y(v))}" for t, v in zip(lt, lv, strict=True) if v is not None]
        c.band, c.band_color = " ".join(upper + lower[::-1]), up.color
    for i, s in enumerate(spec.series):
        if spec.band is not None and i == spec.band[1]:
            continue
        st, sv = _thin(s.t, s.v, True)
        for pts in _segments(st, sv, x, ky if s.scale == "kv" else y):
            c.polys.append(Poly(pts, s.color, s.width, s.dash))
        c.legend.append((s.name.replace(" (peak)", " (peak, low-high band)"), s.color))
    if spec.kv:
        for pct in (0, 50, 100):
            c.texts.append(Text(_f(ML + PW + 4), _f(ky(pct)), f"{pct}%", "tick kv", "start"))
    for a, va, b, vb in spec.trend:
        c.lines.append(Line(_f(x(a)), _f(y(va)), _f(x(b)), _f(y(vb)), "trend"))
    if spec.trend:
        c.legend.append(("idle-baseline trend", "#7a2e0e"))
    if spec.projection is not None:
        a, va, b, vb = spec.projection
        c.lines.append(
            Line(_f(x(a)), _f(y(va)), _f(x(b)), _f(y(vb)), "projection", title=spec.projection_note)
        )
        c.legend.append(("OOM projection", "#b42318"))
    if spec.idle:
        c.legend.append(("idle windows", "#b2ddff"))
    for m in spec.markers:
        xx = x(m.t)
        if m.ticks:
            for tk in m.ticks:
                tx = _f(x(tk))
                c.lines.append(Line(tx, _f(MT), tx, _f(MT + 8), "marker", m.color, m.title))
        else:
            c.lines.append(Line(_f(xx), _f(MT), _f(xx), _f(MT + PH), "marker", m.color, m.title))
        if m.lane is not None:
            wpx = len(m.label) * 6.4 + 8
            lx = min(xx, ML + PW - wpx)
            ly = MT - 4 - m.lane * LANE_H
            c.texts.append(Text(_f(lx + 2), _f(ly), m.label, "mlabel", "start", m.title))
    return c
