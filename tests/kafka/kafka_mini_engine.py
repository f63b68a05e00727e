"""A minimal stand-in for ``otel_eval.assemble.engine.Engine`` + SQLite store, for Kafka
worker tests.

Same contract as ``Engine.submit``: spans in, ``on_stored`` called once (from a worker thread)
when every trace the spans belong to has been stored. A trace is complete when its root span
and ``test.span_count`` spans have arrived. Stored rows are keyed by trace id and a
re-evaluation supersedes (``stores`` counts how often a trace was written: replays show > 1).
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable

from kafka_traces import SPAN_COUNT_ATTR

# the engine's own result and barrier types: the stand-in answers exactly as Engine.submit does
from otel_eval.assemble.admission import Admission
from otel_eval.assemble.engine import _Barrier
from otel_eval.base.model import Span


class MiniEngine:
    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self._lock = threading.Lock()
        self._open: dict[str, list[Span]] = {}
        self._waiters: dict[str, list[_Barrier]] = {}
        self._work: queue.Queue[tuple[str, list[Span]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="mini-engine", daemon=True)
        with sqlite3.connect(db_path) as db:
            db.execute("CREATE TABLE IF NOT EXISTS evaluations (trace_id TEXT PRIMARY KEY,"
                       " spans INTEGER NOT NULL, stores INTEGER NOT NULL)")
        self._thread.start()

    def submit(self, spans: list[Span], source: str = "kafka",
               on_stored: Callable[[], None] | None = None, *,
               signal: str = "traces") -> Admission:
        with self._lock:
            touched = {s.trace_id for s in spans}
            barrier = _Barrier(on_stored) if on_stored else None
            for s in spans:
                self._open.setdefault(s.trace_id, []).append(s)
            for tid in touched:
                if barrier:
                    self._waiters.setdefault(tid, []).append(barrier)
                trace = self._open[tid]
                roots = [s for s in trace if s.is_entry]
                if roots and len(trace) >= int(roots[0].attributes.get(SPAN_COUNT_ATTR, 1)):
                    self._work.put((tid, self._open.pop(tid)))
        if barrier:  # after counting, as the engine does (no spans: called at once)
            barrier.arm(len(touched))
        return Admission(accepted=len(spans))

    def _run(self) -> None:
        db = sqlite3.connect(self.db_path)
        while (item := self._work.get()) is not None:
            batch = [item]
            while not self._work.empty() and len(batch) < 256:
                nxt = self._work.get()
                if nxt is None:
                    self._work.put(None)
                    break
                batch.append(nxt)
            with db:
                db.executemany(
                    "INSERT INTO evaluations VALUES (?, ?, 1) ON CONFLICT(trace_id) DO UPDATE"
                    " SET spans = excluded.spans, stores = stores + 1",
                    [(tid, len(spans)) for tid, spans in batch])
            for tid, _ in batch:
                with self._lock:
                    waiters = self._waiters.pop(tid, [])
                for b in waiters:
                    b.done()
        db.close()

    def close(self) -> None:
        self._work.put(None)
        self._thread.join()
