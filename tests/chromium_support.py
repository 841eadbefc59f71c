"""Headless Chromium driven over the Chrome DevTools Protocol on a pipe (``--remote-debugging-pipe``:
JSON messages ending in NUL on file descriptors 3 and 4), with no Python dependency: screenshots,
the text a reader sees on the first screen, and the console errors of a page."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

#: Debian and Ubuntu name the browser `chromium` or `chromium-browser`; Playwright's and Google's
#: headless builds install `chromium-headless-shell`. Any of them renders the report.
CHROMIUM = next(
    (found for name in ("chromium", "chromium-browser", "chromium-headless-shell") if (found := shutil.which(name))),
    None,
)
SKIP_REASON = (
    "none of chromium, chromium-browser, chromium-headless-shell is on PATH (.ci/run installs Debian's chromium)"
)

#: Text nodes whose box starts above the viewport's bottom edge: what a reader sees before scrolling.
FIRST_SCREEN_TEXT = """(() => {
  const height = window.innerHeight, walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const out = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const range = document.createRange();
    range.selectNodeContents(node);
    const box = range.getBoundingClientRect();
    if (box.height > 0 && box.top < height && box.bottom > 0) out.push(node.textContent);
  }
  return out.join(" ").replace(/\\s+/g, " ");
})()"""


class Chromium:
    """One headless browser with a fresh profile; ``open(path)`` loads a page and records its
    console errors (console.error/assert, uncaught exceptions, error log entries such as a CSP
    violation or a failed load)."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 900, timeout: float = 60.0):
        commands_read, commands_write = os.pipe()
        replies_read, replies_write = os.pipe()

        def as_fds_3_and_4():
            # Above 9 first, so neither dup2 can overwrite the other pipe's end.
            high_read, high_write = (
                fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10),
                fcntl.fcntl(replies_write, fcntl.F_DUPFD, 10),
            )
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)

        self.process = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=as_fds_3_and_4,
        )
        os.close(commands_read)
        os.close(replies_write)
        self.send_fd, self.read_fd = commands_write, replies_read
        self.timeout, self.width, self.height = timeout, width, height
        self.buffer, self.next_id, self.events = b"", 0, []
        self.session: str | None = None

    # --- the protocol ---------------------------------------------------------------------------

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            ready, _, _ = select.select([self.read_fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.read_fd, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, session: bool = True, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.send_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        for index, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(index)
        while True:
            event = self._message(deadline)
            if event.get("method") == method:
                return event
            self.events.append(event)

    # --- what the tests use ---------------------------------------------------------------------

    def open(self, path: Path) -> None:
        target = self.call("Target.createTarget", session=False, url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", session=False, targetId=target, flatten=True)["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(domain)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.call("Page.navigate", url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired")
        self.evaluate("1")  # let the load's own messages arrive before anyone reads them

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:60]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        errors = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                errors.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                errors.append(params["entry"].get("text", ""))
        return errors

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params: dict = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params |= {
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
            }
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))
        return path

    def first_screen_text(self) -> str:
        return self.evaluate(FIRST_SCREEN_TEXT)

    def close(self) -> None:
        try:
            self.call("Browser.close", session=False)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.send_fd)
        os.close(self.read_fd)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *_) -> None:
        self.close()
