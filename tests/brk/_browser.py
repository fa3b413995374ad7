"""A headless Chromium driven over the DevTools protocol, for the web page tests.

Chromium speaks the protocol on a pipe (``--remote-debugging-pipe``: it reads NUL-terminated JSON on fd 3
and writes on fd 4), so no WebSocket library and no debugging port are needed. A short Python trampoline
puts the pipe ends on fds 3 and 4 and execs Chromium (``preexec_fn`` is unsafe with the server thread).
"""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")

_TRAMPOLINE = (
    "import fcntl, os, sys\n"
    "r, w = (fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3])\n"
    "os.dup2(r, 3); os.dup2(w, 4); os.close(r); os.close(w)\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)


class BrowserError(RuntimeError):
    """Chromium answered a command with an error, or did not answer in time."""


class Browser:
    """One Chromium process with one page (a tab) attached; ``call`` sends a command to the page."""

    def __init__(self, profile: Path, timeout: float = 60.0) -> None:
        self.timeout = timeout
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        args = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage", "--hide-scrollbars",
                "--disable-extensions", "--mute-audio", f"--user-data-dir={profile}", "--remote-debugging-pipe",
                "about:blank"]
        profile.mkdir(parents=True, exist_ok=True)
        self.log = profile / "chromium.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _TRAMPOLINE, str(to_chrome_r), str(from_chrome_w), *args],
                pass_fds=(to_chrome_r, from_chrome_w), stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.session: str | None = None
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.send(method, params, self.session)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise BrowserError(f"Chromium did not answer in time; its log ends: {self._log_tail()}")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium closed the pipe; its log ends: {self._log_tail()}")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message: dict[str, Any] = json.loads(raw)
        return message

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-1500:]
        except OSError:
            return "(no log)"

    # -- page helpers -----------------------------------------------------------------------------------
    def viewport(self, width: int, height: int) -> None:
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """Poll ``expression`` in the page until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {expression}")
            time.sleep(0.05)

    def open(self, url: str) -> str:
        """Navigate and wait until the page has drawn (or failed to draw) its chart; ``data-rendered``."""
        self.evaluate("window.__left = true")  # set on the page we leave, so waiting cannot see it
        self.call("Page.navigate", {"url": url})
        return str(self.wait_for("!window.__left && document.body && document.body.dataset.rendered"))

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        os.close(self._to_chrome)
        os.close(self._from_chrome)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
