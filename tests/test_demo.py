"""`make demo` itself, on a small fleet, as a new user runs it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_prints_reports_showing_the_leak(tmp_path) -> None:
    out = tmp_path / "out"
    r = subprocess.run(
        ["make", "-s", "demo", f"OUT={out}", "DEMO_HOSTS=4", "DEMO_HOURS=4"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"^report: (.+\.html)$", r.stdout, re.M)
    assert m, r.stdout
    page = Path(m.group(1)).read_text(encoding="utf-8")
    assert "fast-image-processor-leak-00" in page
    assert "--disable-fast-image-processor" in page  # remediation A is on the page
    assert "leaks about" in page  # the leak verdict sentence
    # the healthy and cache hosts are covered, without leak verdicts
    for host in ("healthy-static-00", "cache-warmup-00", "fast-image-processor-off-00"):
        assert host in page
        assert f"on {host} leaks" not in page
    fleet = re.search(r"^fleet report: (.+\.html)$", r.stdout, re.M)
    assert fleet and "fast image processor off" in Path(fleet.group(1)).read_text(encoding="utf-8")
