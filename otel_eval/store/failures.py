"""Stage: store, its write failures. Why a store refused a write, from a closed set.

    evaluate_and_store: put_many (or a read of the same batch) raises -> write_failure(e)
        -> reason in STORE_REFUSALS -> the engine keeps the batch and retries it
        (``otel_eval.assemble.store_health``) | ``error`` or None (not a store error):
        the batch stored trace by trace, a failing trace as an evaluation error

Both stores' drivers say what went wrong in their own terms: SQLite by result code
(``SQLITE_FULL``: "database or disk is full", also when ``max_page_count`` is reached;
``SQLITE_READONLY``; ``SQLITE_BUSY``; ``SQLITE_IOERR``), PostgreSQL by SQLSTATE class
(53: insufficient resources, ``53100`` disk full; 25006 read-only transaction; 08 and a lost
connection: ``OperationalError``, a connect unanswered: ``ConnectionTimeout``; 57014
``statement_timeout`` and 55P03 ``lock_timeout``: a store that blocks, held by another
client's lock, is a store that fails: ``timeout``).
Anything else the driver raises is ``error``: the store did not write, but for a reason of the
batch's data (a value the driver refuses), not of the store: the engine then stores the batch
trace by trace (``evaluate.stage``), so one poison trace is stored as an evaluation error
instead of holding every trace behind it for ever.
"""

from __future__ import annotations

import sqlite3

# disk_full: no room (disk, quota, SQLite max_page_count, PostgreSQL 53100);
# read_only: the file, the disk or the server refuses writes; locked: another writer held the
# lock past the busy timeout; unavailable: the file or the server cannot be reached (I/O
# error, connection lost or refused, out of connections); timeout: a statement ran past
# store.statement_timeout_s or waited for a lock past store.lock_timeout_s (PostgreSQL);
# error: anything else the store's driver raised.
WRITE_FAILURE_REASONS = ("disk_full", "read_only", "locked", "unavailable", "timeout", "error")
# The reasons that are the store's state, not one row's: the batch is kept and retried whole.
# ``error`` (the driver refused something else: a row's data) and an exception that is no
# store error at all are one trace's: the engine stores the batch trace by trace.
STORE_REFUSALS = frozenset(WRITE_FAILURE_REASONS) - {"error"}

# PostgreSQL's query_canceled (statement_timeout) and lock_not_available (lock_timeout)
TIMEOUT_STATES = frozenset(("57014", "55P03"))

# psycopg's errors for a server not reached, by class name (psycopg is not imported here): a
# connection lost or refused, and a connect unanswered within connect_timeout (a host gone,
# an address blackholed; no SQLSTATE). The latter was ``error``, one trace's: the batch was
# stored trace by trace, two connects each and two more for its error record.
_UNREACHED = frozenset(("OperationalError", "ConnectionTimeout"))

_SQLITE_CODES = {"SQLITE_FULL": "disk_full", "SQLITE_READONLY": "read_only",
                 "SQLITE_BUSY": "locked", "SQLITE_LOCKED": "locked",
                 "SQLITE_IOERR": "unavailable", "SQLITE_CANTOPEN": "unavailable"}


def write_failure(error: BaseException) -> str | None:
    """The reason ``error`` (raised by a store call) says the store did not write, or None
    when it is no store error at all (a bug: let it be loud)."""
    if isinstance(error, sqlite3.Error):
        name = getattr(error, "sqlite_errorname", "") or ""
        # the extended codes (SQLITE_IOERR_WRITE, SQLITE_READONLY_DBMOVED) by their family
        family = "_".join(name.split("_")[:2])
        return _SQLITE_CODES.get(family, "error")
    if type(error).__module__.split(".")[0] == "psycopg":
        return _postgresql(error)
    if isinstance(error, OSError):
        return "unavailable"
    return None


def _postgresql(error: BaseException) -> str:
    state = getattr(error, "sqlstate", None) or ""
    if state == "53100":
        return "disk_full"
    if state == "25006":
        return "read_only"
    if state in TIMEOUT_STATES:
        return "timeout"
    if state.startswith(("53", "08", "57P")) or type(error).__name__ in _UNREACHED:
        return "unavailable"  # out of resources, connection gone, server shutting down
    return "error"
