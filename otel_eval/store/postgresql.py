"""Stage: store, PostgreSQL (``store.url``). One database for the fleet, keyed by trace id.

Every worker (Kafka consumers, replicas, ``serve --workers`` processes) opens its own
connection from the URL and writes there, so the results API of any of them shows every
trace, feedback reaches a trace wherever it was evaluated, and the issues job (one worker at a
time, ``otel_eval.outputs.issues.catalogue``) reads the fleet's critiques. Same schema as SQLite
(``otel_eval.store.migrations``, applied at open under an advisory lock) and the same
revision rules (``otel_eval.store.base``):

- ``feedback_many`` (the engine's read of known outcomes): one query per batch.
- ``put_many``: one transaction per batch, ``INSERT ... ON CONFLICT DO UPDATE`` per row in
  psycopg's pipeline mode (one round trip per batch, not per row); whether a row superseded
  one comes back from the same statement (``xmax``: set on a row version an update wrote).
- ``put_judge`` / ``put_feedback_and_verdict``: read the row of that revision ``FOR UPDATE``,
  change their part (feedback: and write its outcome's row), write it back, in one
  transaction: the row lock serializes them (and the engine's upsert) across processes, so
  none loses another's work; a row re-evaluated meanwhile no longer matches the revision and
  nothing is written.

Text cannot hold NUL in PostgreSQL: the pulled-out columns and text arguments get U+FFFD
instead, as in SQLite (``base.stored_args``; the body is JSON with ``\\u0000`` escapes,
unchanged). One connection per store, guarded by a lock (the engine thread writes, admin
threads read); a broken connection, or one a write was refused on
as read-only (a session opened in a failover's read-only window stays so), is reopened on
the next call, and the engine's calls (``put_many`` and its reads: ``stamp``,
``get_stamped`` and ``recall_agent`` too) are tried once more at once on a new
connection (a session the server ended) before raising: then the engine keeps the batch
and retries it with back-off while the receivers throttle
(``otel_eval.assemble.store_health``), instead of holding its thread here. psycopg is
imported here only, so a SQLite deployment never loads it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Generator, Iterable, Sequence
from contextlib import closing
from typing import Any, TypeVar, cast

import psycopg
import psycopg.conninfo
import psycopg.errors
import psycopg.sql

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
    SessionLimits,
    Window,
    evaluation_row,
    history_rows,
    in_batches,
    pick_agent,
    prune_history,
    redact_url,
    since_chunks,
)
from otel_eval.store.base import stored_args as _args
from otel_eval.store.base import stored_text as _text
from otel_eval.store.failures import TIMEOUT_STATES
from otel_eval.store.migrations import check_postgresql, migrate_postgresql
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

log = logging.getLogger(__name__)

_SINCE = ("SELECT evaluated_at_ns, trace_id, body FROM evaluations WHERE evaluated_at_ns > %s "
          "ORDER BY evaluated_at_ns DESC, trace_id")
_SINCE_AFTER = ("SELECT evaluated_at_ns, trace_id, body FROM evaluations WHERE evaluated_at_ns > "
                "%s AND (evaluated_at_ns < %s OR (evaluated_at_ns = %s AND trace_id > %s))"
                " ORDER BY evaluated_at_ns DESC, trace_id")

T = TypeVar("T")
_SESSIONS = session_sql("%s", "chr", "STRPOS")

# first_evaluated_at_ns (migration 19) is set by the insert: a re-evaluation keeps it (or, for
# a row an earlier release's worker stored at revision 0 without it, that evaluation's time)
_UPSERT = f"""INSERT INTO evaluations AS e ({ROW_COLUMNS}, first_evaluated_at_ns)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (trace_id) DO UPDATE SET revision = excluded.revision,
    evaluated_at_ns = excluded.evaluated_at_ns, service = excluded.service,
    agent = excluded.agent, task_id = excluded.task_id, status = excluded.status,
    passed = excluded.passed, body = excluded.body, content_digest = excluded.content_digest,
    session_id = excluded.session_id, started_at_ns = excluded.started_at_ns,
    span_ids = excluded.span_ids, first_evaluated_at_ns = {first_evaluated("e.")},
    row_version = 0
