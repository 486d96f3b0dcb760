"""tests/skip_policy.py: in CI a skip fails unless the allow-list gives its reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

SAMPLE = """
import pytest

def test_runs():
    pass

def test_needs_a_gpu():
    pytest.skip("no GPU here")

@pytest.mark.skipif(True, reason="tool missing")
def test_needs_a_tool():
    pass

@pytest.mark.xfail(reason="known", strict=False)
def test_known_bug():
    assert False
"""


def _run(tmp: Path, ci: str | None, allow: str) -> subprocess.CompletedProcess[str]:
    (tmp / "test_sample.py").write_text(SAMPLE)
    (tmp / "allow.txt").write_text(allow)
    (tmp / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=str(HERE), LEAKREPORT_ALLOWED_SKIPS=str(tmp / "allow.txt"))
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "skip_policy", "-p", "no:cacheprovider"]
        + ["--rootdir", str(tmp), "-c", str(tmp / "pytest.ini"), str(tmp / "test_sample.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=120,
    )


def test_outside_ci_a_skip_is_a_skip(tmp_path) -> None:
    r = _run(tmp_path, None, "")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed, 2 skipped, 1 xfailed" in r.stdout


def test_in_ci_an_unlisted_skip_fails_with_the_reason(tmp_path) -> None:
    allow = "test_sample.py::test_needs_a_gpu  # the CI runners have no GPU\n"
    r = _run(tmp_path, "true", allow)
    assert r.returncode == 1, r.stdout + r.stderr
    # a skip decided at setup (a skipif mark) shows as an error, one in the test as a failure
    assert "1 passed, 1 skipped, 1 xfailed, 1 error" in r.stdout
    assert "skipped in CI (Skipped: tool missing) and not listed in allow.txt" in r.stdout
    assert "ERROR test_sample.py::test_needs_a_tool" in r.stdout
    r = _run(tmp_path, "true", "")
    assert "1 failed, 1 passed, 1 xfailed, 1 error" in r.stdout, r.stdout
    assert "FAILED test_sample.py::test_needs_a_gpu" in r.stdout


def test_patterns_allow_and_a_line_without_reason_is_an_error(tmp_path) -> None:
    r = _run(tmp_path, "true", "test_sample.py::test_needs_*  # both need hardware\n")
    assert r.returncode == 0 and "1 passed, 2 skipped" in r.stdout, r.stdout + r.stderr
    r = _run(tmp_path, "true", "# comment\ntest_sample.py::test_needs_a_gpu\n")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "allow.txt:2: expected 'TEST-ID  # reason'" in r.stderr


def test_the_real_allow_list_reads_and_every_entry_has_a_reason() -> None:
    from skip_policy import ALLOW_LIST, read_allow_list

    entries = read_allow_list(ALLOW_LIST)
    assert entries and all(len(reason) > 10 for _, reason in entries)
    for pattern, _ in entries:
        file = HERE.parent / pattern.split("::")[0]
        assert file.exists(), f"{pattern}: no such test file"
