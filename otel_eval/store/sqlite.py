"""Stage: store, SQLite (the default). Evaluations in one file per process, keyed by trace id.

The per-trace JSON object is stored whole (it is what the results API returns), with a few
columns pulled out for listing and retention (schema: ``otel_eval.store.migrations``, applied
at open). Writes come from the engine's worker thread, reads from the admin server's threads:
one connection writes (and does the short reads), guarded by a lock; the scans (a page of
``query``, a page of the session list) read on their own connections, a few at most, each from
its WAL snapshot without that lock, so a scan of every body (``detector=`` over 40k rows held
the lock 1 s) does not hold up ``put_many``. ``close`` closes the idle ones.
``put_many`` commits once per batch, and the engine calls waiters (Kafka offsets) only after
that commit. Revision rules: ``otel_eval.store.base``. Every statement's text arguments hold
U+FFFD for NUL, as PostgreSQL's do (``TextConnection``: ``base.stored_args``).
"""

from __future__ import annotations

import contextlib
import json
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from otel_eval.base.results import Evaluation
from otel_eval.store import filters
from otel_eval.store.base import (
    AGENT_HISTORY_MAX_AGE_S,
    AGENT_HISTORY_NAME_CHARS,
    AGENT_HISTORY_PRUNE_EVERY,
    AGENT_HISTORY_ROWS,
    DELETE_ORPHAN_FEEDBACK,
    RETENTION_BATCH,
    RETENTION_IDS,
    ROW_COLUMNS,
    AgentRun,
    Keep,
    Window,
    evaluation_row,
    history_rows,
    in_batches,
    pick_agent,
    prune_history,
    since_chunks,
    stored_args,
)
from otel_eval.store.migrations import check_sqlite, migrate_sqlite
from otel_eval.store.query import EvaluationQuery, Page, first_evaluated
from otel_eval.store.session_rows import KeptSessions, session_writes
from otel_eval.store.session_rows import sql as session_sql
from otel_eval.store.sessions import (
    SessionCursor,
    SessionQuery,
    StoredTurns,
    session_list_sql,
    stored_turns,
    turns_sql,
)

# How long a writer waits for another connection's lock (the issues catalogue shares the file)
# before SQLite raises "database is locked": 5 s by default, too short on a loaded machine.
_BUSY_TIMEOUT_S = 60.0
# Connections that scan at once (beside the writer's); a scan waits for a free one. The admin
# server has a thread per connection: this bounds the open files and the memory, not them.
_READERS = 4
# SQLite's default max_page_count (a file of 4 TiB at 4 KiB pages).
SQLITE_MAX_PAGES = 1_073_741_823


_SINCE = ("SELECT evaluated_at_ns, trace_id, body FROM evaluations WHERE evaluated_at_ns > ? "
          "ORDER BY evaluated_at_ns DESC, trace_id")
_SINCE_AFTER = ("SELECT evaluated_at_ns, trace_id, body FROM evaluations WHERE evaluated_at_ns > ?"
                " AND (evaluated_at_ns < ? OR (evaluated_at_ns = ? AND trace_id > ?))"
                " ORDER BY evaluated_at_ns DESC, trace_id")
# The row a judge or feedback read: trace id, revision, and its evaluation time when given
# (None: any; a replay evaluates a trace at the same revision again)
# A run's row; first_evaluated_at_ns (migration 19), the first evaluation's time, is kept by a
# re-evaluation (NULL kept: one re-evaluated before it was recorded; a row of revision 0
# stored without it, by an earlier release: that evaluation's time, ``first_evaluated``)
_PUT = (f"INSERT OR REPLACE INTO evaluations ({ROW_COLUMNS}, first_evaluated_at_ns) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?, (SELECT CASE WHEN COUNT(*) = 0 THEN ? ELSE "
        f"MAX({first_evaluated()}) END FROM evaluations WHERE trace_id = ?))")
_READ = "trace_id = ? AND revision = ? AND (? IS NULL OR evaluated_at_ns = ?)"