RETURNING NOT (xmax = 0),
    (SELECT o.session_id FROM evaluations o WHERE o.trace_id = e.trace_id),
    (SELECT o.revision = e.revision AND o.evaluated_at_ns = e.evaluated_at_ns
     FROM evaluations o WHERE o.trace_id = e.trace_id)"""
# the subqueries see the statement's snapshot: the replaced row's session id (a trace twice in
# a batch: its first statement's, as SQLite's put_many), and whether it was this evaluation
# itself (``EvaluationStore.put_many``: a batch written again after its commit's answer was
# lost supersedes nothing)

# A batch of retention: the oldest expired evaluations (``base.RETENTION_IDS``)
_RETENTION_DELETE = (f"DELETE FROM evaluations WHERE trace_id IN "
                     f"({RETENTION_IDS.format(m='%s')}) RETURNING trace_id")

_PUT_FEEDBACK = ("INSERT INTO feedback VALUES (%s, %s, %s) ON CONFLICT (trace_id) DO UPDATE SET "
                 "outcome = excluded.outcome, received_at_ns = excluded.received_at_ns")

# Seconds before each attempt of the engine's calls: the first, and one retry, at once (a
# server that stays away is the engine's back-off to wait out: store_health). Before, 15 s of
# pauses here held the engine's thread while the receivers kept acknowledging.
_RETRY_BACKOFF_S = (0.0, 0.0)
CONNECT_TIMEOUT_S = 10


# How long ``close`` waits for a call in progress before cancelling it on the server (a
# write blocked by another client's lock must not hold SIGTERM: the spool keeps its batch).
CLOSE_WAIT_S = 1.0


def connect(url: str, session: SessionLimits | None = None, *,
            read_only: bool = False) -> psycopg.Connection[Any]:
    """An autocommit connection (transactions are explicit) with a bounded connect wait, its
    statements and lock waits bounded by ``session`` (``statement_timeout``,
    ``lock_timeout``: a timeout is a refused write, ``store.failures``); ``read_only``: every
    transaction of the session read-only (``default_transaction_read_only``); the server
    probes the session's socket (``KEEPALIVES``), and so does our end (``_DEFAULTS``)."""
    conn = psycopg.connect(url, autocommit=True, **_defaults(url))
    try:
        conn.execute(_PROBED, ([name for name, _ in KEEPALIVES],
                               [str(value) for _, value in KEEPALIVES]))
        if read_only:
            conn.execute("SET default_transaction_read_only = on")
        if session is not None:
            limit(conn, session)
    except BaseException:
        conn.close()
        raise
    return conn


# How the server probes each session of ours, unless the operator set it (the URL's
# ``options``, PGOPTIONS, the server's configuration, a role's or database's): a client whose
# host disappeared (no FIN, no RST: a node lost, a partition) left its session idle on the
# server until the OS's keepalive time (Linux: 7200 s, then 9 probes 75 s apart), and with it
# the issues job's advisory lock (outputs/issues/catalogue.py), its row locks and its slot:
# for 2 h 11 min no worker ran the job, and no instance paged. Now it ends about 2 minutes
# after the host went (60 s idle, then 6 probes 10 s apart; tcp_user_timeout bounds an answer
# the server is sending as long, ms). These are the server's GUCs for that session's socket;
# libpq's keepalives_* act on our end only (a server that went away: _DEFAULTS).
KEEPALIVES = (("tcp_keepalives_idle", 60), ("tcp_keepalives_interval", 10),
              ("tcp_keepalives_count", 6), ("tcp_user_timeout", 120_000))
# one round trip; a setting the server lacks (tcp_user_timeout before PostgreSQL 12) is left
_PROBED = ("SELECT set_config(s.name, d.value, false) FROM unnest(%s::text[], %s::text[]) "
           "AS d(name, value) JOIN pg_settings s ON s.name = d.name WHERE s.source = 'default'")

