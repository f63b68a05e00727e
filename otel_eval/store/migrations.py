"""Stage: store, schema. Numbered migrations, applied in one transaction when a store opens.

Both stores keep the same tables, with each engine's types:

    1  evaluations (one row per trace id, the whole per-trace JSON in ``body``; a few
       columns pulled out for listing, filtering and retention) and feedback (known outcomes)
    2  issues_catalogue (issue stage: stable issue ids, centroids as JSON)
    3  agent_history (the agents of completed runs by service and fingerprint, bounded:
       ``otel_eval.store.base``; read for runs no span named,
       ``otel_eval.evaluate.agent_inference``)
    4  evaluations.content_digest (what the evaluation was made from: a trace redelivered
       with the same content is not evaluated again; NULL in rows stored before it)
    5  issue_shares (issue stage: each issue's share of runs per clustering run, the last
       ``catalogue.HISTORY_RUNS`` runs, for the issues view)
    6  evaluations.session_id (the conversation a turn belongs to, NULL without one or in
       rows stored before it) and its index: sessions are read from the store
       (``otel_eval.store.sessions``), whichever worker stored each turn
    7  sessions (one row per conversation: open, claimed or complete, its last turn's time,
       turns and bytes, and the record of its completion: ``otel_eval.store.session_rows``,
       written by ``put_many`` and the session completion job); existing turns backfilled
    8  feedback_by_time, the index of feedback (received_at_ns): ``labelled`` reads the
       newest outcomes along it (it sorted the whole table at each read)
    9  sessions by service: a session is a conversation id within one service, keyed by
       ``store.sessions.session_key`` in evaluations.session_id and the sessions table
       (``session_rows.rekey``: a session whose turns came from several services is split)
   10  sessions.events_due_ns and its index: a completion's event owed until the events sink
       delivered it (``session_rows.KeptSessions.session_events_due``)
   11  session keys hold the service's first ``sessions.MAX_SERVICE_CHARS`` characters, not
       1,024 (a longer key passed PostgreSQL's b-tree bound: ``session_rows.shorter_keys``)
   12  issues_catalogue.service: an agent node is a name within its service, so an issue of
       one (``issues.per_node``) is kept by (level, service, node) ('' in rows before it)
   13  evaluations.started_at_ns (when the run began, 0 unknown; a turn's backfilled from its
       body's ``start_time_unix_nano``) and the index of a session's turns by it: a session
       is read newest turns by start (``sessions.turns_sql``), not by evaluation time (a
       re-evaluated old turn took a newer one's place in the bounded read)
   14  issues_catalogue.unnamed: an issue the judge is still to name (a run's
       ``issues.naming_max_calls`` or ``naming_deadline_s`` left it its evidence title), so
       the next run names it, after a restart too (0 in rows before it)
   15  text stored with NUL before ``base.stored_args`` holds U+FFFD, as written and looked
       up since (SQLite: ``store.nul_text``; PostgreSQL text never held NUL)
   16  evaluations.span_ids (the span ids and log records' keys the evaluation was made from,
       ``model.content_ids``; rows of earlier releases of 16 hold span ids only: a trace of that id
       that does not hold them all is a fragment, never stored over the run, nor one not
       shown by the row's digest to hold its records (``evaluate.stage``); NULL in rows
       stored before it)
   17  each turn's start read again from its body as 13 now reads it, the same on both
       stores: 13 stored a REAL on SQLite for a start past 64 bits, and on PostgreSQL the
       first step's start for a run whose start was null, negative or past BIGINT (0 now)
   18  sessions.first_completed_at_ns: when a session was first completed, the completion the
       session metrics count, which ``counted_since``/``counted_until`` select on (a late
       turn's re-completion moves ``completed_at_ns``); backfilled where the completion
       stored is the first, NULL (in no counted window) for one completed more than once
   19  evaluations.first_evaluated_at_ns: when a run was first evaluated, the evaluation the
       run metrics count, which the runs' ``counted_since``/``counted_until`` select on (a
       re-evaluation after late spans, counted only as superseded, moves
       ``evaluated_at_ns``); backfilled for revision 0 (no late spans came), NULL (in no
       counted window) for a run re-evaluated before it
   20  evaluations.row_version: the writes made to the row's evaluation (0 as ``put_many``
       stores it, one more per judge or feedback write), carried by each results-topic
       record (``outputs.kafka``): a consumer keeps the newest of a key that processes of a
       fleet published in any order (0 in rows before it)
   21  results_owed: the traces whose re-judged verdict an outcome (``POST /v1/feedback``)
       handed to the results topic and Kafka has not yet delivered; a start publishes them
       again (``Feedback.replay``), so a kill after the 200 loses none

``schema_version`` records each applied migration (version, description, when). Opening a
store applies what is missing, in order, in one transaction: a crash part-way leaves the
previous version. Concurrent openers are serialized (SQLite ``BEGIN IMMEDIATE``; PostgreSQL
a transaction-scoped advisory lock), so a fleet of workers starting at once migrates once.
A store whose version is newer than this code knows is refused (``SchemaError``): an older
otel-eval must not write rows a newer schema reads differently. A store opened read-only (the
commands that only read one: ``calibrate``, ``show``) is never migrated: ``check_sqlite`` /
``check_postgresql`` refuse it unless its version is ``LATEST``.

Files written before versioning (the tables, no ``schema_version``) are adopted: every
statement is ``CREATE ... IF NOT EXISTS``, so version 1 applies as a no-op and is recorded.
Add a migration by appending to both lists; never edit one that has shipped.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

from otel_eval.store import nul_text
from otel_eval.store.session_rows import events as sessions_events
from otel_eval.store.session_rows import first_completion as sessions_first_completion
from otel_eval.store.session_rows import rekey as sessions_rekey
from otel_eval.store.session_rows import shorter_keys as sessions_shorter_keys
from otel_eval.store.session_rows import table as sessions_table

# A statement, or a step given the engine's execute (one that depends on what is there)
Step = str | Callable[[Callable[..., Any]], None]
Migration = tuple[int, str, tuple[Step, ...]]

_SQLITE_CATALOGUE = """CREATE TABLE IF NOT EXISTS issues_catalogue (
    issue_id    TEXT PRIMARY KEY,
    level       TEXT NOT NULL,
    node        TEXT NOT NULL,
    embedding   TEXT NOT NULL,
    title       TEXT NOT NULL,
    description TEXT NOT NULL,
    centroid    TEXT NOT NULL,   -- JSON {feature: weight}
    first_seen  REAL NOT NULL,   -- unix seconds
    last_seen   REAL NOT NULL,   -- unix seconds
    last_share  REAL NOT NULL    -- share of traces in the last run that saw the issue
)"""

_SQLITE_SHARES = """CREATE TABLE IF NOT EXISTS issue_shares (
    issue_id    TEXT NOT NULL,
    at          REAL NOT NULL,   -- unix seconds of the clustering run
    share       REAL NOT NULL,   -- share of the run's traces that saw the issue
    PRIMARY KEY (issue_id, at)
)"""

_CATALOGUE_SERVICE = "ALTER TABLE issues_catalogue ADD COLUMN service TEXT NOT NULL DEFAULT ''"


def _sqlite_catalogue_service(execute: Callable[..., Any]) -> None:
    """Migration 12 on SQLite, which has no ``ADD COLUMN IF NOT EXISTS``: the column once."""
    if "service" not in {row[1] for row in execute("PRAGMA table_info(issues_catalogue)")}:
        execute(_CATALOGUE_SERVICE)


_CATALOGUE_UNNAMED = ("ALTER TABLE issues_catalogue ADD COLUMN unnamed INTEGER NOT NULL"
                      " DEFAULT 0")


def _sqlite_catalogue_unnamed(execute: Callable[..., Any]) -> None:
    """Migration 14 on SQLite (no ``ADD COLUMN IF NOT EXISTS``): the column once."""
    if "unnamed" not in {row[1] for row in execute("PRAGMA table_info(issues_catalogue)")}:
        execute(_CATALOGUE_UNNAMED)


_FEEDBACK_BY_TIME = "CREATE INDEX IF NOT EXISTS feedback_by_time ON feedback (received_at_ns)"

_STARTED = "ALTER TABLE evaluations ADD COLUMN started_at_ns {} NOT NULL DEFAULT 0"
_TURNS_BY_START = ("CREATE INDEX IF NOT EXISTS evaluations_by_session_start ON evaluations "
                   "(session_id, started_at_ns, trace_id) WHERE session_id IS NOT NULL")


def _sqlite_started(execute: Callable[..., Any]) -> None:
    """Migration 13's column on SQLite (no ``ADD COLUMN IF NOT EXISTS``): once."""
    if "started_at_ns" not in {row[1] for row in execute("PRAGMA table_info(evaluations)")}:
        execute(_STARTED.format("INTEGER"))


