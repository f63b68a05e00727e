"""A real Chromium, headless, driven through the Chrome DevTools Protocol over a pipe.

``--remote-debugging-pipe`` makes Chromium read protocol messages (JSON, each ended by a NUL
byte) on its fd 3 and write answers and events on fd 4, as Playwright drives it: no port, no
websocket, nothing to install beyond Debian's ``chromium``. Each ``Browser`` runs with a
fresh profile and the background-networking features off, so it opens no connection of its
own. Waits are on conditions (an answer, an event), each with a deadline, never a sleep.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-default-apps", "--disable-extensions", "--mute-audio",
         "--remote-debugging-pipe")
DEADLINE_S = 60.0


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class ProtocolError(RuntimeError):
    pass


class Browser:
    """One Chromium process and one page (a target attached in flat mode)."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 900) -> None:
        exe = chromium()
        if exe is None:
            raise RuntimeError("chromium is not installed (scripts/test installs it)")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire() -> None:  # in the child: the pipe ends on fds 3 and 4
            r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        profile.mkdir(parents=True, exist_ok=True)
        log = (profile / "chromium.log").open("wb")
        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            pass_fds=(3, 4), preexec_fn=wire)
        log.close()
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._lock = threading.Condition()
        self._answers: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._next = 0
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(domain, session=self.session)
        self.call("Emulation.setDeviceMetricsOverride", session=self.session, width=width,
                  height=height, deviceScaleFactor=1, mobile=False)

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_chrome, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                with self._lock:
                    self._closed = True
                    self._lock.notify_all()
                return
            buf += chunk
            *messages, buf = buf.split(b"\0")
            with self._lock:
                for raw in messages:
                    msg = json.loads(raw)
                    if "id" in msg:
                        self._answers[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                self._lock.notify_all()

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        with self._lock:
            self._next += 1
            ident = self._next
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        answer = self._wait(lambda: self._answers.pop(ident, None), method)
        if "error" in answer:
            raise ProtocolError(f"{method}: {answer['error']}")
        return dict(answer.get("result") or {})

    def _wait(self, found: Callable[[], Any], what: str) -> Any:
        """The first non-None ``found()``, checked each time a message arrives."""
        got: list[Any] = []

        def ready() -> bool:
            if not got:
                value = found()
                if value is not None:
                    got.append(value)
            return bool(got) or self._closed

        with self._lock:
            if not self._lock.wait_for(ready, DEADLINE_S):
                raise ProtocolError(f"no answer to {what} within {DEADLINE_S} s")
        if not got:
            raise ProtocolError(f"chromium went away during {what}")
        return got[0]

    def open(self, url: str) -> None:
        """Navigate and wait for the page's load event."""
        with self._lock:
            seen = len(self.events)
        frame = self.call("Page.navigate", session=self.session, url=url)
        if frame.get("errorText"):
            raise ProtocolError(f"navigating to {url}: {frame['errorText']}")
        self.wait_load(seen, url)

    def wait_load(self, seen: int, what: str = "the page") -> None:
        """Wait for a load event among the events after the first ``seen``."""
        def loaded() -> bool | None:
            return any(e.get("method") == "Page.loadEventFired"
                       and e.get("sessionId") == self.session
                       for e in self.events[seen:]) or None
        self._wait(loaded, f"the load of {what}")

    def js(self, expression: str) -> Any:
        """The value of ``expression`` in the page (JSON-serialisable results)."""
        result = self.call("Runtime.evaluate", session=self.session, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise ProtocolError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            size = self.js("[document.documentElement.scrollWidth,"
                           " Math.min(document.documentElement.scrollHeight, 4000)]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
        data = self.call("Page.captureScreenshot", session=self.session, **params)["data"]
        path.write_bytes(base64.b64decode(data))

    def console(self) -> list[str]:
        """Console and log messages seen so far (CSP refusals show up here)."""
        out = []
        for e in self.events:
            if e.get("method") == "Log.entryAdded":
                out.append(str(e["params"]["entry"].get("text")))
            elif e.get("method") == "Runtime.consoleAPICalled":
                out.append(" ".join(str(a.get("value")) for a in e["params"].get("args", [])))
        return out

    def close(self) -> None:
        with contextlib.suppress(ProtocolError, OSError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        self._reader.join(timeout=5)
        os.close(self._from_chrome)
