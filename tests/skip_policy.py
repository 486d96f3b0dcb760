"""In CI (``CI=true``) a skipped test fails unless tests/allowed_skips.txt lists it.

A skip says "this was not checked"; in CI that must be a decision written down
with its reason, not an accident of what the runner has installed. Each line of
the allow-list is a test id (``fnmatch`` patterns allowed) and ``# reason``; a
line without a reason is a usage error. Outside CI skips stay skips (a laptop
without chromium, say), and ``-ra`` still lists them.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Generator
from pathlib import Path

import pytest

# (LEAKREPORT_ALLOWED_SKIPS names another list: for this plugin's own tests)
ALLOW_LIST = Path(
    os.environ.get("LEAKREPORT_ALLOWED_SKIPS")
    or Path(__file__).resolve().parent / "allowed_skips.txt"
)
_KEY = pytest.StashKey[list[tuple[str, str]]]()


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def read_allow_list(path: Path) -> list[tuple[str, str]]:
    """(pattern, reason) per entry; raises pytest.UsageError naming file and line."""
    out = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern, _, reason = line.partition("#")
        if not pattern.strip() or not reason.strip():
            raise pytest.UsageError(f"{path}:{n}: expected 'TEST-ID  # reason', got {raw!r}")
        out.append((pattern.strip(), reason.strip()))
    return out


def allowed(nodeid: str, entries: list[tuple[str, str]]) -> bool:
    return any(fnmatch.fnmatchcase(nodeid, p) for p, _ in entries)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_KEY] = read_allow_list(ALLOW_LIST) if ALLOW_LIST.exists() else []


def _fail_if_not_allowed(
    config: pytest.Config, report: pytest.TestReport | pytest.CollectReport
) -> None:
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return
    if allowed(report.nodeid, config.stash.get(_KEY, [])):
        return
    why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"skipped in CI ({why}) and not listed in {ALLOW_LIST.name}: install what it needs "
        f"in .ci/run, or list '{report.nodeid}  # reason' there"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    _fail_if_not_allowed(item.config, outcome.get_result())  # type: ignore[attr-defined]


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, None]:
    outcome = yield
    _fail_if_not_allowed(collector.config, outcome.get_result())  # type: ignore[attr-defined]