def _sqlite_span_ids(execute: Callable[..., Any]) -> None:
    """Migration 16 on SQLite (no ``ADD COLUMN IF NOT EXISTS``): the column once."""
    if "span_ids" not in {row[1] for row in execute("PRAGMA table_info(evaluations)")}:
        execute("ALTER TABLE evaluations ADD COLUMN span_ids TEXT")


def _sqlite_first_completion(execute: Callable[..., Any]) -> None:
    """Migration 18 on SQLite (no ``ADD COLUMN IF NOT EXISTS``): the column once, then the
    backfill (the same values again if run again)."""
    add, backfill = sessions_first_completion("INTEGER", "")
    if "first_completed_at_ns" not in {row[1] for row in execute("PRAGMA table_info(sessions)")}:
        execute(add)
    execute(backfill)


# Migration 19: the first evaluation's time (``EvaluationStore.put_many`` keeps it)
_FIRST_EVALUATED = "ALTER TABLE evaluations ADD COLUMN first_evaluated_at_ns {}"
_FIRST_EVALUATED_BACKFILL = ("UPDATE evaluations SET first_evaluated_at_ns = evaluated_at_ns "
                             "WHERE revision = 0")


def _sqlite_first_evaluated(execute: Callable[..., Any]) -> None:
    """Migration 19 on SQLite (no ``ADD COLUMN IF NOT EXISTS``): the column once, then the
    backfill (the same values again if run again)."""
    if "first_evaluated_at_ns" not in {
            row[1] for row in execute("PRAGMA table_info(evaluations)")}:
        execute(_FIRST_EVALUATED.format("INTEGER"))
    execute(_FIRST_EVALUATED_BACKFILL)