# libpq parameters the store sets when neither the URL nor their PG* variable does (a
# keyword argument of psycopg.connect replaces the URL's: the URL's connect_timeout, which
# docs/store.md says applies, was ignored). Our end probes the server as the server probes
# us (KEEPALIVES' figures; libpq's names, no variable): statement_timeout is the server's,
# so a server whose host vanished left a call waiting on the OS (a statement running:
# keepalives after 7200 s; a request sent: ~15 min of retransmissions) with the store's lock
# and the engine's thread held. Now it fails as a lost connection about 2 minutes later.
_DEFAULTS: tuple[tuple[str, str | None, Any], ...] = (
    ("connect_timeout", "PGCONNECT_TIMEOUT", CONNECT_TIMEOUT_S),
    ("application_name", "PGAPPNAME", "otel-eval"), ("keepalives", None, 1),
    *((name.replace("tcp_keepalives", "keepalives"), None, value)
      for name, value in KEEPALIVES))


def _defaults(url: str) -> dict[str, Any]:
    given = psycopg.conninfo.conninfo_to_dict(url)
    return {name: value for name, variable, value in _DEFAULTS
            if name not in given and not (variable and os.environ.get(variable))}


def limit(conn: psycopg.Connection[Any], session: SessionLimits) -> None:
    """``SET statement_timeout, lock_timeout`` of the session (milliseconds; 0: none)."""
    for name, seconds in (("statement_timeout", session.statement_timeout_s),
                          ("lock_timeout", session.lock_timeout_s)):
        conn.execute(psycopg.sql.SQL("SET {} = {}").format(
            psycopg.sql.Identifier(name), psycopg.sql.Literal(f"{seconds * 1000:.0f}")))


def _timed_out(error: BaseException) -> bool:
    return getattr(error, "sqlstate", None) in TIMEOUT_STATES


