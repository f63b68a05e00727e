"""Stage: assemble (spool file). The spool's SQLite file: its schema and versions, how it is
opened, what becomes of one found unreadable, and the statements over its tables.

    Spool.open -> connect (version check, pragmas) -> migrate (to SCHEMA_VERSION)
        | unreadable (``damaged``) -> set_aside -> connect again: an empty spool

Promises:
- versioned: ``PRAGMA user_version`` is the schema's version. A spool written before log
  requests were kept (version 0: no ``signal`` column) is migrated in place at open, its rows
  replayed as trace requests; rows written before receive times were kept (version 1) are
  replayed as received at the replay; pairs written before re-spooled ones were marked
  (version 2: no ``carried`` column) are not known to carry a stored revision's spans, so
  they replay as a straggler's (late if their run is stored: an upgrade never lets one
  replace a stored run; a run an earlier version re-opened and left in flight keeps its
  stored revision, without the late spans), and those written before another sender's were
  marked (version 3: no ``foreign_sender`` column) as the run's, and those written before a
  run missing spans refused for a service's share was marked (version 4: no ``cut`` column)
  as a whole run's (the mark was then in memory only), and those written before trace ids
  refused for a share before their runs opened were kept (version 5) open those runs whole;
  a spool from a newer
  version is refused with a clear error, before anything is written to it;
- a file found unreadable (power loss without ``fsync``: not a database, a corrupt page) is
  moved aside with its WAL and shared-memory files, logged; the newest ``CORRUPT_KEPT`` set
  aside are kept, older ones deleted and logged. What cannot be read at the moment (a lock,
  a full disk) is not ``damaged``: the file stays for the next start (``Spool.open``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from otel_eval.base.configcheck import ConfigError

# The spool's logger, for all its parts: their lines keep the one name.
log = logging.getLogger("otel_eval.assemble.spool")

# Version 0: requests and pairs. Version 1: ``spool_requests.signal`` (traces | logs).
# Version 2: ``spool_requests.received_at`` (wall-clock seconds; 0: unknown, written before).
# Version 3: ``spool_traces.carried`` (1: the request holds what a stored revision of the trace
# held, re-spooled when late spans re-opened it; pairs written before: 0, not known to).
# Version 4: ``spool_traces.foreign_sender`` (1: the request's spans of the trace were taken
# only to pass on, another sender's for a released run; pairs written before: 0).
# Version 5: ``spool_traces.cut`` (1: spans of the trace were refused for their service's share,
# so its run misses them: released ``truncated``, reason ``service_share``; pairs written
# before: 0, not known to).
# Version 6: ``spool_refused`` (trace ids whose spans were refused for their service's share
# before their runs opened: nothing of them in the spool to carry ``cut``; the newest kept).
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS spool_requests (id INTEGER PRIMARY KEY, body BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS spool_traces (request_id INTEGER NOT NULL, "
    "trace_id TEXT NOT NULL, PRIMARY KEY (request_id, trace_id)) WITHOUT ROWID",
)
_MIGRATIONS = (  # _MIGRATIONS[v] takes a spool from version v to v + 1
    "ALTER TABLE spool_requests ADD COLUMN signal TEXT NOT NULL DEFAULT 'traces'",
    "ALTER TABLE spool_requests ADD COLUMN received_at REAL NOT NULL DEFAULT 0",
    "ALTER TABLE spool_traces ADD COLUMN carried INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE spool_traces ADD COLUMN foreign_sender INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE spool_traces ADD COLUMN cut INTEGER NOT NULL DEFAULT 0",
    "CREATE TABLE IF NOT EXISTS spool_refused (id INTEGER PRIMARY KEY, "
    "trace_id TEXT NOT NULL UNIQUE)",
)
SCHEMA_VERSION = len(_MIGRATIONS)
SIGNALS = ("traces", "logs")

# Spools set aside as unreadable kept for a post-mortem, the newest (each is up to
# ``max_bytes``): older ones are deleted when another is set aside, so power loss after
# power loss does not fill the disk.
CORRUPT_KEPT = 3


def damaged(error: sqlite3.DatabaseError) -> bool:
    """The file itself is unreadable (not a database, a corrupt page: power loss without
    fsync), not the moment (a lock, a full disk, an I/O error, which pass)."""
    name = getattr(error, "sqlite_errorname", "") or ""
    return name == "SQLITE_NOTADB" or name.startswith("SQLITE_CORRUPT")


class SpoolVersionError(ConfigError):
    """The spool was written by a newer otel-eval (its schema version is unknown here): the
    command line reports it as it reports a configuration error."""


def connect(path: str, fsync: bool) -> sqlite3.Connection:
    """A connection to the spool at ``path`` with its pragmas set (its schema not yet
    migrated: ``migrate``); a ``SpoolVersionError`` for one a newer release wrote."""
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:  # before anything is written to it (WAL mode included)
        db.close()
        raise SpoolVersionError([
            f"store.path: spool {path} has schema version {version}; this otel-eval "
            f"knows up to {SCHEMA_VERSION} (written by a newer release: upgrade, or move "
            f"the file away to start an empty spool)"])
    # Rows are whole requests (~100 KB+): 64 KiB pages take a third less CPU per write
    # than 4 KiB ones (only a new file takes it); checkpoints stay at ~4 MB of WAL.
    db.execute("PRAGMA page_size=65536")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=64")
    db.execute(f"PRAGMA synchronous={'FULL' if fsync else 'OFF'}")
    # Debian's SQLite (the image's, CPython's on most Linux) is built with secure_delete
    # on: each request deleted after its evaluation had its ~100 KB+ of pages zeroed and
    # written to the WAL again (half of the spool's delete CPU). FAST zeroes what costs no
    # extra I/O (the b-tree pages); a deleted body's pages go to the freelist as they are,
    # for the next requests' bodies to take.
    db.execute("PRAGMA secure_delete=FAST")
    return db


def migrate(db: sqlite3.Connection) -> None:
    """Create or bring the schema to ``SCHEMA_VERSION`` (one transaction)."""
    with transaction(db) as cur:
        version = int(cur.execute("PRAGMA user_version").fetchone()[0])
        for stmt in _SCHEMA:
            cur.execute(stmt)
        for step in _MIGRATIONS[version:]:
            cur.execute(step)
        if version < SCHEMA_VERSION:
            cur.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Cursor]:
    cur = db.cursor()
    cur.execute("BEGIN")
    try:
        yield cur
        cur.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            cur.execute("ROLLBACK")
        raise


_CHUNK = 64 * 1024  # bytes per blob write: one page


def insert(db: sqlite3.Connection, cur: sqlite3.Cursor, body: bytes,
           trace_ids: Collection[str], signal: str, carried: Collection[str],
           at: float) -> int:
    """Write a request received at ``at`` (wall-clock seconds) and its pairs; its row id."""
    rid = cur.execute(
        "INSERT INTO spool_requests (body, signal, received_at) VALUES (zeroblob(?), ?, ?)",
        (len(body), signal, at)).lastrowid
    assert rid is not None
    # Written a chunk at a time into the pages: binding the whole body would make
    # SQLite copy it twice (bind, record), and the allocator keeps such multi-MB
    # buffers resident after they are freed (tests/receiver/test_request_memory.py).
    view = memoryview(body)
    with db.blobopen("spool_requests", "body", rid) as blob:
        for i in range(0, len(body), _CHUNK):
            blob.write(view[i:i + _CHUNK])
    cur.executemany("INSERT INTO spool_traces (request_id, trace_id, carried) "
                    "VALUES (?, ?, ?)",
                    [(rid, tid, int(tid in carried)) for tid in trace_ids])
    return rid


def mark(cur: sqlite3.Cursor, marks: Collection[tuple[int, int, int, str]]) -> None:
    """Set pairs' marks: (cut, foreign_sender, request, trace) each."""
    if marks:
        cur.executemany("UPDATE spool_traces SET cut = ?, foreign_sender = ? "
                        "WHERE request_id = ? AND trace_id = ?", marks)