# Migration 20: the writes made to a row's evaluation (``EvaluationStore.get_versioned``): 0 as
# ``put_many`` stores it, one more per judge or feedback write; a results-topic record carries
# it (``outputs.kafka``), so a consumer of the fleet's records keeps a key's newest
_ROW_VERSION = "ALTER TABLE evaluations ADD COLUMN row_version {} NOT NULL DEFAULT 0"


def _sqlite_row_version(execute: Callable[..., Any]) -> None:
    """Migration 20 on SQLite (no ``ADD COLUMN IF NOT EXISTS``): the column once."""
    if "row_version" not in {row[1] for row in execute("PRAGMA table_info(evaluations)")}:
        execute(_ROW_VERSION.format("INTEGER"))


# Migration 21: an outcome's results-topic record owed until delivered (``Feedback``)
_RESULTS_OWED = ("CREATE TABLE IF NOT EXISTS results_owed (trace_id TEXT PRIMARY KEY, "
                 "owed_at_ns {} NOT NULL)")


def _backfill_started(start: str, differs: str = "") -> str:
    """The start of each stored turn, from its body (``start``: the dialect's integer at
    ``start_time_unix_nano``, NULL when none); the rows without a session are not read by it.
    ``differs``: the dialect's ``IS NOT`` to write only the rows holding another value."""
    value = f"COALESCE({start}, 0)"
    return (f"UPDATE evaluations SET started_at_ns = {value} WHERE session_id IS NOT NULL"
            + (f" AND started_at_ns {differs} {value}" if differs else ""))


# The run's start as put_many stores it (an integer in [0, 2**63), NULL otherwise: null,
# absent, negative, past BIGINT, not an integer), the same on both stores. SQLite: an integer
# past 64 bits is json_type 'integer' but extracted as a REAL, which migration 13 stored.
_SQLITE_START = ("CASE WHEN json_type(body, '$.start_time_unix_nano') = 'integer' "
                 "AND typeof(json_extract(body, '$.start_time_unix_nano')) = 'integer' "
                 "AND json_extract(body, '$.start_time_unix_nano') >= 0 "
                 "THEN json_extract(body, '$.start_time_unix_nano') END")
# PostgreSQL reads the body's text (a body holding a NUL escape, span content stored as text,
# is refused by json and jsonb alike): the key at the body's top level, reached over its
# scalar members (a string skipped whole: a quote inside one is escaped), before its first
# object or array (the run's start comes before its counts and steps). Migration 13 took the
# first key of that name holding digits, the first step's start when the run's was null or
# past BIGINT. Within BIGINT, the CASEs in order (no other text cast).
_PG_START = (r"""(SELECT CASE WHEN s ~ '^[0-9]{1,19}$' THEN CASE WHEN s::numeric < """
             r"""9223372036854775808 THEN s::bigint END END FROM (SELECT substring(body from """
             r"""'^\{(?:"(?:[^"\\]|\\.)*"|[^"{}\[\]])*"start_time_unix_nano": ([^,}]*)') """
             r"""AS s) b)""")

