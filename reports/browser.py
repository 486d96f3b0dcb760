"""Open a report in headless Debian Chromium, offline: for tests, benchmarks and screenshots.

``run`` is one Chromium call (--dump-dom, --screenshot). ``Page`` drives one page over the
DevTools protocol on a pipe (--remote-debugging-pipe; standard library only): evaluate
script, send real mouse events, take screenshots, and record every network request and
console message the page makes.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

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


def _pipes_at_3_and_4(read_fd: int, write_fd: int) -> Any:
    """In the child: the DevTools pipe's ends where Chromium expects them (fd 3 and 4)."""

    def move() -> None:
        r, w = os.dup(read_fd), os.dup(write_fd)  # above 4, so neither dup2 clobbers the other
        os.dup2(r, 3)
        os.dup2(w, 4)
        os.set_inheritable(3, True)
        os.set_inheritable(4, True)

    return move


class Page:
    """One offline Chromium tab over the DevTools protocol (a pipe, no port opened)."""

    def __init__(
        self, width: int = 1400, height: int = 900, *, javascript: bool = True, timeout: float = 60
    ) -> None:
        if CHROMIUM is None:
            raise FileNotFoundError("Debian chromium is not installed")
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory()
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()
        flags = [*OFFLINE_FLAGS, f"--user-data-dir={self._profile.name}"]
        flags += ["--remote-debugging-pipe", f"--window-size={width},{height}"]
        if not javascript:
            flags.append("--blink-settings=scriptEnabled=false")
        self._proc = subprocess.Popen(
            [CHROMIUM, *flags, "about:blank"],
            close_fds=False,  # fd 3 and 4 are set up in the child, after close_fds would run
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_pipes_at_3_and_4(to_chrome_r, from_chrome_w),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        targets = self.send("Target.getTargets")["targetInfos"]
        tid = next(t["targetId"] for t in targets if t["type"] == "page")
        self._session = self.send("Target.attachToTarget", targetId=tid, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=height, deviceScaleFactor=1, mobile=False,
        )  # fmt: skip

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError(
                    f"Chromium did not answer over the DevTools pipe in {self.timeout} s"
                )
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                raise ConnectionError("Chromium closed the DevTools pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        out: dict[str, Any] = json.loads(msg)
        return out

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self.events.append(reply)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self.send(method, self._session, **params)

    def open(self, path: Path) -> float:
        """Load a file; returns seconds from navigation to the load event plus one layout."""
        t0 = time.perf_counter()
        self.call("Page.navigate", url=path.resolve().as_uri())
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read())
        self.eval("document.body.getBoundingClientRect().height")
        return time.perf_counter() - t0

    def eval(self, expr: str) -> Any:
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr[:80]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def mouse(
        self, kind: str, x: float, y: float, *, button: str = "none", clicks: int = 0
    ) -> None:
        self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button=button, clickCount=clicks)

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def requests(self) -> list[str]:
        """Every URL the page asked for (the page itself included)."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args", []))[:500])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
            elif m == "Network.loadingFailed":
                out.append(f"load failed: {p.get('errorText')}")
        return out

    def close(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError, OSError):
            self.send("Browser.close")
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._w)
        os.close(self._r)
        self._profile.cleanup()

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
