"""Stage: store. Evaluations keyed by trace id; a re-evaluation supersedes.

    Engine.put_many ─► evaluations ◄─ query / get      (GET /v1/evaluations, show)
    judge ─► put_judge        feedback ─► put_feedback_and_verdict        retention ─► delete
    issues job ─► since(window); its catalogue in the same database (otel_eval.outputs.issues)

The writers of an evaluation row, one per part, each from its own thread (never the event
loop the judge and Kafka share: every call here blocks):

    part                          writer                                     thread
    the row (findings, verdict,   evaluation stage: put_many, then           engine finishing,
      body, digest, revision)       remember_agents (evaluate/stage.py)        or a worker process
    body.judge                    JudgeStage (evaluate/judge): put_judge     otel-eval-judge-writer
                                    through judge_writes.JudgeWrites
    feedback table; the row's     Feedback.record: put_feedback_and_verdict, admin HTTP request
      findings + verdict            one transaction, with retries
                                    (evaluate/feedback.py)
    the row's deletion, and its   Retention: delete_older_than (retention)   otel-eval-retention
      feedback's

``put_judge`` and ``put_feedback_and_verdict`` write only onto the revision they read (below),
so a re-evaluation by ``put_many`` always wins and neither overwrites the other's part.

One interface (``EvaluationStore``, revision rules in ``base``), two implementations:
``SqliteStore`` (``store.path``, the default: one file per process) and ``PostgresStore``
(``store.url``: one database shared by the fleet). ``open_store`` picks by the target; each
process opens its own. Schema: ``migrations`` (versioned, applied at open). psycopg is
imported only when a PostgreSQL URL is opened.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from otel_eval.base.configcheck import StartupError
from otel_eval.store.base import EvaluationStore, SessionLimits, is_postgresql_url, redact_url
from otel_eval.store.sqlite import SqliteStore

__all__ = ["EvaluationStore", "SqliteStore", "Store", "catalogue_connection",
           "is_postgresql_url", "open_store", "opened", "redact_url", "store_at"]


class Store(SqliteStore):
    """The SQLite store opened as it is made (``SqliteStore(path).open()``): for tests and
    one-shot commands; ``serve`` makes its store at construction and opens it at start."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.open()


def store_at(target: str, session: SessionLimits | None = None, *,
             read_only: bool = False) -> EvaluationStore:
    """The store on ``target`` (a ``postgresql://`` URL, or a SQLite file path or
    ``:memory:``), not opened yet: ``opened`` opens it. ``session``: the limits of its
    database sessions (PostgreSQL; the defaults when None). ``read_only`` (the commands that
    only read a store: ``calibrate``, ``show``): opened as it is, never created nor migrated
    (SQLite ``mode=ro``, PostgreSQL read-only transactions), every write refused; a store
    whose schema is not this otel-eval's, or no store, is refused (``SchemaError``)."""
    if is_postgresql_url(target):
        from otel_eval.store.postgresql import PostgresStore
        return PostgresStore(target, session=session or SessionLimits(), read_only=read_only)
    return SqliteStore(target, read_only=read_only, fsync=session is not None and session.fsync)


def opened(store: EvaluationStore) -> EvaluationStore:
    """``store`` opened; a SQLite file that cannot be is a ``StartupError`` naming it, with
    the hint that it is no store or a damaged one only when SQLite says so (not a database,
    malformed): a full disk, a lock or a read-only directory is said as it is."""
    try:
        store.open()
    except sqlite3.DatabaseError as e:  # not a database, corrupt, full, locked, a newer schema
        name = getattr(e, "sqlite_errorname", "") or ""
        damaged = name == "SQLITE_NOTADB" or name.startswith("SQLITE_CORRUPT")
        hint = " (not an otel-eval SQLite store, or damaged)" if damaged else ""
        raise StartupError(f"store {store.location}: {e}{hint}") from None
    except OSError as e:
        raise StartupError(f"store {store.location}: {e.strerror or e}") from None
    return store


def open_store(target: str, session: SessionLimits | None = None, *,
               read_only: bool = False) -> EvaluationStore:
    """A store on ``target``, opened: ``opened(store_at(target, session, read_only=...))``."""
    return opened(store_at(target, session, read_only=read_only))


def catalogue_connection(target: str, session: SessionLimits | None = None) -> Any:
    """A connection of its own to the database at ``target``, for the issues catalogue (its
    session advisory lock lives and dies with its connection, so it cannot borrow the
    store's). A ``postgresql://`` URL: the store's ``connect`` and its migrations (the
    catalogue's tables are among them), then the store's ``session`` limits (the defaults
    when None), as every session of otel-eval's has: before, a lock another client held on
    the catalogue hung the job's run for good, the fleet's issues lock with it; a SQLite
    file: a connection usable from the job's thread, given the catalogue's tables by
    ``migrations.make_sqlite_catalogue``."""
    if is_postgresql_url(target):
        from otel_eval.store.migrations import migrate_postgresql
        from otel_eval.store.postgresql import connect, limit  # psycopg: only for PostgreSQL

        conn = connect(target)  # unlimited while migrating, as the store's open
        try:
            migrate_postgresql(conn)
            limit(conn, session or SessionLimits())
        except BaseException:
            conn.close()
            raise
        return conn
    return sqlite3.connect(target, check_same_thread=False, timeout=60.0)
