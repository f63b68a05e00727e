"""``JudgeWrites``: the one write path of a row's ``judge`` part (``put_judge``).

    JudgeStage (on the event loop) -> put(trace_id, revision, judge) -> Future[bool]
        -> thread otel-eval-judge-writer: store.put_judge, one at a time, in the order made

``put_judge`` blocks (a SQLite write lock, a PostgreSQL round trip), and the loop the judge
runs on is shared with the Kafka consumer and publishers: the writes go to a thread of their
own, never the loop. A daemon thread, not a ThreadPoolExecutor's: a store that hangs past the
shutdown deadline cannot hold the process's exit. ``stop`` takes no more writes; those queued
still run. The future says whether the store took the judgement (False: the row was
re-evaluated since, so the judgement is of an old revision) or the store's exception.

``put`` may ``shape`` the judgement on that thread first (the judge cuts it to fit the stored
result) and run ``after(stored)`` once the store answered (the judge's journal entry cleared,
or kept for the judgement's events); ``call`` runs
other work in order with the writes (the journal of pending judge work).

A write the store refuses for its state (``failures.STORE_REFUSALS``: full, read-only,
locked, unreachable, timed out) is a judgement paid for: it is written again after a
back-off (1 s doubling to 30 s, the store's ``write_retry_*`` defaults), as the engine waits
out such a store, instead of being dropped with the row left judge-less; the writes made
after it wait behind it, in order. Any other failure (a value the driver refuses) ends it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from otel_eval.base.backoff import Backoff
from otel_eval.store.base import EvaluationStore
from otel_eval.store.failures import STORE_REFUSALS, write_failure

log = logging.getLogger(__name__)

# store.write_retry_initial_interval_s / write_retry_max_interval_s, as their defaults
RETRY = Backoff(1.0, 30.0)

_Write = tuple[Future[bool], Callable[[], bool]]
Judgement = dict[str, Any]


class JudgeWrites:
    def __init__(self, store: EvaluationStore, name: str = "otel-eval-judge-writer",
                 backoff: Backoff = RETRY) -> None:
        self._store = store
        self._backoff = backoff  # between the attempts of a write the store refuses
        self._calls: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopped = False

    def start(self) -> None:
        self._thread.start()

    def put(self, trace_id: str, revision: int, judge: Judgement, *,
            shape: Callable[[Judgement], Judgement] | None = None,
            after: Callable[[bool], None] | None = None,
            evaluated_at_ns: int | None = None) -> Future[bool]:
        """Queue ``store.put_judge(trace_id, revision, shape(judge), evaluated_at_ns)`` (the
        evaluation judged: revision and time), then ``after(stored)``; RuntimeError once
        stopped."""
        def write() -> bool:
            shaped = shape(judge) if shape is not None else judge
            stored = self._until_taken(lambda: self._store.put_judge(
                trace_id, revision, shaped, evaluated_at_ns), f"trace {trace_id}")
            if after is not None:
                after(stored)
            return stored
        return self.call(write)

    def put_session(self, key: str, completions: int, judge: Judgement) -> Future[bool]:
        """Queue ``store.put_session_judge(key, completions, judge)`` (a session's judgement,
        onto the completion it judged); RuntimeError once stopped."""
        return self.call(lambda: self._until_taken(
            lambda: self._store.put_session_judge(key, completions, judge), f"session {key}"))

    def _until_taken(self, put: Callable[[], bool], what: str) -> bool:
        """``put()``, again after the back-off while the store refuses it for its state."""
        attempt = 0
        while True:
            try:
                return put()
            except Exception as e:
                reason = write_failure(e)
                if reason not in STORE_REFUSALS:
                    raise
                delay = self._backoff.delay_s(attempt)
                log.warning("the store refused the judge result of %s (%s: %s); "
                            "written again in %.1f s", what, reason, type(e).__name__,
                            delay)
                attempt += 1
                time.sleep(delay)

    def call(self, fn: Callable[[], bool]) -> Future[bool]:
        """Queue ``fn()`` in order with the writes; RuntimeError once stopped."""
        if self._stopped:
            raise RuntimeError("judge writes stopped")
        future: Future[bool] = Future()
        self._calls.put((future, fn))
        return future

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            future, fn = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as e:  # the caller's future says it (logged on the loop)
                future.set_exception(e)

    def stop(self) -> None:
        """No more writes; those queued still run, then the thread ends."""
        self._stopped = True
        self._calls.put(None)
