"""Debian's headless Chromium driven over the DevTools protocol, on a pipe.

``--remote-debugging-pipe`` makes Chromium read protocol commands from fd 3 and write
answers to fd 4, NUL-separated JSON: no websocket, no driver, no download, nothing to
install beyond the browser itself.

Only what the dashboard tests need: open a page (at a size, as a phone, in light or dark
colours), evaluate JavaScript, wait for a condition, take a screenshot, and collect the
page's uncaught exceptions and console errors (a blocked script or a CSP violation shows up there).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",  # we run as root in a container
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--remote-debugging-pipe",
    "--autoplay-policy=no-user-gesture-required",  # a test may start a video without a click
)


class CdpError(Exception):
    pass


def _high(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Chromium:
    def __init__(self, executable: str = CHROMIUM, *, width: int = 1280, height: int = 900) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="spoolrender-chromium-")
        # Above fd 4, so that putting them on fds 3 and 4 never overwrites one with the other.
        to_browser_r, self._to_browser = (_high(fd) for fd in os.pipe())
        self._from_browser, from_browser_w = (_high(fd) for fd in os.pipe())
        argv = [executable, *FLAGS, f"--user-data-dir={self._profile.name}", f"--window-size={width},{height}"]
        self._err = open(Path(self._profile.name) / "stderr.log", "wb")  # noqa: SIM115 - closed in close()
        # A tiny Python trampoline puts the pipes on fds 3 and 4 and execs the browser (dash,
        # the /bin/sh here, cannot redirect fds above 9, and preexec_fn is unsafe).
        trampoline = f"import os, sys; os.dup2({to_browser_r}, 3); os.dup2({from_browser_w}, 4); "
        trampoline += "os.execv(sys.argv[1], sys.argv[1:])"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", trampoline, *argv],
            pass_fds=(to_browser_r, from_browser_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._err,
            start_new_session=True,  # its helpers (renderer, GPU, zygote) die with the group
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.width, self.height = width, height

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None,
             timeout: float = 60.0) -> dict[str, Any]:  # fmt: skip
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self.events.append(reply)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError("no answer from Chromium in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 16)
                if not chunk:
                    raise CdpError(f"Chromium closed the pipe (exit {self.proc.poll()})")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def new_page(self, url: str, *, width: int | None = None, height: int | None = None, mobile: bool = False,
                 color_scheme: str | None = None) -> Page:  # fmt: skip
        """A new tab showing ``url``: at the browser's size or ``width`` x ``height`` (``mobile``:
        as a phone, the page's viewport meta applies), in the system's colours or with
        ``color_scheme`` ("light" or "dark") as what prefers-color-scheme reports."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session, target)
        for domain in ("Page", "Runtime", "Log"):
            page.call(f"{domain}.enable")
        page.resize(width or self.width, height or self.height, mobile=mobile)
        if color_scheme is not None:
            page.emulate_color_scheme(color_scheme)
        page.call("Page.navigate", {"url": url})
        return page

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(CdpError, OSError):
                    self.call("Browser.close", timeout=5)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # leftover helpers of our own session
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)
            self._err.close()
            self._profile.cleanup()


class Page:
    def __init__(self, browser: Chromium, session: str, target: str) -> None:
        self.browser = browser
        self.session = session
        self.target = target

    def close(self) -> None:
        """Close the tab: its event stream holds one of the six connections Chromium opens
        to one server, so a test that opens many pages closes those it is done with."""
        self.browser.call("Target.closeTarget", {"targetId": self.target})

    def resize(self, width: int, height: int, *, mobile: bool = False) -> None:
        """The viewport's size (the page lays itself out again, without a reload)."""
        params = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}
        self.call("Emulation.setDeviceMetricsOverride", params)

    def emulate_color_scheme(self, scheme: str) -> None:
        self.call("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.call(method, params, session=self.session)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise CdpError(f"{expression}: {details.get('exception', {}).get('description') or details.get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60.0, interval: float = 0.1) -> Any:
        """Evaluate ``expression`` until it is truthy (an exception counts as not yet); its value.
        The deadline is generous: a loaded machine slows Chromium, the server and the runner."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
                problem = None
            except CdpError as exc:  # e.g. the document is still loading
                value, problem = None, exc
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{expression!r} still falsy after {timeout} s ({problem})")
            time.sleep(interval)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def errors(self) -> list[str]:
        """Uncaught exceptions and console/log errors the page reported so far."""
        out = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            params = event.get("params", {})
            if event["method"] == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                out.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
            elif event["method"] == "Runtime.consoleAPICalled" and params.get("type") == "error":
                out.append(f"console.error: {[a.get('value') for a in params.get('args', [])]}")
            elif event["method"] == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                out.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url')})")
        return out