class PostgresStore(KeptSessions):
    """``EvaluationStore`` on a PostgreSQL database (libpq URL; PG* environment applies)."""

    _session_sql = _SESSIONS

    def __init__(self, url: str, *, sleep: Callable[[float], None] = time.sleep,
                 clock_ns: Callable[[], int] = time.time_ns,
                 session: SessionLimits | None = None, read_only: bool = False) -> None:
        self.location = redact_url(url)
        self._url = url
        self._read_only = read_only  # read-only sessions: no migration, every write refused
        self._session = session or SessionLimits()
        self._sleep = sleep
        self._clock_ns = clock_ns  # when agent history rows are seen (tests inject one)
        self._remembered = 0  # remember_agents calls, for the whole-table prune
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None  # open() connects
        self._closed = False  # close() ran: no call reconnects

    def open(self) -> PostgresStore:
        """Connect and bring the schema up to date (raises what ``connect`` raises).
        Read-only: refuse a schema that is not this otel-eval's (``migrations.SchemaError``)."""
        with self._lock:
            conn = self._connection()
            if self._read_only:
                try:
                    check_postgresql(conn)
                except BaseException:
                    self._drop()
                    raise
                return self
            # unlimited while migrating: building an index may take long, and the advisory
            # lock waits for another process's migration
            limit(conn, SessionLimits(0, 0))
            migrate_postgresql(conn)
            limit(conn, self._session)
        return self

    def close(self) -> None:
        """Close the connection; a call still running after ``CLOSE_WAIT_S`` (blocked by
        another client's lock) is cancelled on the server and closes the connection itself
        when it ends. Calls after this raise ``psycopg.InterfaceError``: none reconnects."""
        self._closed = True
        if not self._lock.acquire(timeout=CLOSE_WAIT_S):
            conn = self._conn
            if conn is not None:
                log.warning("store %s: a call is still running at close; cancelling it",
                            self.location)
                conn.cancel_safe(timeout=CLOSE_WAIT_S)
            return
        try:
            self._drop()
        finally:
            self._lock.release()

    def _drop(self) -> None:  # lock held
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> psycopg.Connection[Any]:  # lock held
        if self._closed:
            raise psycopg.InterfaceError(f"store {self.location} is closed")
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._drop()
            self._conn = connect(self._url, self._session, read_only=self._read_only)
        return self._conn

    def _run(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        with self._lock:
            try:
                return work(self._connection())
            except psycopg.OperationalError as e:  # the session may be gone: the next call
                if not _timed_out(e):  # reopens; a timeout leaves it as it was
                    self._drop()
                raise
            except psycopg.errors.ReadOnlySqlTransaction:  # a session opened in a read-only
                self._drop()  # window stays so: the next call opens one on what the URL
                raise  # reaches now (the promoted server)
            finally:
                if self._closed:  # close() gave up waiting for this call: it closes
                    self._drop()

    # -- writers --------------------------------------------------------------------------

    def _retrying(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``work`` for the engine: after a lost connection, again on a new one (backing off)."""
        for attempt, pause in enumerate(_RETRY_BACKOFF_S):
            if pause:
                self._sleep(pause)
            try:
                return self._run(work)
            except psycopg.OperationalError as e:  # connection lost: reopen, try again
                if attempt == len(_RETRY_BACKOFF_S) - 1 or _timed_out(e):
                    raise  # a timeout again would only wait as long again
                log.warning("store call failed (%s); retrying on a new connection", e)
        raise AssertionError("unreachable")

    def put_many(self, evaluations: Iterable[Evaluation]) -> list[bool]:
        """Store evaluations in one transaction. Returns, per evaluation, whether it superseded
        an earlier one for the same trace id (a re-opened trace or a replay)."""
        rows = [_args(evaluation_row(ev)) for ev in evaluations]
        return self._retrying(lambda conn: _upsert(conn, rows)) if rows else []

    def feedback_many(self, trace_ids: Collection[str]) -> dict[str, str]:
        ids = [_text(t) for t in trace_ids]
        if not ids:
            return {}
        rows = self._retrying(lambda conn: conn.execute(
            "SELECT trace_id, outcome FROM feedback WHERE trace_id = ANY(%s)", (ids,)
        ).fetchall())
        return {str(r[0]): str(r[1]) for r in rows}

    def feedback_version(self) -> tuple[int, ...]:
        # no parameters: its % is the modulo, not a placeholder
        return filters.feedback_version(self._run(
            lambda conn: conn.execute(filters.FEEDBACK_VERSION).fetchone()))

    def labelled(self, limit: int) -> list[tuple[str, dict[str, Any]]]:
        return [filters.labelled_run(r) for r in self._rows(filters.LABELLED_POSTGRESQL,
                                                            (limit,))]

    def content_digests(self, trace_ids: Collection[str]) -> dict[str, str]:
        ids = [_text(t) for t in trace_ids]
        if not ids:
            return {}
        rows = self._retrying(lambda conn: conn.execute(
            "SELECT trace_id, COALESCE(content_digest, '') FROM evaluations "
            "WHERE trace_id = ANY(%s)", (ids,)).fetchall())
        return {str(r[0]): str(r[1]) for r in rows}

    def stored_span_ids(self, trace_ids: Collection[str]) -> dict[str, frozenset[str]]:
        ids = [_text(t) for t in trace_ids]
        if not ids:
            return {}
        rows = self._retrying(lambda conn: conn.execute(
            "SELECT trace_id, span_ids FROM evaluations "
            "WHERE span_ids IS NOT NULL AND trace_id = ANY(%s)", (ids,)).fetchall())
        return {str(r[0]): frozenset(str(r[1]).split()) for r in rows}

    def put_judge(self, trace_id: str, revision: int, judge: dict[str, Any],
                  evaluated_at_ns: int | None = None) -> bool:
        """Attach the judge's object to the stored evaluation of ``revision`` (evaluated at
        ``evaluated_at_ns``, when given); False (nothing written) when the trace was
        re-evaluated since (by another worker too, at the same revision) or is gone."""
        def change(body: dict[str, Any]) -> None:
            body["judge"] = judge
        return self._patch(trace_id, (revision, evaluated_at_ns), change, None)

    def put_feedback_and_verdict(self, trace_id: str, revision: int, outcome: str,
                                 now_ns: int, findings: list[dict[str, Any]],
                                 verdict: dict[str, Any],
                                 evaluated_at_ns: int | None = None) -> bool:
        """Record ``outcome`` and replace the findings and verdict of ``revision`` (evaluated
        at ``evaluated_at_ns``, when given; feedback re-judged them with it), in one
        transaction; False, nothing written, when the trace was re-evaluated since or is gone
        (read again and retry)."""
        def change(body: dict[str, Any]) -> None:
            body["findings"] = findings
            body["verdict"] = verdict
        return self._patch(trace_id, (revision, evaluated_at_ns), change,
                           bool(verdict["passed"]), feedback=(outcome, now_ns))

    def _patch(self, trace_id: str, read: tuple[int, int | None],
               change: Callable[[dict[str, Any]], None], passed: bool | None,
               feedback: tuple[str, int] | None = None) -> bool:
        """``change`` the body of the evaluation ``read`` (revision, evaluated at; None: any
        time) under its row lock; with ``feedback`` (outcome, received at), its row written
        in the same transaction, after the row lock: two feedbacks for one trace commit one
        after the other, each with its verdict."""
        revision, at = read

        def work(conn: psycopg.Connection[Any]) -> bool:
            with conn.transaction():
                row = conn.execute("SELECT body, passed FROM evaluations WHERE trace_id = %s "
                                   "AND revision = %s AND (%s::bigint IS NULL OR "
                                   "evaluated_at_ns = %s) FOR UPDATE",
                                   (_text(trace_id), revision, at, at)).fetchone()
                if row is None:
                    return False
                body = json.loads(row[0])
                change(body)
                conn.execute("UPDATE evaluations SET body = %s, passed = %s, "
                             "row_version = row_version + 1 WHERE trace_id = %s",
                             (json.dumps(body), row[1] if passed is None else passed,
                              _text(trace_id)))
                if feedback is not None:
                    conn.execute(_PUT_FEEDBACK, _args((trace_id, *feedback)))
            return True
        return self._run(work)

    def put_feedback(self, trace_id: str, outcome: str, now_ns: int) -> None:
        self._run(lambda conn: conn.execute(_PUT_FEEDBACK, _args((trace_id, outcome, now_ns))))

    def delete_older_than(self, cutoff_ns: int, batch: int = RETENTION_BATCH,
                          stop: Callable[[], bool] = lambda: False) -> int:
        """``EvaluationStore.delete_older_than``: one transaction per ``batch``, so each
        statement is short (``statement_timeout`` bounds every one: a single DELETE of a
        large backlog could outrun it at each pass and delete nothing)."""
        def evaluations(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction():
                ids = [r[0] for r in conn.execute(_RETENTION_DELETE,
                                                  (cutoff_ns, batch)).fetchall()]
                if ids:
                    conn.execute("DELETE FROM feedback WHERE trace_id = ANY(%s)", (ids,))
                return len(ids)

        def sessions(conn: psycopg.Connection[Any]) -> int:
            return int(conn.execute(_SESSIONS["delete"], (cutoff_ns, batch)).rowcount)

        def orphans(conn: psycopg.Connection[Any]) -> int:
            conn.execute(DELETE_ORPHAN_FEEDBACK)
            return 0
        return in_batches(lambda: self._run(evaluations), lambda: self._run(sessions),
                          lambda: self._run(orphans), batch, stop)

    def _session_exec(self, statement: str, args: Sequence[Any]) -> tuple[list[Any], int]:
        return self._run(lambda conn: _execute(conn, statement, args))

    def _again(self, name: str, *args: Any) -> tuple[list[Any], int]:
        statement = self._session_sql[name]
        return self._retrying(lambda conn: _execute(conn, statement, args))

    def claim_session(self, session_id: str, last_turn_ns: int, claim: str, now_ns: int,
                      claim_before_ns: int) -> bool:
        """``KeptSessions.claim_session``; after a lost connection tried once more on a new
        one, and a claim whose answer was lost with it (the server committed it) is found
        held by this very token and said so (True). Before, it raised: the session, claimed
        by nobody, waited ``claim_timeout_s`` to be taken over and completed."""
        return self._won(
            lambda: super(PostgresStore, self).claim_session(
                session_id, last_turn_ns, claim, now_ns, claim_before_ns),
            lambda: self._one("claimed_by", session_id)[0] == [(claim,)])

    def lease_session_events(self, session_id: str, completions: int, due_ns: int,
                             until_ns: int) -> bool:
        """``KeptSessions.lease_session_events``; after a lost connection tried once more on
        a new one, and a lease whose answer was lost with it (the server committed it) is
        found held until this very ``until_ns`` and said so (True). Before, it raised: the
        event, leased by nobody, waited another lease to go out."""
        return self._won(
            lambda: super(PostgresStore, self).lease_session_events(
                session_id, completions, due_ns, until_ns),
            lambda: self._one("events_held", session_id, completions)[0] == [(until_ns,)])

    def _won(self, take: Callable[[], bool], ours: Callable[[], bool]) -> bool:
        """``take()``, one winner in the fleet (a conditional UPDATE); after a lost
        connection, once more on a new one: not committed, ``take()`` wins now; committed,
        its answer lost with the connection, the row is ``ours()``. Raises the first error
        when neither answers."""
        try:
            return take()
        except psycopg.OperationalError as e:
            if _timed_out(e):
                raise
            failed = False
            try:
                if take():
                    return True
            except psycopg.OperationalError:
                failed = True  # its answer lost too: the row says
            try:
                if ours():
                    return True
            except psycopg.OperationalError:
                raise e from None
            if failed:
                raise e from None
            return False

    def complete_session(self, session_id: str, claim: str, record: dict[str, Any],
                         now_ns: int, events_due_ns: int | None = None) -> bool:
        """``KeptSessions.complete_session``; after a lost connection tried once more on a
        new one (not committed: stored now, or False as ever when a turn came meanwhile), and
        a completion whose answer was lost with it (the server committed it: a restart or
        failover at the commit) is found stored, complete with this very record, and said
        so (True): the job counts and judges it. Before, a completion whose answer was lost
        raised, and the session, complete and never due again, was in no session metric;
        one not committed raised too, and the session waited for its claim to time out."""
        record_stored = json.loads(json.dumps(record))

        def ours() -> bool:
            kept = self.session_record(session_id)
            return kept is not None and kept.state == "complete" and kept.record == record_stored
        return self._won(lambda: super(PostgresStore, self).complete_session(
            session_id, claim, record, now_ns, events_due_ns), ours)

    def remember_agents(self, runs: Sequence[AgentRun]) -> dict[str, int]:
        """The fleet's agent history (bounds: ``otel_eval.store.base``), one transaction."""
        now = self._clock_ns()
        rows = [_args(r) for r in history_rows(runs, now)]
        if not rows:
            return {}
        self._remembered += 1
        whole = (self._remembered - 1) % AGENT_HISTORY_PRUNE_EVERY == 0
        services = sorted({r[0] for r in rows})
        attempt = _Remembering()

        def work(conn: psycopg.Connection[Any]) -> dict[str, int]:
            if attempt.committed(conn):  # its answer lost: a retry would delete nothing
                return attempt.deleted
            return _remember(conn, rows, services, now, whole, attempt)
        return self._retrying(work)

    def recall_agent(self, service: str, fingerprints: Sequence[str]) -> str | None:
        fps = list(fingerprints)
        if not fps:
            return None
        oldest = self._clock_ns() - AGENT_HISTORY_MAX_AGE_S * 10**9
        rows = self._rows("SELECT fingerprint, agent FROM agent_history WHERE service = %s "
                          "AND seen_ns >= %s AND fingerprint = ANY(%s)",
                          (service[:AGENT_HISTORY_NAME_CHARS], oldest, fps), again=True)
        return pick_agent(((str(r[0]), str(r[1])) for r in rows), fps)

    # -- readers --------------------------------------------------------------------------

    def _rows(self, sql: str, args: Iterable[Any], *,
              again: bool = False) -> list[tuple[Any, ...]]:
        """``again``: one of the engine's reads, tried again on a new connection
        (``_retrying``); the others raise once and the next call reconnects."""
        run = self._retrying if again else self._run
        return run(lambda conn: conn.execute(sql, _args(args)).fetchall())

    def get(self, trace_id: str) -> dict[str, Any] | None:
        rows = self._rows("SELECT body FROM evaluations WHERE trace_id = %s", (trace_id,))
        return json.loads(rows[0][0]) if rows else None

    def get_stamped(self, trace_id: str) -> tuple[dict[str, Any], int] | None:
        rows = self._rows("SELECT body, evaluated_at_ns FROM evaluations WHERE trace_id = %s",
                          (trace_id,), again=True)  # the engine's: a replay's evaluation
        return (json.loads(rows[0][0]), int(rows[0][1])) if rows else None

    def get_versioned(self, trace_id: str) -> tuple[dict[str, Any], int, int] | None:
        rows = self._rows("SELECT body, evaluated_at_ns, row_version FROM evaluations "
                          "WHERE trace_id = %s", (trace_id,))
        return (json.loads(rows[0][0]), int(rows[0][1]), int(rows[0][2])) if rows else None

    def stamp(self, trace_id: str) -> tuple[int, int] | None:
        rows = self._rows("SELECT revision, evaluated_at_ns FROM evaluations "
                          "WHERE trace_id = %s", (trace_id,), again=True)  # the engine's too
        return (int(rows[0][0]), int(rows[0][1])) if rows else None

    def latest(self, limit: int) -> list[dict[str, Any]]:
        rows = self._rows("SELECT body FROM evaluations ORDER BY evaluated_at_ns DESC, "
                          "trace_id LIMIT %s", (limit,))
        return [json.loads(r[0]) for r in rows]

    def query(self, q: EvaluationQuery) -> Page:
        """One page of evaluations matching ``q``, newest first (see ``otel_eval.store.query``)."""
        sql, args = filters.page_sql(q, filters.POSTGRESQL)

        window = filters.window_sql(q, filters.POSTGRESQL)

        def read(conn: psycopg.Connection[Any]) -> Page:
            end, query = None, (sql, args)
            if window is not None:  # with detector: the rows a page looks at end there
                end = filters.window_end(conn.execute(window[0], _args(window[1])))
                query = filters.page_sql(q, filters.POSTGRESQL, end)
            # streamed (single-row mode): a page cut by its size stops the query there
            rows = cast("Generator[Any, None, None]",
                        conn.cursor().stream(query[0], _args(query[1])))
            with closing(rows):
                return filters.page(rows, q.limit, q.max_bytes, end)
        return self._run(read)

    def since(self, evaluated_after_ns: int, limit: int = 100_000,
              keep: Keep | None = None) -> Window:
        """Evaluations stored after a time, oldest first; past ``limit`` the newest ``limit``
        (issue clustering reads its window with this), a chunk of rows at a time; ``keep``
        as in ``EvaluationStore.since``."""
        def read(after_ns: int, position: tuple[int, str] | None, n: int) -> list[Any]:
            sql, args = _SINCE, list[Any]([after_ns])
            if position is not None:
                sql, args = _SINCE_AFTER, [after_ns, position[0], position[0], position[1]]
            return self._rows(sql + " LIMIT %s", [*args, n])
        return since_chunks(read, evaluated_after_ns, limit, keep)

    def session_ids(self, q: SessionQuery, after: SessionCursor | None,
                    n: int) -> list[tuple[str, int]]:
        sql, args = session_list_sql(q, "%s", after, n)
        return [(str(r[0]), int(r[1])) for r in self._rows(sql, args)]

    def session_turns(self, session_id: str, limit: int,
                      max_chars: int = 1 << 62) -> StoredTurns:
        return stored_turns(self._rows(turns_sql("%s"),
                                       (session_id, session_id, limit, max_chars, session_id,
                                        session_id)))

    def count(self) -> int:
        return int(self._rows("SELECT COUNT(*) FROM evaluations", ())[0][0])

    def owe_results(self, trace_id: str, now_ns: int) -> None:
        self._run(lambda conn: conn.execute(
            "INSERT INTO results_owed VALUES (%s, %s) ON CONFLICT (trace_id) "
            "DO UPDATE SET owed_at_ns = EXCLUDED.owed_at_ns", (trace_id, now_ns)))

    def results_paid(self, trace_id: str, owed_at_ns: int) -> None:
        self._run(lambda conn: conn.execute(
            "DELETE FROM results_owed WHERE trace_id = %s AND owed_at_ns = %s",
            (trace_id, owed_at_ns)))

    def results_owed(self, limit: int) -> list[tuple[str, int]]:
        rows = self._rows("SELECT trace_id, owed_at_ns FROM results_owed "
                          "ORDER BY owed_at_ns LIMIT %s", (limit,))
        return [(str(t), int(n)) for t, n in rows]

    def feedback(self, trace_id: str) -> str | None:
        rows = self._rows("SELECT outcome FROM feedback WHERE trace_id = %s", (trace_id,))
        return str(rows[0][0]) if rows else None


def _upsert(conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> list[bool]:
    """The rows, and their sessions' rows (``session_rows``), in one transaction."""
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(_UPSERT, [(*row, row[2]) for row in rows], returning=True)
        before: list[str | bool | None] = []
        again: list[bool] = []  # the row replaced was this evaluation (written again)
        while True:
            row = cur.fetchone()
            before.append(row[1] if row is not None and row[0] else False)
            again.append(row is not None and bool(row[0]) and row[2] is True)
            if not cur.nextset():
                break
        writes = session_writes(rows, before)
        if writes.upserts:
            cur.executemany(_SESSIONS["upsert"], writes.upserts)
        if writes.left:
            cur.executemany(_SESSIONS["gone"], writes.left)
    return [b is not False and not a for b, a in zip(before, again, strict=True)]


def _execute(conn: psycopg.Connection[Any], statement: str,
             args: Sequence[Any]) -> tuple[list[Any], int]:
    cur = conn.execute(statement, _args(args))
    return (cur.fetchall() if cur.description else []), cur.rowcount


class _Remembering:
    """A ``remember_agents`` transaction's id and the rows it deleted, taken before its
    commit. The server may commit it and the connection be lost before the answer comes
    back (a restart, a failover): tried again on a new connection, the batch deletes nothing
    more, and its evictions went uncounted (``otel_eval_agent_history_evicted_total``). The
    retry asks the server first (``txid_status``, meant for a commit whose answer was lost):
    committed, these are the batch's evictions; aborted (or still in progress: it is done
    again, and waits for the first on its rows), the batch is written again and counts its
    own."""

    def __init__(self) -> None:
        self.xid: int | None = None
        self.deleted: dict[str, int] = {}

    def committed(self, conn: psycopg.Connection[Any]) -> bool:
        if self.xid is None:
            return False
        row = conn.execute("SELECT txid_status(%s)", (self.xid,)).fetchone()
        return row is not None and row[0] == "committed"


def _remember(conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]], services: list[str],
              now: int, whole: bool, attempt: _Remembering) -> dict[str, int]:
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany("INSERT INTO agent_history VALUES (%s, %s, %s, %s) ON CONFLICT "
                        "(service, fingerprint, agent) DO UPDATE SET seen_ns = "
                        "GREATEST(agent_history.seen_ns, excluded.seen_ns)", rows)
        deleted = prune_history(cur, "%s", "ctid", services, now, whole, AGENT_HISTORY_ROWS)
        row = cur.execute("SELECT txid_current()").fetchone()
        attempt.xid, attempt.deleted = (None if row is None else int(row[0])), deleted
    return deleted
