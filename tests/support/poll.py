"""The one wait of the tests: poll an observable condition until it holds, with a deadline that
is there to fail instead of hang (the condition is the synchronisation, never the sleep).

For what runs on its own (a process, a broker's timers, a service's loop thread); code with an
injected clock is driven by hand instead (``support.clock``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

TIMEOUT_S = 60.0  # default deadline: generous, a passing test never waits for it
INTERVAL_S = 0.05  # default polling interval


def poll(condition: Callable[[], T], what: str, *, timeout_s: float = TIMEOUT_S,
         interval_s: float = INTERVAL_S, between: Callable[[], Any] | None = None) -> T:
    """Call ``condition`` until it returns something truthy and return that; ``between`` runs
    after each miss (e.g. a scrape). AssertionError naming ``what`` after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        if between is not None:
            between()
        time.sleep(interval_s)  # polling interval, not synchronisation
    return value


async def poll_async(condition: Callable[[], T | Awaitable[T]], what: str, *,
                     timeout_s: float = TIMEOUT_S, interval_s: float = INTERVAL_S) -> T:
    """``poll`` on the running event loop; ``condition`` may be a coroutine function."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while True:
        value = condition()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if loop.time() > end:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}"
                                 f" (last: {value!r})")
        await asyncio.sleep(interval_s)  # polling interval, not synchronisation
