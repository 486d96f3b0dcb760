"""Gold file for the report: `make gold` rewrites it (review the diff)."""

from __future__ import annotations

import datetime as dt
import difflib
import os
from pathlib import Path

from analyzer.packs import load_packs
from analyzer.runner import analyze
from reports.render import render_report
from simulator.generate import simulate

GOLD = Path(__file__).resolve().parent / "gold" / "report.html"


def _scrub(doc) -> None:
    doc.run.bucket = "BUCKET"
    doc.run.analyzer_version = "VERSION"
    for p in doc.run.packs:
        p.path = "PACK"
    for r in doc.run.rules:
        r.duration_s = 0.0


def test_report_matches_gold(tmp_path) -> None:
    simulate("fast-image-processor-leak", tmp_path / "a", hosts=1, hours=3, seed=5)
    simulate("healthy-static", tmp_path / "a", hosts=1, hours=3, seed=5)
    doc = analyze(tmp_path / "a", load_packs(), now=dt.datetime(2026, 12, 1, tzinfo=dt.UTC))
    _scrub(doc)
    html = render_report(doc, generated_at="2026-12-01T00:00:00Z")
    if os.environ.get("LEAKREPORT_UPDATE_GOLD"):
        GOLD.parent.mkdir(exist_ok=True)
        GOLD.write_text(html, encoding="utf-8")
    expected = GOLD.read_text(encoding="utf-8")
    if html != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), html.splitlines(True), "gold", "now", n=1
            )
        )
        raise AssertionError(
            f"report differs from {GOLD} (run `make gold` if intended):\n{diff[:4000]}"
        )
