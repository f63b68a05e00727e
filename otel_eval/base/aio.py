"""One asyncio event loop on a daemon thread, for the async stages of ``serve``.

The receivers and the engine are threads; the judge (litellm ``acompletion``) and Kafka
(aiokafka) are asyncio. They meet here: thread code hands work to the loop with ``call``
(fire and forget, e.g. ``JudgeQueue.submit``) or ``run`` (wait for a coroutine's result, e.g.
a Kafka publish that must be acknowledged before the OTLP request is).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "otel-eval-aio") -> None:
        # Made by start(): an event loop holds a selector and a socket pair, which a loop
        # thread built but never started (a Service constructed, then dropped) would leak.
        self.loop: asyncio.AbstractEventLoop
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # As ``asyncio.run`` ends, by the thread that ran the loop: once ``stop`` stopped
            # it, within its deadline or, when a blocking call held the loop past that,
            # whenever the call returns (no task is then destroyed pending).
            try:
                self.loop.run_until_complete(cancel_leftovers())
            finally:
                self.loop.close()

    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule ``fn(*args)`` on the loop; returns at once."""
        self.loop.call_soon_threadsafe(fn, *args)

    def shutdown(self, deadline_s: float) -> None:
        self.stop(deadline_s)

    def stop(self, deadline_s: float = 10.0) -> bool:
        """Stop the loop once the stages have shut down (their ``shutdown`` ran via ``run``),
        within ``deadline_s`` (what is left of the service's): the loop stops, its leftover
        tasks are cancelled and it closes (``_main``). A loop not closed by then (a call
        blocking it, a task that will not be cancelled) is left on its daemon thread, logged
        as an error, and False returned: one blocked call must not hold the process's exit."""
        if not self._thread.is_alive():
            return True
        with contextlib.suppress(RuntimeError):  # closed meanwhile: the thread is ending
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(max(0.0, deadline_s))
        if self._thread.is_alive():
            log.error("event loop thread did not stop within the shutdown deadline (%.1f s): "
                      "a call is blocking it; stopping without it", deadline_s)
            return False
        return True


async def cancel_leftovers() -> None:
    """What ``asyncio.run`` does at exit, on the running loop: cancel leftover tasks
    (libraries' background workers, e.g. litellm's logging worker), close async generators."""
    me = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not me]
    for t in rest:
        t.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()
