"""Render the self-contained HTML report (Jinja2, autoescape on).

One file: CSS, the vendored uPlot (reports/vendor, MIT, its licence kept in the page) and
the chart script inline, so it opens from disk or a mail attachment without network.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from analyzer.findings import FindingsDocument
from reports import model

TEMPLATES = Path(__file__).parent / "templates"
VENDOR = Path(__file__).parent / "vendor"

# C0 controls other than tab and newline (and DEL) never reach the page raw: a log line's
# ESC shows as \x1b, so a reader sees that it was there.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def visible_controls(text: str) -> str:
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _finalize(v: Any) -> Any:
    if isinstance(v, str) and not isinstance(v, Markup):
        return visible_controls(v)
    return v


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
        lstrip_blocks=False,
        keep_trailing_newline=True,
        finalize=_finalize,
    )


@cache
def assets() -> dict[str, Markup]:
    """Inline CSS and scripts (trusted package files, not escaped)."""

    def read(p: Path) -> str:
        return p.read_text(encoding="utf-8")

    licence = read(VENDOR / "uPlot.LICENSE").strip().replace("*/", "* /")
    js = read(VENDOR / "uPlot.iife.min.js") + "\n" + read(TEMPLATES / "charts.js")
    if "</script" in js.lower():
        raise ValueError("an inline script must not contain </script")
    return {
        "css": Markup(read(TEMPLATES / "report.css")),
        "chart_css": Markup(read(VENDOR / "uPlot.min.css")),
        "js": Markup(f"/* uPlot {_version(js)} — {licence} */\n{js}"),
    }


def _version(js: str) -> str:
    m = re.search(r"\(v([0-9.]+)\)", js)
    return m.group(1) if m else "?"


def render_report(doc: FindingsDocument, *, generated_at: str | None = None) -> str:
    """The report as one HTML string: CSS, charts and scripts inline, no external resources."""
    m = model.build(doc, generated_at)
    return _env().get_template("report.html.j2").render(m=m, **assets())
