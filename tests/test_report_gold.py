"""Gold files for the host report and the fleet page.

A normal run only compares, and fails on any difference. `make gold` (which sets
LEAKREPORT_UPDATE_GOLD=1) only writes; review the diff before committing it.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import os
import re
from pathlib import Path

import pytest

from analyzer.packs import load_packs
from analyzer.runner import analyze
from reports.render import render_report
from simulator.generate import simulate

GOLD = Path(__file__).resolve().parent / "gold"


def _scrub(doc) -> None:
    doc.run.bucket = "BUCKET"
    doc.run.analyzer_version = "VERSION"
    for p in doc.run.packs:
        p.path = "PACK"
    for r in doc.run.rules:
        r.duration_s = 0.0


def _without_vendored_script(html: str) -> str:
    """The inline program (the vendored chart library and our chart script) as its hash:
    the gold file stays readable and still changes when the script does."""

    def digest(m: re.Match[str]) -> str:
        return f"<script>/* inline script, sha256 {hashlib.sha256(m.group(1).encode()).hexdigest()} */</script>"

    return re.sub(r"<script>\n(.*?)</script>", digest, html, flags=re.S)


def check_gold(name: str, text: str, *, gold_dir: Path = GOLD) -> None:
    """Write the gold file when an update is asked for; otherwise compare, and fail."""
    path = gold_dir / name
    if os.environ.get("LEAKREPORT_UPDATE_GOLD"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        raise AssertionError(f"no gold file {path}: run `make gold` and review it")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), text.splitlines(True), "gold", "now", n=1
            )
        )
        raise AssertionError(
            f"output differs from {path} (run `make gold` if intended):\n{diff[:4000]}"
        )


def test_report_matches_gold(tmp_path) -> None:
    simulate("fast-image-processor-leak", tmp_path / "a", hosts=1, hours=3, seed=5)
    simulate("healthy-static", tmp_path / "a", hosts=1, hours=3, seed=5)
    doc = analyze(tmp_path / "a", load_packs(), now=dt.datetime(2026, 12, 1, tzinfo=dt.UTC))
    _scrub(doc)
    html = render_report(doc, generated_at="2026-12-01T00:00:00Z")
    check_gold("report.html", _without_vendored_script(html))


def test_gold_check_fails_on_a_difference_and_update_only_writes(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("LEAKREPORT_UPDATE_GOLD", raising=False)
    with pytest.raises(AssertionError, match="no gold file"):
        check_gold("x.html", "a\n", gold_dir=tmp_path)
    (tmp_path / "x.html").write_text("a\nb\n", encoding="utf-8")
    check_gold("x.html", "a\nb\n", gold_dir=tmp_path)
    with pytest.raises(AssertionError, match=r"(?s)differs.*\n-b\n\+c\n"):
        check_gold("x.html", "a\nc\n", gold_dir=tmp_path)
    monkeypatch.setenv("LEAKREPORT_UPDATE_GOLD", "1")
    check_gold("x.html", "a\nc\n", gold_dir=tmp_path)  # writes, compares nothing
    assert (tmp_path / "x.html").read_text(encoding="utf-8") == "a\nc\n"
