"""Open a report in headless Debian Chromium, offline: for tests, benchmarks and screenshots."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# No network at all: background services off, every connection sent to a closed local port.
OFFLINE_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--enable-logging=stderr",
    "--v=0",
)


def run(page: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Chromium on ``page`` with a fresh profile; args such as --dump-dom or --screenshot=PATH."""
    if CHROMIUM is None:
        raise FileNotFoundError("Debian chromium is not installed")
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                CHROMIUM,
                *OFFLINE_FLAGS,
                f"--user-data-dir={profile}",
                *args,
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def console_errors(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in result.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
