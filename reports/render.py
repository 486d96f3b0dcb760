"""Render the self-contained HTML report (Jinja2, autoescape on)."""

from __future__ import annotations

import os
from pathlib import Path

import jinja2

from analyzer.findings import FindingsDocument
from reports import model

TEMPLATES = Path(__file__).parent / "templates"


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
        lstrip_blocks=False,
        keep_trailing_newline=True,
    )


def render_report(doc: FindingsDocument, *, generated_at: str | None = None) -> str:
    """The report as one HTML string: CSS and charts inline, no external resources."""
    m = model.build(doc, generated_at)
    css = (TEMPLATES / "report.css").read_text(encoding="utf-8")
    return _env().get_template("report.html.j2").render(m=m, css=css)


def write_report(
    doc: FindingsDocument, path: str | os.PathLike[str], *, generated_at: str | None = None
) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(render_report(doc, generated_at=generated_at), encoding="utf-8")
    os.replace(tmp, out)
    return out