SQLITE: tuple[Migration, ...] = (
    (1, "evaluations and feedback", (
        """CREATE TABLE IF NOT EXISTS evaluations (
            trace_id TEXT PRIMARY KEY,
            revision INTEGER NOT NULL,
            evaluated_at_ns INTEGER NOT NULL,
            service TEXT,
            agent TEXT,
            task_id TEXT,
            status TEXT NOT NULL,
            passed INTEGER,
            body TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS evaluations_by_time ON evaluations (evaluated_at_ns)",
        """CREATE TABLE IF NOT EXISTS feedback (
            trace_id TEXT PRIMARY KEY,
            outcome TEXT NOT NULL,
            received_at_ns INTEGER NOT NULL
        )""",
    )),
    (2, "issues catalogue", (_SQLITE_CATALOGUE,)),
    (3, "agent history", (
        """CREATE TABLE IF NOT EXISTS agent_history (
            service     TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            agent       TEXT NOT NULL,
            seen_ns     INTEGER NOT NULL,
            PRIMARY KEY (service, fingerprint, agent)
        )""",
        "CREATE INDEX IF NOT EXISTS agent_history_by_service ON agent_history "
        "(service, seen_ns)",
        "CREATE INDEX IF NOT EXISTS agent_history_by_time ON agent_history (seen_ns)",
    )),
    (4, "evaluation content digest", (
        "ALTER TABLE evaluations ADD COLUMN content_digest TEXT",
    )),
    (5, "issue share history", (_SQLITE_SHARES,)),
    (6, "evaluation session id", (
        "ALTER TABLE evaluations ADD COLUMN session_id TEXT",
        "CREATE INDEX IF NOT EXISTS evaluations_by_session ON evaluations "
        "(session_id, evaluated_at_ns) WHERE session_id IS NOT NULL",
    )),
    (7, "sessions", sessions_table("TEXT", "INTEGER", "INTEGER", "")),
    (8, "feedback by time", (_FEEDBACK_BY_TIME,)),
    (9, "sessions by service", sessions_rekey("TEXT", "INTEGER", "INTEGER", "", "char")),
    (10, "session events owed", sessions_events("INTEGER", "")),
    (11, "session keys of shorter services", sessions_shorter_keys("char", "INSTR")),
    (12, "issues by service", (_sqlite_catalogue_service,)),
    (13, "session turns by start", (
        _sqlite_started,
        _backfill_started(_SQLITE_START),
        _TURNS_BY_START,
    )),
    (14, "issues still to name", (_sqlite_catalogue_unnamed,)),
    (15, "text with NUL as U+FFFD", (nul_text.rewrite_sqlite,)),
    (16, "evaluation span ids", (_sqlite_span_ids,)),
    (17, "run starts read again", (_backfill_started(_SQLITE_START, "IS NOT"),)),
    (18, "session first completions", (_sqlite_first_completion,)),
    (19, "run first evaluations", (_sqlite_first_evaluated,)),
    (20, "evaluation row versions", (_sqlite_row_version,)),
    (21, "results owed", (_RESULTS_OWED.format("INTEGER"),)),
)

# The body is TEXT holding the JSON as written (not jsonb): key order kept, and span content's
# "\u0000" escapes, which jsonb refuses, stored like any other text. Trace ids compare
# bytewise (COLLATE "C"), as in SQLite: the same keyset order whatever the database locale.
POSTGRESQL: tuple[Migration, ...] = (
    (1, "evaluations and feedback", (
        """CREATE TABLE IF NOT EXISTS evaluations (
            trace_id TEXT COLLATE "C" PRIMARY KEY,
            revision INTEGER NOT NULL,
            evaluated_at_ns BIGINT NOT NULL,
            service TEXT,
            agent TEXT,
            task_id TEXT,
            status TEXT NOT NULL,
            passed BOOLEAN,
            body TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS evaluations_by_time ON evaluations (evaluated_at_ns)",
        """CREATE TABLE IF NOT EXISTS feedback (
            trace_id TEXT PRIMARY KEY,
            outcome TEXT NOT NULL,
            received_at_ns BIGINT NOT NULL
        )""",
    )),
    (2, "issues catalogue", (
        """CREATE TABLE IF NOT EXISTS issues_catalogue (
            issue_id    TEXT PRIMARY KEY,
            level       TEXT NOT NULL,
            node        TEXT NOT NULL,
            embedding   TEXT NOT NULL,
            title       TEXT NOT NULL,
            description TEXT NOT NULL,
            centroid    TEXT NOT NULL,
            first_seen  DOUBLE PRECISION NOT NULL,
            last_seen   DOUBLE PRECISION NOT NULL,
            last_share  DOUBLE PRECISION NOT NULL
        )""",
    )),
    (3, "agent history", (
        """CREATE TABLE IF NOT EXISTS agent_history (
            service     TEXT COLLATE "C" NOT NULL,
            fingerprint TEXT COLLATE "C" NOT NULL,
            agent       TEXT COLLATE "C" NOT NULL,
            seen_ns     BIGINT NOT NULL,
            PRIMARY KEY (service, fingerprint, agent)
        )""",
        "CREATE INDEX IF NOT EXISTS agent_history_by_service ON agent_history "
        "(service, seen_ns)",
        "CREATE INDEX IF NOT EXISTS agent_history_by_time ON agent_history (seen_ns)",
    )),
    (4, "evaluation content digest", (
        "ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS content_digest TEXT",
    )),
    (5, "issue share history", (
        """CREATE TABLE IF NOT EXISTS issue_shares (
            issue_id    TEXT NOT NULL,
            at          DOUBLE PRECISION NOT NULL,
            share       DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (issue_id, at)
        )""",
    )),
    (6, "evaluation session id", (
        'ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS session_id TEXT COLLATE "C"',
        "CREATE INDEX IF NOT EXISTS evaluations_by_session ON evaluations "
        "(session_id, evaluated_at_ns) WHERE session_id IS NOT NULL",
    )),
    (7, "sessions", sessions_table("TEXT", "BIGINT", "BOOLEAN", ' COLLATE "C"')),
    (8, "feedback by time", (_FEEDBACK_BY_TIME,)),
    (9, "sessions by service", sessions_rekey("TEXT", "BIGINT", "BOOLEAN", ' COLLATE "C"',
                                              "chr")),
    (10, "session events owed", sessions_events("BIGINT", " IF NOT EXISTS")),
    (11, "session keys of shorter services", sessions_shorter_keys("chr", "STRPOS")),
    (12, "issues by service", (_CATALOGUE_SERVICE.replace("ADD COLUMN",
                                                          "ADD COLUMN IF NOT EXISTS"),)),
    (13, "session turns by start", (
        _STARTED.format("BIGINT").replace("ADD COLUMN", "ADD COLUMN IF NOT EXISTS"),
        _backfill_started(_PG_START),
        _TURNS_BY_START,
    )),
    (14, "issues still to name", (_CATALOGUE_UNNAMED.replace("ADD COLUMN",
                                                             "ADD COLUMN IF NOT EXISTS"),)),
    (15, "text with NUL as U+FFFD", ()),  # PostgreSQL text never held NUL
    (16, "evaluation span ids", (
        "ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS span_ids TEXT",
    )),
    (17, "run starts read again", (_backfill_started(_PG_START, "IS DISTINCT FROM"),)),
    (18, "session first completions", sessions_first_completion("BIGINT", " IF NOT EXISTS")),
    (19, "run first evaluations", (
        _FIRST_EVALUATED.format("BIGINT").replace("ADD COLUMN", "ADD COLUMN IF NOT EXISTS"),
        _FIRST_EVALUATED_BACKFILL,
    )),
    (20, "evaluation row versions", (
        _ROW_VERSION.format("BIGINT").replace("ADD COLUMN", "ADD COLUMN IF NOT EXISTS"),)),
    (21, "results owed", (_RESULTS_OWED.format("BIGINT"),)),
)

LATEST = SQLITE[-1][0]
assert POSTGRESQL[-1][0] == LATEST, "both stores have the same migrations"

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    applied_at_ns BIGINT NOT NULL
)"""

_CURRENT_VERSION = "SELECT COALESCE(MAX(version), 0) FROM schema_version"

# pg_advisory_xact_lock key serializing migrations across the fleet ("otel-eval schema").
_MIGRATION_LOCK = 0x6F74656C5F736368


class SchemaError(RuntimeError):
    """The store's schema is newer than this otel-eval knows (or, opened read-only, not the
    one it reads, or no store at all)."""


def _check(current: int) -> None:
    if current > LATEST:
        raise SchemaError(f"store schema version {current} is newer than this otel-eval knows "
                          f"({LATEST}): upgrade otel-eval before pointing it at this store")


def _require_latest(current: int | None) -> None:
    """A store opened read-only (``calibrate``, ``show``) is read as it is: refused unless its
    schema is this otel-eval's (``current``: its version, None without a version table)."""
    if current is None:
        raise SchemaError("not an otel-eval store (no schema_version table): give the store "
                          "serve writes (store.path, store.url)")
    _check(current)
    if current < LATEST:
        raise SchemaError(f"store schema version {current} is older than this otel-eval "
                          f"reads ({LATEST}): a read never migrates a store; start serve on "
                          "it once (it migrates at start), or use the otel-eval that wrote it")


