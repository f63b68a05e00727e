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
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from otel_eval.store.base import EvaluationStore

_Write = tuple[Future[bool], Callable[[], bool]]
Judgement = dict[str, Any]


class JudgeWrites:
    def __init__(self, store: EvaluationStore, name: str = "otel-eval-judge-writer") -> None:
        self._store = store
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
            stored = self._store.put_judge(trace_id, revision,
                                           shape(judge) if shape is not None else judge,
                                           evaluated_at_ns)
            if after is not None:
                after(stored)
            return stored
        return self.call(write)

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
