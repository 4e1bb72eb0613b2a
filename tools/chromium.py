"""Headless Chromium through the Chrome DevTools Protocol, standard library only.

Used by the report's browser test (``tests/record/test_report_browser.py``), the size and
speed budget (``python -m tools.report_budget``) and the screenshots in ``docs/``.

Chromium is started with ``--remote-debugging-pipe``: it reads protocol messages from file
descriptor 3 and writes to 4, each a JSON object ended by a NUL byte. No port, no websocket
library, no driver binary: Debian's ``chromium`` package is all it needs. The flags keep it
off the network (no background networking, component updates, sync or QUIC) and the page
itself runs under the report's own Content-Security-Policy.

```
with Chromium.launch() as browser:
    page = browser.new_page(width=1280, height=900)
    page.goto(Path("report.html").resolve().as_uri())
    page.evaluate("document.title")
    page.screenshot(Path("shot.png"))
```
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-features=Translate,MediaRouter,OptimizationHints",
    "--metrics-recording-only",
    "--mute-audio",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
LOUD = ("error", "warning", "assert")
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserError(RuntimeError):
    """Chromium could not be started, or a protocol command failed or timed out."""


def find_chromium() -> str | None:
    """The Chromium executable: ``$LLMEVAL_CHROMIUM``, else the first of ``chromium``,
    ``chromium-browser``, ``google-chrome`` on the PATH; None when there is none."""
    explicit = os.environ.get("LLMEVAL_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else shutil.which(explicit)
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _high_fd(fd: int) -> int:
    """A copy of ``fd`` numbered 10 or above (so that placing the pipe ends on 3 and 4 in the
    child never overwrites the other end), closed on exec; the original is closed."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Chromium:
    """One headless Chromium process and its protocol pipe."""

    def __init__(self, process: subprocess.Popen[bytes], to_browser: int, from_browser: int):
        self.process = process
        self._out = to_browser
        self._in = from_browser
        self._next_id = 0
        self._lock = threading.Lock()
        self._replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._events_changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @classmethod
    def launch(
        cls, executable: str | None = None, extra_flags: Sequence[str] = (), timeout: float = 60
    ) -> Chromium:
        exe = executable or find_chromium()
        if exe is None:
            raise BrowserError("no Chromium found (apt-get install chromium, or $LLMEVAL_CHROMIUM)")
        profile = tempfile.mkdtemp(prefix="llmeval-chromium-")
        cmd_r, cmd_w = (_high_fd(fd) for fd in os.pipe())  # we write commands, it reads fd 3
        res_r, res_w = (_high_fd(fd) for fd in os.pipe())  # it writes results on fd 4

        def place_pipes() -> None:  # in the child, before exec
            os.dup2(cmd_r, 3)
            os.dup2(res_w, 4)

        try:
            process = subprocess.Popen(
                [exe, *FLAGS, f"--user-data-dir={profile}", *extra_flags, "about:blank"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=place_pipes,
                close_fds=False,
                start_new_session=True,
            )
        except OSError as exc:
            raise BrowserError(f"cannot start {exe}: {exc}") from exc
        finally:
            os.close(cmd_r)
            os.close(res_w)
        browser = cls(process, cmd_w, res_r)
        browser._profile = profile
        try:
            browser.send("Browser.getVersion", timeout=timeout)
        except BrowserError:
            browser.close()
            raise
        return browser

    _profile: str | None = None

    # ------------------------------------------------------------------ protocol

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._in, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                reply = self._replies.get(message.get("id", -1))
                if reply is not None:
                    reply.put(message)
                else:
                    with self._events_changed:
                        self.events.append(message)
                        self._events_changed.notify_all()
        for reply in list(self._replies.values()):
            reply.put({"error": {"message": "Chromium closed the protocol pipe"}})

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 30,
    ) -> dict[str, Any]:
        """Send one command and wait for its result (raises BrowserError on an error)."""
        with self._lock:
            self._next_id += 1
            message_id = self._next_id
            reply: queue.Queue[dict[str, Any]] = queue.Queue()
            self._replies[message_id] = reply
            message: dict[str, Any] = {"id": message_id, "method": method, "params": params or {}}
            if session is not None:
                message["sessionId"] = session
            try:
                os.write(self._out, json.dumps(message).encode() + b"\0")
            except OSError as exc:
                raise BrowserError(f"{method}: Chromium is gone: {exc}") from exc
        try:
            answer = reply.get(timeout=timeout)
        except queue.Empty:
            raise BrowserError(f"{method}: no answer within {timeout} s") from None
        finally:
            self._replies.pop(message_id, None)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error'].get('message')}")
        result: dict[str, Any] = answer.get("result", {})
        return result

    def wait_event(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30, start: int = 0
    ) -> dict[str, Any]:
        """The first event from index ``start`` on that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        with self._events_changed:
            while True:
                for event in self.events[start:]:
                    if predicate(event):
                        return event
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError("timed out waiting for a browser event")
                self._events_changed.wait(left)

    def new_page(self, width: int = 1280, height: int = 900) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.send(f"{domain}.enable")
        page.set_viewport(width, height)
        return page

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                with contextlib.suppress(BrowserError):
                    self.send("Browser.close", timeout=5)
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=10)
        finally:
            for fd in (self._out, self._in):
                with contextlib.suppress(OSError):
                    os.close(fd)
            if self._profile:
                shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Page:
    """One tab, attached with its own protocol session."""

    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser = browser
        self.session = session
        self.first_event = len(browser.events)

    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> Any:
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def _mine(self) -> list[dict[str, Any]]:
        return [
            e for e in self.browser.events[self.first_event :] if e.get("sessionId") == self.session
        ]

    def set_viewport(self, width: int, height: int) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def goto(self, url: str, timeout: float = 60) -> float:
        """Navigate and wait for the load event; returns the seconds from the navigate
        command to the load event."""
        start = len(self.browser.events)
        began = time.perf_counter()
        self.send("Page.navigate", {"url": url}, timeout=timeout)
        self.browser.wait_event(
            lambda e: (
                e.get("sessionId") == self.session and e.get("method") == "Page.loadEventFired"
            ),
            timeout=timeout,
            start=start,
        )
        return time.perf_counter() - began

    def evaluate(self, expression: str, timeout: float = 30) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise)."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout=timeout,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = (details.get("exception") or {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript error: {text}")
        return (result.get("result") or {}).get("value")

    def wait_for(self, expression: str, timeout: float = 30, interval: float = 0.02) -> Any:
        """Poll until ``expression`` is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {expression!r}")
            time.sleep(interval)

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
            )
            params.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1},
            )
        data = self.send("Page.captureScreenshot", params, timeout=60)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and log entries of level error
        or warning seen on this page so far."""
        found = []
        for event in self._mine():
            method, params = event.get("method"), event.get("params") or {}
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails") or {}
                text = (details.get("exception") or {}).get("description") or details.get("text")
                found.append(f"exception: {text}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in LOUD:
                args = [str(a.get("value", a.get("description", ""))) for a in params["args"]]
                found.append(f"console.{params['type']}: {' '.join(args)}")
            elif method == "Log.entryAdded":
                entry = params.get("entry") or {}
                if entry.get("level") in ("error", "warning"):
                    found.append(f"log {entry.get('level')}: {entry.get('text')}")
        return found

    def requests(self) -> list[str]:
        """URLs of every request this page made."""
        return [
            str((e.get("params") or {}).get("request", {}).get("url"))
            for e in self._mine()
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def dialogs(self) -> list[str]:
        """Messages of JavaScript dialogs (alert, confirm, prompt) the page opened."""
        return [
            str((e.get("params") or {}).get("message"))
            for e in self._mine()
            if e.get("method") == "Page.javascriptDialogOpening"
        ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.chromium",
        description="Screenshot of a local HTML file in headless Chromium.",
    )
    parser.add_argument("html", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--full-page", action="store_true")
    parser.add_argument("--hash", default="", help="URL fragment to open, e.g. item/gsm8k/...")
    parser.add_argument("--eval", default=None, help="JavaScript to run before the screenshot")
    parser.add_argument("--scroll-to", default=None, help="CSS selector to scroll to the top")
    args = parser.parse_args(argv)
    with Chromium.launch() as browser:
        page = browser.new_page(args.width, args.height)
        url = args.html.resolve().as_uri() + (f"#{args.hash}" if args.hash else "")
        page.goto(url)
        page.wait_for("document.documentElement.getAttribute('data-ready')")
        if args.eval:
            page.evaluate(args.eval)
        if args.scroll_to:
            page.evaluate(f"document.querySelector({json.dumps(args.scroll_to)}).scrollIntoView()")
        time.sleep(0.2)
        page.screenshot(args.png, full_page=args.full_page)
        for problem in page.problems():
            print(problem)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
