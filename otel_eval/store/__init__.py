"""Stage: store. Evaluations keyed by trace id; a re-evaluation supersedes.

    Engine.put_many ─► evaluations ◄─ query / get      (GET /v1/evaluations, show)
    judge ─► put_judge        feedback ─► put_feedback + put_verdict      retention ─► delete
    issues job ─► since(window); its catalogue in the same database (otel_eval.outputs.issues)

One interface (``EvaluationStore``, revision rules in ``base``), two implementations:
``SqliteStore`` (``store.path``, the default: one file per process) and ``PostgresStore``
(``store.url``: one database shared by the fleet). ``open_store`` picks by the target; each
process opens its own. Schema: ``migrations`` (versioned, applied at open). psycopg is
imported only when a PostgreSQL URL is opened.
"""

from __future__ import annotations

import sqlite3

from otel_eval.base.configcheck import StartupError
from otel_eval.store.base import EvaluationStore, is_postgresql_url, redact_url
from otel_eval.store.sqlite import SqliteStore

__all__ = ["EvaluationStore", "SqliteStore", "Store", "is_postgresql_url", "open_store",
           "redact_url"]

# The SQLite store under its first name: ``Store(path)``.
Store = SqliteStore


def open_store(target: str) -> EvaluationStore:
    """A store on ``target``: a ``postgresql://`` URL, or a SQLite file path (``:memory:``)."""
    if is_postgresql_url(target):
        from otel_eval.store.postgresql import PostgresStore
        return PostgresStore(target)
    try:
        return SqliteStore(target)
    except sqlite3.DatabaseError as e:  # not a database, corrupt, locked, a newer schema...
        raise StartupError(f"store {target}: {e} (not an otel-eval SQLite store, or "
                           "damaged)") from None
    except OSError as e:
        raise StartupError(f"store {target}: {e.strerror or e}") from None