class _TextCursor(sqlite3.Cursor):
    def execute(self, sql: str, parameters: Any = (), /) -> _TextCursor:
        return super().execute(sql, stored_args(parameters))

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> _TextCursor:
        return super().executemany(sql, (stored_args(p) for p in seq_of_parameters))


class TextConnection(sqlite3.Connection):
    """A connection whose statements take their text arguments as PostgreSQL's store does
    (``base.stored_args``: NUL as U+FFFD), so the same input is stored, and found, the same
    in either store (``sqlite3.connect(..., factory=TextConnection)``)."""

    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(factory or _TextCursor)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return super().execute(sql, stored_args(parameters))

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> sqlite3.Cursor:
        return super().executemany(sql, (stored_args(p) for p in seq_of_parameters))


class SqliteStore(KeptSessions):
    """``EvaluationStore`` on a SQLite file (``:memory:``: nothing kept). The constructor
    only constructs: ``open()`` opens the file (``open_store`` does both)."""

    _db: sqlite3.Connection  # from open()
    _session_sql = session_sql("?", "char", "INSTR")

    def __init__(self, path: str, *, clock_ns: Callable[[], int] = time.time_ns,
                 read_only: bool = False, fsync: bool = False) -> None:
        self.path = path
        self.location = path
        self._read_only = read_only  # opened read-only: no migration, every write refused
        self._fsync = fsync  # each commit flushed to disk (``SessionLimits.fsync``)
        self._lock = threading.Lock()
        self._clock_ns = clock_ns  # when agent history rows are seen (tests inject one)
        self._remembered = 0  # remember_agents calls, for the whole-table prune
        self._opened = False
        # idle reading connections, None for one not opened yet (opened on first use);
        # empty: every reader is scanning. None: reads use the writer's (":memory:", where
        # another connection is another database)
        self._readers: queue.LifoQueue[sqlite3.Connection | None] | None = None

    def open(self) -> SqliteStore:
        """Create or open the file and bring its schema up to date (raises
        ``sqlite3.DatabaseError`` / ``OSError``: ``open_store`` says which file); idempotent.
        Read-only: open the file as it is (``mode=ro``: never created, never written) and
        refuse a schema that is not this otel-eval's (``migrations.SchemaError``)."""
        if self._opened:
            return self
        path = self.path
        if path != ":memory:" and not self._read_only:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = self._connect()
        try:
            if self._read_only:
                check_sqlite(self._db)
            else:
                if path != ":memory:":
                    self._db.execute("PRAGMA journal_mode=WAL")
                    self._db.execute(f"PRAGMA synchronous={'FULL' if self._fsync else 'NORMAL'}")
                migrate_sqlite(self._db)
        except BaseException:
            self._db.close()
            raise
        if path != ":memory:":
            self._readers = queue.LifoQueue()
            for _ in range(_READERS):
                self._readers.put(None)
        self._opened = True
        return self

    def _connect(self) -> sqlite3.Connection:
        """A connection to the file; read-only: through a ``mode=ro`` URI (SQLite neither
        creates the file nor writes it) and ``query_only``."""
        target, uri = self.path, False
        if self._read_only:
            target, uri = Path(self.path).absolute().as_uri() + "?mode=ro", True
        db = sqlite3.connect(target, check_same_thread=False, isolation_level=None,
                             timeout=_BUSY_TIMEOUT_S, uri=uri, factory=TextConnection)
        if self._read_only:
            db.execute("PRAGMA query_only=ON")
        return db

    def close(self) -> None:
        with self._lock:
            if self._opened:
                self._db.close()
            readers, self._readers = self._readers, None  # later reads fail as the writer's
            while readers is not None and not readers.empty():
                reader = readers.get_nowait()
                if reader is not None:
                    reader.close()  # one still scanning is closed when it is collected

    @contextlib.contextmanager
    def _scan(self, sql: str, args: Sequence[Any]) -> Iterator[sqlite3.Cursor]:
        """The rows of a read that may scan the table: on a reading connection, without the
        writer's lock (WAL: the read sees the last commit before it began, and a commit
        during it waits for nothing); on the writer's, under the lock, for ``:memory:``."""
        readers = self._readers
        if readers is None:
            with self._lock:
                yield self._db.execute(sql, args)
            return
        reader = readers.get()
        try:
            if reader is None:
                reader = self._connect()
                reader.execute("PRAGMA query_only=ON")
            cur = reader.execute(sql, args)
            try:
                yield cur
            finally:  # a page ends before its last row: end the read (and its snapshot)
                cur.close()
        finally:
            readers.put(reader)

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction on the writer's connection, the caller holding ``_lock``:
        BEGIN IMMEDIATE (take the write lock now: upgrading a read snapshot after another
        connection wrote fails at once, SQLITE_BUSY_SNAPSHOT), COMMIT at the end, ROLLBACK on
        any exception. SQLite rolls a transaction back by itself on some errors (SQLITE_FULL:
        a full disk); a ROLLBACK then fails with "cannot rollback" and would hide why, so it
        is sent only while one is open."""
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                cur.execute("ROLLBACK")
            raise

    def put_many(self, evaluations: Iterable[Evaluation]) -> list[bool]:
        """Store evaluations in one transaction. Returns, per evaluation, whether it superseded
        an earlier one for the same trace id (a re-opened trace or a replay)."""
        rows = [evaluation_row(ev) for ev in evaluations]
        with self._lock, self._write() as cur:
            stored = self._stored_rows(cur, list({row[0] for row in rows}))
            before: list[str | bool | None] = []
            again: list[bool] = []  # the row replaced was this evaluation (``put_many``)
            for row in rows:  # a trace twice in the batch: the second supersedes
                session, stamp = stored.get(row[0], (False, None))
                before.append(session)
                again.append(stamp == (row[1], row[2]))
                stored[row[0]] = (row[10], (row[1], row[2]))
            cur.executemany(_PUT, [(*row, row[2], row[0]) for row in rows])
            writes = session_writes(rows, before)
            cur.executemany(self._session_sql["upsert"], writes.upserts)
            cur.executemany(self._session_sql["gone"], writes.left)
        return [b is not False and not a for b, a in zip(before, again, strict=True)]

    def limit_pages(self, pages: int) -> int:
        """Cap the file at ``pages`` pages (SQLite's ``max_page_count``, on this store's one
        connection; never below the pages it has): a write past it fails as on a full disk
        (``SQLITE_FULL``). Returns the cap now in force. Tests make the store fail with it;
        ``limit_pages(SQLITE_MAX_PAGES)`` lifts it again."""
        with self._lock:
            return int(self._db.execute(f"PRAGMA max_page_count = {int(pages)}").fetchone()[0])

    def page_count(self) -> int:
        with self._lock:
            return int(self._db.execute("PRAGMA page_count").fetchone()[0])

    @staticmethod
    def _stored_rows(cur: sqlite3.Cursor, trace_ids: list[str]
                     ) -> dict[str, tuple[str | bool | None, tuple[int, int] | None]]:
        """The session id (None: none) and (revision, evaluated at) of each of ``trace_ids``
        that has a row: one query per 500 ids, not one per id."""
        out: dict[str, tuple[str | bool | None, tuple[int, int] | None]] = {}
        for i in range(0, len(trace_ids), 500):
            chunk = trace_ids[i:i + 500]
            marks = ",".join("?" * len(chunk))
            out.update((r[0], (r[1], (r[2], r[3]))) for r in cur.execute(
                "SELECT trace_id, session_id, revision, evaluated_at_ns FROM evaluations "
                f"WHERE trace_id IN ({marks})", chunk))
        return out

    # Row writers. The engine writes whole rows (``put_many``: a new evaluation, or a new
    # revision of one); the judge and the feedback each change their own part of the row, for
    # the revision they read, in one UPDATE (SQLite's json_set: no read-modify-write here),
    # so neither can lose the other's work, and neither lands on a newer revision. Feedback
    # writes its outcome's row in the same transaction as its verdict: the last to commit
    # wrote both, so the verdict always says the outcome the feedback table holds.

    def put_judge(self, trace_id: str, revision: int, judge: dict[str, Any],
                  evaluated_at_ns: int | None = None) -> bool:
        """Attach the judge's object to the stored evaluation of ``revision`` (evaluated at
        ``evaluated_at_ns``, when given); False (nothing written) when the trace was
        re-evaluated since (late spans, or a replay at the same revision: that evaluation is
        judged on its own) or is gone."""
        return self._patch(trace_id, revision, evaluated_at_ns,
                           "json_set(body, '$.judge', json(?))", (json.dumps(judge),))

    def put_feedback_and_verdict(self, trace_id: str, revision: int, outcome: str,
                                 now_ns: int, findings: list[dict[str, Any]],
                                 verdict: dict[str, Any],
                                 evaluated_at_ns: int | None = None) -> bool:
        """Record ``outcome`` and replace the findings and verdict of ``revision`` (evaluated
        at ``evaluated_at_ns``, when given; feedback re-judged them with it), in one
        transaction; False, nothing written, when the trace was re-evaluated since or is gone
        (read again and retry)."""
        with self._lock, self._write() as cur:
            cur.execute(
                "UPDATE evaluations SET body = json_set(body, '$.findings', json(?), "
                f"'$.verdict', json(?)), passed = ?, row_version = row_version + 1 "
                f"WHERE {_READ}",
                (json.dumps(findings), json.dumps(verdict), int(bool(verdict["passed"])),
                 trace_id, revision, evaluated_at_ns, evaluated_at_ns))
            written = cur.rowcount == 1
            if written:
                cur.execute("INSERT OR REPLACE INTO feedback VALUES (?,?,?)",
                            (trace_id, outcome, now_ns))
        return written

    def _patch(self, trace_id: str, revision: int, evaluated_at_ns: int | None,
               assignment: str, args: tuple[Any, ...]) -> bool:
        with self._lock:
            cur = self._db.execute(
                f"UPDATE evaluations SET body = {assignment}, row_version = row_version + 1 "
                f"WHERE {_READ}",
                (*args, trace_id, revision, evaluated_at_ns, evaluated_at_ns))
        return cur.rowcount == 1

    def get(self, trace_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT body FROM evaluations WHERE trace_id = ?",
                                   (trace_id,)).fetchone()
        return None if row is None else json.loads(row[0])

    def get_stamped(self, trace_id: str) -> tuple[dict[str, Any], int] | None:
        with self._lock:
            row = self._db.execute("SELECT body, evaluated_at_ns FROM evaluations "
                                   "WHERE trace_id = ?", (trace_id,)).fetchone()
        return None if row is None else (json.loads(row[0]), int(row[1]))

    def get_versioned(self, trace_id: str) -> tuple[dict[str, Any], int, int] | None:
        with self._lock:
            row = self._db.execute("SELECT body, evaluated_at_ns, row_version FROM evaluations "
                                   "WHERE trace_id = ?", (trace_id,)).fetchone()
        return None if row is None else (json.loads(row[0]), int(row[1]), int(row[2]))

    def stamp(self, trace_id: str) -> tuple[int, int] | None:
        """(revision, evaluated_at_ns) of the stored evaluation, or None: lets a worker that
        re-evaluates the traces of a dead one tell that worker's commit from an older row."""
        with self._lock:
            row = self._db.execute("SELECT revision, evaluated_at_ns FROM evaluations "
                                   "WHERE trace_id = ?", (trace_id,)).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def latest(self, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT body FROM evaluations ORDER BY evaluated_at_ns DESC, trace_id LIMIT ?",
                (limit,)).fetchall()
        return [json.loads(r[0]) for r in rows]

    def query(self, q: EvaluationQuery) -> Page:
        """One page of evaluations matching ``q``, newest first (see ``otel_eval.store.query``)."""
        sql, args = filters.page_sql(q, filters.SQLITE)
        end = None
        window = filters.window_sql(q, filters.SQLITE)
        if window is not None:  # with detector: the rows a page looks at end there
            with self._scan(*window) as rows:
                end = filters.window_end(rows)
            sql, args = filters.page_sql(q, filters.SQLITE, end)
        with self._scan(sql, args) as rows:  # read one by one: a page cut by its size reads
            return filters.page(rows, q.limit, q.max_bytes, end)  # no more

    def since(self, evaluated_after_ns: int, limit: int = 100_000,
              keep: Keep | None = None) -> Window:
        """Evaluations stored after a time, oldest first; past ``limit`` the newest ``limit``
        (issue clustering reads its window with this), a chunk of rows at a time (the lock
        is let go between chunks); ``keep`` as in ``EvaluationStore.since``."""
        def read(after_ns: int, position: tuple[int, str] | None, n: int) -> list[Any]:
            sql, args = _SINCE, list[Any]([after_ns])
            if position is not None:
                sql, args = _SINCE_AFTER, [after_ns, position[0], position[0], position[1]]
            with self._lock:
                return self._db.execute(sql + " LIMIT ?", [*args, n]).fetchall()
        return since_chunks(read, evaluated_after_ns, limit, keep)

    def session_ids(self, q: SessionQuery, after: SessionCursor | None,
                    n: int) -> list[tuple[str, int]]:
        sql, args = session_list_sql(q, "?", after, n)
        with self._scan(sql, args) as rows:
            return [(str(r[0]), int(r[1])) for r in rows.fetchall()]

    def session_turns(self, session_id: str, limit: int,
                      max_chars: int = 1 << 62) -> StoredTurns:
        with self._lock:  # one session's turns (indexed), and their count as of the same read
            rows = self._db.execute(turns_sql("?"), (session_id, session_id, limit, max_chars,
                                                     session_id, session_id)).fetchall()
        return stored_turns(rows)

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])

    def put_feedback(self, trace_id: str, outcome: str, now_ns: int) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO feedback VALUES (?,?,?)",
                             (trace_id, outcome, now_ns))

    def owe_results(self, trace_id: str, now_ns: int) -> None:
        with self._lock, self._write() as cur:
            cur.execute("INSERT OR REPLACE INTO results_owed VALUES (?,?)", (trace_id, now_ns))

    def results_paid(self, trace_id: str, owed_at_ns: int) -> None:
        with self._lock, self._write() as cur:
            cur.execute("DELETE FROM results_owed WHERE trace_id = ? AND owed_at_ns = ?",
                        (trace_id, owed_at_ns))

    def results_owed(self, limit: int) -> list[tuple[str, int]]:
        with self._lock:
            rows = self._db.execute("SELECT trace_id, owed_at_ns FROM results_owed "
                                    "ORDER BY owed_at_ns LIMIT ?", (limit,)).fetchall()
        return [(str(t), int(n)) for t, n in rows]

    def feedback(self, trace_id: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT outcome FROM feedback WHERE trace_id = ?",
                                   (trace_id,)).fetchone()
        return None if row is None else str(row[0])

    def feedback_many(self, trace_ids: Collection[str]) -> dict[str, str]:
        return self._by_trace_ids("SELECT trace_id, outcome FROM feedback WHERE", trace_ids)

    def feedback_version(self) -> tuple[int, ...]:
        with self._scan(filters.FEEDBACK_VERSION, ()) as rows:
            return filters.feedback_version(rows.fetchone())

    def labelled(self, limit: int) -> list[tuple[str, dict[str, Any]]]:
        with self._scan(filters.LABELLED_SQLITE, (limit,)) as rows:  # a reader: no writer waits
            return [filters.labelled_run(r) for r in rows]

    def content_digests(self, trace_ids: Collection[str]) -> dict[str, str]:
        return self._by_trace_ids("SELECT trace_id, COALESCE(content_digest, '') FROM "
                                  "evaluations WHERE", trace_ids)

    def stored_span_ids(self, trace_ids: Collection[str]) -> dict[str, frozenset[str]]:
        held = self._by_trace_ids("SELECT trace_id, span_ids FROM evaluations WHERE span_ids "
                                  "IS NOT NULL AND", trace_ids)
        return {tid: frozenset(ids.split()) for tid, ids in held.items()}

    def _by_trace_ids(self, select_where: str, trace_ids: Collection[str]) -> dict[str, str]:
        """``select_where`` (trace_id, value) rows ``AND trace_id IN`` the ids, 500 ids a
        query (under SQLite's bound on host parameters)."""
        ids = list(trace_ids)
        out: dict[str, str] = {}
        with self._lock:
            for i in range(0, len(ids), 500):
                chunk = ids[i:i + 500]
                out.update(self._db.execute(
                    f"{select_where} trace_id IN ({','.join('?' * len(chunk))})",
                    chunk).fetchall())
        return out

    def delete_older_than(self, cutoff_ns: int, batch: int = RETENTION_BATCH,
                          stop: Callable[[], bool] = lambda: False) -> int:
        """``EvaluationStore.delete_older_than``: one write transaction per ``batch`` (the
        lock let go between them: the engine's and the worker processes' writes go on)."""
        def evaluations() -> int:
            with self._lock, self._write() as cur:
                ids = [r[0] for r in cur.execute(RETENTION_IDS.format(m="?"),
                                                 (cutoff_ns, batch)).fetchall()]
                if ids:
                    marks = ",".join("?" * len(ids))
                    cur.execute(f"DELETE FROM evaluations WHERE trace_id IN ({marks})", ids)
                    cur.execute(f"DELETE FROM feedback WHERE trace_id IN ({marks})", ids)
            return len(ids)

        def sessions() -> int:
            with self._lock, self._write() as cur:
                return int(cur.execute(self._session_sql["delete"], (cutoff_ns, batch)).rowcount)

        def orphans() -> int:
            with self._lock, self._write() as cur:
                cur.execute(DELETE_ORPHAN_FEEDBACK)
            return 0
        return in_batches(evaluations, sessions, orphans, batch, stop)

    def _session_exec(self, statement: str, args: Sequence[Any]) -> tuple[list[Any], int]:
        with self._lock:
            cur = self._db.execute(statement, tuple(args))
            return cur.fetchall(), cur.rowcount

    # The agent history (bounds: ``otel_eval.store.base``).

    def remember_agents(self, runs: Sequence[AgentRun]) -> dict[str, int]:
        now = self._clock_ns()
        rows = history_rows(runs, now)
        if not rows:
            return {}
        services = sorted({r[0] for r in rows})
        with self._lock:
            self._remembered += 1
            whole = (self._remembered - 1) % AGENT_HISTORY_PRUNE_EVERY == 0
            with self._write() as cur:
                cur.executemany(
                    "INSERT INTO agent_history VALUES (?,?,?,?) ON CONFLICT "
                    "(service, fingerprint, agent) DO UPDATE SET seen_ns = "
                    "MAX(agent_history.seen_ns, excluded.seen_ns)",  # the last seen, as PG
                    rows)
                return prune_history(cur, "?", "rowid", services, now, whole,
                                     AGENT_HISTORY_ROWS)

    def recall_agent(self, service: str, fingerprints: Sequence[str]) -> str | None:
        fps = list(fingerprints)
        if not fps:
            return None
        oldest = self._clock_ns() - AGENT_HISTORY_MAX_AGE_S * 10**9
        with self._lock:
            rows = self._db.execute(
                "SELECT fingerprint, agent FROM agent_history WHERE service = ? AND seen_ns "
                f">= ? AND fingerprint IN ({','.join('?' * len(fps))})",
                (service[:AGENT_HISTORY_NAME_CHARS], oldest, *fps)).fetchall()
        return pick_agent(rows, fps)