def keep_refused(cur: sqlite3.Cursor, trace_ids: Collection[str], bound: int) -> None:
    """Keep ``trace_ids`` (refused for a share, their runs not open), the newest ``bound``
    of all kept."""
    cur.executemany("INSERT OR REPLACE INTO spool_refused (trace_id) VALUES (?)",
                    [(t,) for t in trace_ids])
    cur.execute("DELETE FROM spool_refused WHERE id <= "
                "(SELECT max(id) FROM spool_refused) - ?", (bound,))


def body(db: sqlite3.Connection, rid: int) -> bytes | None:
    """Request ``rid``'s bytes; None when it is gone."""
    row = db.execute("SELECT body FROM spool_requests WHERE id = ?", (rid,)).fetchone()
    return None if row is None else bytes(row[0])


def rewrite(cur: sqlite3.Cursor, rid: int, body: bytes) -> None:
    """Request ``rid``'s body replaced (a thinned row)."""
    cur.execute("UPDATE spool_requests SET body = ? WHERE id = ?", (body, rid))


def delete(cur: sqlite3.Cursor, pairs: Collection[tuple[int, str]],
           requests: Collection[int]) -> None:
    """Delete (request, trace) pairs and the ``requests`` left without one."""
    cur.executemany("DELETE FROM spool_traces WHERE request_id = ? AND trace_id = ?", pairs)
    cur.executemany("DELETE FROM spool_requests WHERE id = ?", [(rid,) for rid in requests])


def set_aside(path: str) -> None:
    """Move the unreadable spool at ``path`` (closed) aside for a post-mortem, with its WAL
    and shared-memory files, and prune those set aside before."""
    suffix = f".corrupt-{time.time_ns()}"
    for part in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.replace(path + part, path + suffix + part)
    log.error("spool %s is unreadable; moved aside to %s%s, starting an empty spool",
              path, path, suffix)
    _prune_set_aside(path)


def _prune_set_aside(path: str) -> None:
    """Delete the spools set aside before the newest ``CORRUPT_KEPT`` (and their WAL and
    shared-memory files), each logged."""
    folder, name = os.path.split(os.path.abspath(path))
    prefix = name + ".corrupt-"
    stamps = sorted({int(m.group(1)) for entry in os.listdir(folder)
                     if (m := re.fullmatch(re.escape(prefix) + r"(\d+)(?:-wal|-shm)?",
                                           entry))}, reverse=True)
    for stamp in stamps[CORRUPT_KEPT:]:
        for part in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):  # gone, or not ours to delete: the start goes on
                os.remove(os.path.join(folder, f"{prefix}{stamp}{part}"))
        log.warning("spool %s: deleted %s%d, set aside as unreadable before the newest "
                    "%d", path, prefix, stamp, CORRUPT_KEPT)
