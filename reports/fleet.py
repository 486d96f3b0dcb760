"""Render the weekly fleet report (Jinja2, autoescape on, self-contained)."""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.fleet import Cohort, FleetView, GpuRank
from analyzer.progress import plural
from reports import TOP
from reports.render import _env, assets

BAR_W = 140


@dataclass
class CohortRow:
    c: Cohort
    share_w: str  # bar width for the share of hosts affected
    rate_lo: str  # leak-rate distribution: min..max bar and the median tick, on one scale
    rate_w: str
    rate_med: str
    label: str  # what the bar shows, in words: median, min-max, how many GPUs


def rows(view: FleetView) -> list[CohortRow]:
    top = max((c.max_rate or 0.0 for c in view.cohorts), default=0.0) or 1.0
    out = []
    for c in view.cohorts:
        lo = (c.rates[0] if c.rates else 0.0) / top * BAR_W
        hi = (c.rates[-1] if c.rates else 0.0) / top * BAR_W
        med = (c.median_rate or 0.0) / top * BAR_W
        n = len(c.rates)
        if n == 1:
            label = f"{c.rates[0]:,.1f} (1 GPU)"
        elif n:
            label = f"median {c.median_rate:,.1f}, min–max {c.rates[0]:,.1f}–{c.rates[-1]:,.1f} ({n} GPUs)"
        else:
            label = ""
        out.append(
            CohortRow(
                c,
                f"{c.share_affected * BAR_W:.1f}",
                f"{lo:.1f}",
                f"{max(hi - lo, 2.0 if c.rates else 0):.1f}",
                f"{min(med, BAR_W - 2):.1f}",
                label,
            )
        )
    return out


def _hours(r: GpuRank) -> str:
    h = r.hours_to_oom
    if h is None:
        return "—"
    text = f"{h * 60:.0f} min" if h < 1 else f"{h:,.1f} h"
    return f"≈ {text}" if r.oom_estimated else text


def _clock(iso: str | None) -> str:
    return (iso or "—").replace("T", " ").replace("Z", " UTC")


def _rate(r: float | None) -> str:
    return "—" if r is None else f"{r:,.0f} MiB/h"


def render_fleet(view: FleetView, *, generated_at: str = "", top: int = TOP) -> str:
    """The weekly page: soonest OOMs first, then cohorts, the ranking, week over week.
    Rates and times to OOM are analyzer.verdicts.gpu_verdicts', as on the host report."""
    soonest = view.soonest
    silent = view.silent_hosts
    return (
        _env()
        .get_template("fleet.html.j2")
        .render(
            v=view,
            size=(
                f"{plural(view.hosts, 'host')}, {plural(view.gpus, 'GPU')}, "
                f"{plural(view.affected_hosts, 'host')} leaking, "
                f"{plural(sum(c.status == 'new' for c in view.changes), 'finding')} new this week"
                + (f", {plural(len(silent), 'leaking host')} of last week silent" if silent else "")
            ),
            rows=rows(view),
            ranking=view.ranking[:top],
            more=max(len(view.ranking) - top, 0),
            soonest=soonest[:top],
            more_soonest=max(len(soonest) - top, 0),
            changes=view.changes[: top * 4],
            more_changes=max(len(view.changes) - top * 4, 0),
            css=assets()["css"],
            bar_w=BAR_W,
            generated_at=generated_at,
            hours=_hours,
            clock=_clock,
            rate=_rate,
            top=top,
        )
    )
