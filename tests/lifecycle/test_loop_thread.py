"""The service's event loop thread stops within the deadline it is given: leftover tasks are
cancelled, and a loop that a blocking call holds is left behind, said loudly, instead of
holding the whole shutdown (``LoopThread.shutdown``)."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from otel_eval.base.aio import LoopThread


def test_a_blocked_loop_does_not_hold_the_shutdown_past_its_deadline(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = LoopThread()
    loop.start()
    entered, release = threading.Event(), threading.Event()

    def block() -> None:  # a blocking call on the loop (a library's sync I/O)
        entered.set()
        release.wait(20)  # a guard only: the code before the fix waited here, then failed

    loop.call(block)
    assert entered.wait(30)
    try:
        with caplog.at_level(logging.ERROR, logger="otel_eval.base.aio"):
            loop.shutdown(0.0)  # no time left: returns at once, the loop left behind
        assert loop._thread.is_alive()  # returned while the loop was still blocked
        assert "did not stop" in caplog.text
    finally:
        release.set()
    loop._thread.join(30)  # once unblocked, the stop asked for still ends the thread
    assert not loop._thread.is_alive() and loop.loop.is_closed()


def test_leftover_tasks_are_cancelled_and_the_loop_closed_within_the_deadline() -> None:
    loop = LoopThread()
    loop.start()
    started = threading.Event()
    cancelled = threading.Event()

    async def background() -> None:  # a library's worker nobody stopped
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    loop.call(lambda: asyncio.ensure_future(background()))
    assert started.wait(30)
    assert loop.stop(30.0) is True
    assert cancelled.is_set() and not loop._thread.is_alive() and loop.loop.is_closed()
