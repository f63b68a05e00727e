"""The judge's pending work, kept across a crash (issue 33: kill -9 lost 190 of 393 judge jobs
with no mark and no count).

The judge queue lives in memory. ``PendingJournal`` keeps, in table ``judge_pending`` of the
local SQLite file the rubric cache uses, the (trace id, revision) of each evaluation queued for
the judge and not yet stored with its judgement or its skip. It is written only from the judge
stage's writer thread, in order: an entry is added before the judgement's own write is made,
and removed right after it, or, when the judgement's events go out (``export.events_endpoint``)
or its results record (``kafka.results_topic``), once the events sink and the results
publisher have delivered them or dropped them for good (their queues are memory).
What a start finds there was queued by a process that died before storing it, or before its
events and results record left: the stage stores the first as skipped ``restart`` (counted in
``otel_eval_judge_skipped_total{reason="restart"}``) instead of leaving the row unmarked, and
sends the stored judgement's events and results record again for the second (at least once).
The entry keeps the span the run's events are attached to (``run_span_id``), which the
stored row does not ("" in an entry an older version wrote: the stage reads it from the
stored steps, as ``results.stored_run_span_id``), and the evaluation time of the evaluation
it was queued for (``evaluated_at_ns``): a row of the same revision evaluated at another time
is a later evaluation (a run re-opened by late spans, replayed whole at revision 0 again by
the next start, or by another worker of the fleet), whose judge is its evaluator's, not this
entry's (None: an entry an older version wrote).

The entry is written by the writer thread after the submit, behind the judge writes queued
before it: a kill in that gap (milliseconds; longer while the store holds the writer) still
loses the mark of the traces queued in it.

A session judgement under way is kept the same way, in table ``judge_pending_sessions``
(the session's store key and the completion judged, counted from 1), from its start until
its judgement or skip is written onto that completion: a start that finds one stores it
skipped ``restart`` onto the completion when it has no judge yet, and counts it (a completion
is judged once: before, a kill during its call left it with no judge at all).

Not re-queued: the judge reads the trajectory as it was evaluated (every span, before
``bound`` cut the stored object), which the store does not keep.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable

_DELETE = "DELETE FROM judge_pending WHERE trace_id = ? AND revision = ?"


class PendingJournal:
    SCHEMA = """CREATE TABLE IF NOT EXISTS judge_pending (
        trace_id TEXT NOT NULL,
        revision INTEGER NOT NULL,
        queued_at REAL NOT NULL,   -- unix seconds
        run_span_id TEXT NOT NULL DEFAULT '',
        evaluated_at_ns INTEGER,   -- of the evaluation queued; NULL: written by an older version
        PRIMARY KEY (trace_id, revision)
    )"""

    SESSIONS = """CREATE TABLE IF NOT EXISTS judge_pending_sessions (
        session_key TEXT NOT NULL,
        completions INTEGER NOT NULL,  -- the completion judged, 1 the first
        queued_at REAL NOT NULL,       -- unix seconds
        PRIMARY KEY (session_key, completions)
    )"""

    def __init__(self, path: str, wall_clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.wall_clock = wall_clock
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def open(self) -> PendingJournal:
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=60.0)
        with self._db:
            self._db.execute(self.SCHEMA)
            self._db.execute(self.SESSIONS)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(judge_pending)")}
            if "run_span_id" not in columns:  # a journal an older version wrote
                self._db.execute("ALTER TABLE judge_pending ADD COLUMN run_span_id TEXT "
                                 "NOT NULL DEFAULT ''")
            if "evaluated_at_ns" not in columns:
                self._db.execute("ALTER TABLE judge_pending ADD COLUMN evaluated_at_ns INTEGER")
        return self

    # Each call is a no-op once closed: a write finishing past the shutdown deadline leaves its
    # entry behind, so the stage marks an entry only when its row has no judge object yet.

    def add(self, trace_id: str, revision: int, run_span_id: str = "",
            evaluated_at_ns: int | None = None) -> bool:
        with self._lock:
            if self._db is not None:
                with self._db:
                    self._db.execute("INSERT OR REPLACE INTO judge_pending (trace_id, "
                                     "revision, queued_at, run_span_id, evaluated_at_ns) "
                                     "VALUES (?, ?, ?, ?, ?)",
                                     (trace_id, revision, self.wall_clock(), run_span_id,
                                      evaluated_at_ns))
        return True

    def remove(self, trace_id: str, revision: int) -> None:
        with self._lock:
            if self._db is not None:
                with self._db:
                    self._db.execute(_DELETE, (trace_id, revision))

    def delivered(self, entries: list[tuple[str, int]]) -> None:
        """The entries whose judgements' events the sink delivered (or dropped for good), in
        one transaction; also once closed: the events sink flushes after the judge stage
        stopped, and an entry left would send them again at the next start."""
        with self._lock:
            if self._db is None and self.path == ":memory:":
                return  # gone with its connection
            db = self._db if self._db is not None else sqlite3.connect(self.path, timeout=60.0)
            try:
                with db:
                    db.executemany(_DELETE, entries)
            finally:
                if db is not self._db:
                    db.close()

    def pending(self) -> list[tuple[str, int, str, int | None]]:
        """Every entry (trace id, revision, run span id, evaluated at ns or None), oldest
        first (the caller marks each, then removes it)."""
        with self._lock:
            if self._db is None:
                return []
            rows = self._db.execute("SELECT trace_id, revision, run_span_id, evaluated_at_ns "
                                    "FROM judge_pending ORDER BY queued_at").fetchall()
        return [(str(t), int(r), str(s), None if e is None else int(e)) for t, r, s, e in rows]

    def add_session(self, key: str, completions: int) -> None:
        with self._lock:
            if self._db is not None:
                with self._db:
                    self._db.execute("INSERT OR REPLACE INTO judge_pending_sessions "
                                     "(session_key, completions, queued_at) VALUES (?, ?, ?)",
                                     (key, completions, self.wall_clock()))

    def remove_session(self, key: str, completions: int) -> None:
        with self._lock:
            if self._db is not None:
                with self._db:
                    self._db.execute("DELETE FROM judge_pending_sessions WHERE session_key = ? "
                                     "AND completions = ?", (key, completions))

    def pending_sessions(self) -> list[tuple[str, int]]:
        """Every session judgement entry (store key, completion), oldest first."""
        with self._lock:
            if self._db is None:
                return []
            rows = self._db.execute("SELECT session_key, completions FROM "
                                    "judge_pending_sessions ORDER BY queued_at").fetchall()
        return [(str(k), int(c)) for k, c in rows]

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
