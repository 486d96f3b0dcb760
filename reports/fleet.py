"""Render the weekly fleet report (Jinja2, autoescape on, self-contained)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from analyzer.fleet import Cohort, FleetView
from reports.render import TEMPLATES, _env

BAR_W = 220


@dataclass
class CohortRow:
    c: Cohort
    share_w: str  # bar width for the share of hosts affected
    rate_lo: str  # leak-rate distribution: min..max bar and the median tick, on one scale
    rate_w: str
    rate_med: str


def rows(view: FleetView) -> list[CohortRow]:
    top = max((c.max_rate or 0.0 for c in view.cohorts), default=0.0) or 1.0
    out = []
    for c in view.cohorts:
        lo = (c.rates[0] if c.rates else 0.0) / top * BAR_W
        hi = (c.rates[-1] if c.rates else 0.0) / top * BAR_W
        med = (c.median_rate or 0.0) / top * BAR_W
        out.append(
            CohortRow(
                c,
                f"{c.share_affected * BAR_W:.1f}",
                f"{lo:.1f}",
                f"{max(hi - lo, 2.0 if c.rates else 0):.1f}",
                f"{med:.1f}",
            )
        )
    return out


def render_fleet(view: FleetView, *, generated_at: str = "", top: int = 50) -> str:
    css = (TEMPLATES / "report.css").read_text(encoding="utf-8")
    return (
        _env()
        .get_template("fleet.html.j2")
        .render(
            v=view,
            rows=rows(view),
            ranking=view.ranking[:top],
            more=max(len(view.ranking) - top, 0),
            soonest=sorted(
                (r for r in view.ranking if r.hours_to_oom is not None),
                key=lambda r: r.hours_to_oom or 0.0,
            )[:top],
            css=css,
            bar_w=BAR_W,
            generated_at=generated_at,
        )
    )


def write_fleet(view: FleetView, path: str | os.PathLike[str], *, generated_at: str = "") -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(render_fleet(view, generated_at=generated_at), encoding="utf-8")
    os.replace(tmp, out)
    return out