def check_sqlite(db: sqlite3.Connection) -> None:
    """Refuse a SQLite store opened read-only whose schema is not ``LATEST`` (``SchemaError``);
    reads only."""
    try:
        current = db.execute(_CURRENT_VERSION).fetchone()[0]
    except sqlite3.OperationalError as e:
        if "no such table" not in str(e):
            raise
        current = None
    _require_latest(current)


def check_postgresql(conn: Any) -> None:
    """``check_sqlite`` on a psycopg connection."""
    found = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()[0]
    _require_latest(conn.execute(_CURRENT_VERSION).fetchone()[0] if found else None)


def migrate_sqlite(db: sqlite3.Connection) -> list[int]:
    """Apply the missing migrations to an autocommit (``isolation_level=None``) connection;
    the versions applied. An up-to-date store is only read: a process opening it (a restarted
    evaluation worker) does not wait for another connection's write lock."""
    try:
        current = db.execute(_CURRENT_VERSION).fetchone()[0]
    except sqlite3.OperationalError:  # no version table yet: a new store
        current = 0
    if current >= LATEST:
        _check(current)
        return []
    db.execute("BEGIN IMMEDIATE")  # the write lock first: two processes migrate one by one
    try:
        applied = _apply_missing(db.execute, SQLITE, "INSERT INTO schema_version VALUES (?, ?, ?)")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return applied


def migrate_postgresql(conn: Any) -> list[int]:
    """Apply the missing migrations on a psycopg connection, in one transaction holding the
    migration advisory lock; the versions applied. An up-to-date store is only read, as
    SQLite's: a process opening it during a failover's read-only window (a serve starting,
    an evaluation worker restarted) is not refused for a ``CREATE TABLE IF NOT EXISTS``."""
    if conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()[0]:
        current = conn.execute(_CURRENT_VERSION).fetchone()[0]
        if current >= LATEST:
            _check(current)
            return []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        return _apply_missing(conn.execute, POSTGRESQL,
                              "INSERT INTO schema_version VALUES (%s, %s, %s)")


def _apply_missing(execute: Callable[..., Any], migrations: tuple[Migration, ...],
                   insert_version: str) -> list[int]:
    """Inside the caller's locked transaction: create the version table, refuse a newer store,
    run each migration past the recorded version and record it; the versions applied.
    ``insert_version`` carries the engine's paramstyle (``?`` for SQLite, ``%s`` psycopg)."""
    execute(_VERSION_TABLE)
    current = execute(_CURRENT_VERSION).fetchone()[0]
    _check(current)
    applied = []
    for version, description, statements in migrations:
        if version <= current:
            continue
        for statement in statements:
            if callable(statement):
                statement(execute)
            else:
                execute(statement)
        execute(insert_version, (version, description, time.time_ns()))
        applied.append(version)
    return applied


def sqlite_catalogue_tables() -> tuple[str, str]:
    """The catalogue's tables (issues, their share history), for a catalogue in a SQLite file
    of its own (issues.store_path)."""
    return _SQLITE_CATALOGUE, _SQLITE_SHARES


def make_sqlite_catalogue(db: sqlite3.Connection) -> None:
    """The catalogue's tables on a SQLite connection (a file of its own, ``:memory:``, or the
    store's file, whose migrations made them already: then a no-op)."""
    for table in sqlite_catalogue_tables():
        db.execute(table)
    _sqlite_catalogue_service(db.execute)  # a file of its own: new, or made before it
    _sqlite_catalogue_unnamed(db.execute)
    nul_text.rewrite_catalogue(db.execute)  # a file written before NUL was stored as U+FFFD
    db.commit()
