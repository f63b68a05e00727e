"""Stage: store, sessions kept. The ``sessions`` table (migration 7): one row per
conversation, the state the session completion job (``evaluate.sessions.job``) works from,
so turns stored by any worker, process or Kafka consumer of the fleet make one session and
each completion happens once.

    put_many (a turn with a session id) -> upsert: state open, last_turn_ns, turns, bytes
    job: due (open, last turn older than idle; or open longer than the maximum duration)
         -> claim (open -> claimed, a token)
         -> evaluate -> complete (claimed by that token -> complete, the record stored)
    judge stage (writer thread): put_session_judge -> the record's ``judge`` part, onto the
         completion it judged
    events (migration 10): complete marks the completion's event owed (``events_due_ns``,
         the completer's lease) -> session_events_sent once the events sink is done with it;
         the job sends those whose lease ended (lease_session_events: one winner)

States: ``open`` (turns may come), ``claimed`` (a process evaluates it: ``claim`` is its
token, ``claimed_at_ns`` when), ``complete`` (``body`` holds the record). A turn stored while
claimed or complete sets the row ``open`` again and drops the claim, so a claimer that
finishes after it stores nothing (its ``complete`` matches no row) and the session is
evaluated again at its next idle. A claim whose process died (kill -9 between claim and
complete) is taken over once it is older than the job's ``claim_timeout_s``.

``turns`` counts trace ids (a re-evaluated turn is not counted again; one whose conversation
id changed moves: ``session_writes``); ``bytes`` the JSON of each turn as first stored. One
SQL text per statement, ``{m}`` the placeholder (``?`` SQLite, ``%s`` psycopg); the dialects
differ only in the column types of the table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from otel_eval.store.sessions import (
    FIRST_COMPLETED,
    KEY_SEPARATOR,
    MAX_SERVICE_CHARS,
    session_key,
)

__all__ = ["KeptSessions", "SessionRow", "SessionWrites", "events", "first_completion", "rekey",
           "session_writes", "sql"]


def table(text: str, bigint: str, boolean: str, collate: str) -> tuple[str, ...]:
    """Migration 7's statements in one dialect (and the backfill of existing turns)."""
    return (
        _create("sessions", text, bigint, boolean, collate),
        "CREATE INDEX IF NOT EXISTS sessions_by_state ON sessions (state, last_turn_ns)",
        "INSERT INTO sessions (session_id, state, first_turn_ns, last_turn_ns, turns, bytes) "
        "SELECT session_id, 'open', MIN(evaluated_at_ns), MAX(evaluated_at_ns), COUNT(*), "
        "SUM(LENGTH(body)) FROM evaluations WHERE session_id IS NOT NULL GROUP BY session_id",
    )


# The service's characters a key held from migration 9 to 11 (a shipped migration's text
# never changes: ``MAX_SERVICE_CHARS`` is the bound now).
_V9_SERVICE_CHARS = 1024

_KEPT = ("state, first_turn_ns, last_turn_ns, turns, bytes, claim, claimed_at_ns, completions, "
         "completed_at_ns, passed, body")


def rekey(text: str, bigint: str, boolean: str, collate: str, char: str) -> tuple[str, ...]:
    """Migration 9's statements in one dialect (``char``: its function of a code point):
    sessions keyed by ``sessions.session_key`` (the conversation id within its service), in
    the evaluations' ``session_id`` and the ``sessions`` table. A session whose turns all
    have one service keeps its row (state, claim, completions, record) under its new key;
    any other key (a session whose turns came from several services, split; ids that only a
    replaced separator told apart, joined) gets an open row from its turns, completed anew."""
    def part(column: str) -> str:
        return f"REPLACE({column}, {char}(31), {char}(65533))"

    # SUBSTR counts characters, on both engines, as the key's cut does
    named = part("COALESCE(service, '')")
    service = f"SUBSTR({named}, 1, {_V9_SERVICE_CHARS})"
    keyed = f"{part('session_id')} || {char}(31) || {service}"
    turns = "FROM evaluations WHERE session_id IS NOT NULL"
    one_key = (f"SELECT session_id AS id, MIN({keyed}) AS k {turns} GROUP BY session_id "
               f"HAVING COUNT(DISTINCT {keyed}) = 1")
    shared = f"SELECT {keyed} {turns} GROUP BY {keyed} HAVING COUNT(DISTINCT session_id) > 1"
    return (
        _create("sessions_keyed", text, bigint, boolean, collate),
        f"INSERT INTO sessions_keyed (session_id, {_KEPT}) SELECT one.k, "
        f"{', '.join(f's.{c.strip()}' for c in _KEPT.split(','))} FROM sessions s "
        f"JOIN ({one_key}) one ON one.id = s.session_id WHERE one.k NOT IN ({shared})",
        "INSERT INTO sessions_keyed (session_id, state, first_turn_ns, last_turn_ns, turns, "
        "bytes) SELECT k, 'open', MIN(at), MAX(at), COUNT(*), SUM(n) FROM (SELECT "
        f"{keyed} AS k, evaluated_at_ns AS at, LENGTH(body) AS n {turns}) t "
        "WHERE k NOT IN (SELECT session_id FROM sessions_keyed) GROUP BY k",
        f"UPDATE evaluations SET session_id = {keyed} WHERE session_id IS NOT NULL",
        "DROP TABLE sessions",
        "ALTER TABLE sessions_keyed RENAME TO sessions",
        "CREATE INDEX IF NOT EXISTS sessions_by_state ON sessions (state, last_turn_ns)",
    )


def shorter_keys(char: str, instr: str) -> tuple[str, ...]:
    """Migration 11's statements in one dialect (``char``: its function of a code point,
    ``instr``: its position of a substring): the keys of turns whose service.name is longer
    than ``MAX_SERVICE_CHARS`` hold its first ``MAX_SERVICE_CHARS`` (they held 1,024), and
    the sessions of the keys that change (old and new) get an open row from their turns,
    completed anew. Other keys, and their rows, are left as they are."""
    separator = f"{instr}(session_id, {char}(31))"
    named = f"REPLACE(COALESCE(service, ''), {char}(31), {char}(65533))"
    keyed = (f"SUBSTR(session_id, 1, {separator} - 1) || {char}(31) || "
             f"SUBSTR({named}, 1, {MAX_SERVICE_CHARS})")
    longer = (f"FROM evaluations WHERE session_id IS NOT NULL AND {separator} > 0 AND "
              f"LENGTH(service) > {MAX_SERVICE_CHARS}")
    return (
        f"DELETE FROM sessions WHERE session_id IN (SELECT session_id {longer}) "
        f"OR session_id IN (SELECT {keyed} {longer})",
        f"UPDATE evaluations SET session_id = {keyed} WHERE session_id IS NOT NULL AND "
        f"{separator} > 0 AND LENGTH(service) > {MAX_SERVICE_CHARS}",
        "INSERT INTO sessions (session_id, state, first_turn_ns, last_turn_ns, turns, bytes) "
        "SELECT session_id, 'open', MIN(evaluated_at_ns), MAX(evaluated_at_ns), COUNT(*), "
        "SUM(LENGTH(body)) FROM evaluations WHERE session_id IS NOT NULL AND session_id NOT IN "
        "(SELECT session_id FROM sessions) GROUP BY session_id",
    )


def events(bigint: str, if_not_exists: str) -> tuple[str, ...]:
    """Migration 10's statements in one dialect: the time a completion's event is owed from
    (NULL: none owed), and its index (the job reads the due ones at each check)."""
    return (
        f"ALTER TABLE sessions ADD COLUMN{if_not_exists} events_due_ns {bigint}",
        "CREATE INDEX IF NOT EXISTS sessions_by_events_due ON sessions (events_due_ns)",
    )


def first_completion(bigint: str, if_not_exists: str) -> tuple[str, ...]:
    """Migration 18's statements in one dialect: when the session was first completed, the
    completion the session metrics count (a later one, after a late turn re-opened it,
    counts only ``sessions_reopened``), so a metric's window lists it (``counted_since``).
    Backfilled where the completion stored is the first; a row completed more than once
    before it holds NULL (when its first completion was is not known: in no window)."""
    return (
        f"ALTER TABLE sessions ADD COLUMN{if_not_exists} first_completed_at_ns {bigint}",
        "UPDATE sessions SET first_completed_at_ns = completed_at_ns WHERE completions = 1",
    )


def _create(name: str, text: str, bigint: str, boolean: str, collate: str) -> str:
    return (
        f"""CREATE TABLE IF NOT EXISTS {name} (
            session_id {text}{collate} PRIMARY KEY,
            state {text} NOT NULL,
            first_turn_ns {bigint} NOT NULL,
            last_turn_ns {bigint} NOT NULL,
            turns INTEGER NOT NULL,
            bytes {bigint} NOT NULL,
            claim {text},
            claimed_at_ns {bigint},
            completions INTEGER NOT NULL DEFAULT 0,
            completed_at_ns {bigint},
            passed {boolean},
            body {text}
        )""")


class SessionRow(NamedTuple):
    """What the store keeps of one session (``session_record``)."""

    state: str  # open | claimed | complete
    record: dict[str, Any] | None  # the record of the last completion, if any
    completions: int  # times completed (more than one: a turn came after a completion)
    turns: int  # turns stored
    last_turn_ns: int


_NO_FIRST = 1 << 62  # a first turn time no turn has: min() takes any real one


class SessionWrites(NamedTuple):
    """What a batch of turns changes in the ``sessions`` table (``session_writes``)."""

    upserts: list[tuple[str, int, int, int, int]]  # (id, first ns, last ns, turns, bytes)
    left: list[tuple[str]]  # sessions a turn moved out of: deleted if none is left


def session_writes(rows: Sequence[tuple[Any, ...]],
                   before: Sequence[str | bool | None]) -> SessionWrites:
    """The sessions' rows of a batch of evaluation rows (``base.ROW_COLUMNS``: 2
    evaluated_at_ns, 8 body, 10 session_id). ``before``, per row: False for a new trace, else
    the session id of the row it replaced (None: it had none). A turn is counted once; a
    re-evaluated turn whose conversation id changed (its late spans said another) counts in
    its new session and leaves the old one: an upsert of -1 turn, which opens it again to be
    completed without it. Sorted by id (two writers lock the rows in one order: no
    deadlock)."""
    out: dict[str, list[int]] = {}
    left: set[str] = set()
    for row, was in zip(rows, before, strict=True):
        session_id = row[10]
        moved = was is not False and was != session_id
        if moved and isinstance(was, str):
            # no turn time: the first and last turn of the old session stay as they are
            out.setdefault(was, [_NO_FIRST, 0, 0, 0])[2] -= 1
            left.add(was)
        if session_id is None:
            continue
        at = int(row[2])
        entry = out.setdefault(session_id, [at, at, 0, 0])
        entry[0], entry[1] = min(entry[0], at), max(entry[1], at)
        if was is False or moved:
            entry[2] += 1
            entry[3] += len(row[8])
    return SessionWrites([(sid, *values) for sid, values in sorted(out.items())],  # type: ignore[misc]
                         [(sid,) for sid in sorted(left)])


def row_of(found: tuple[Any, ...]) -> SessionRow:
    state, body, completions, turns, last = found
    return SessionRow(str(state), json.loads(body) if body else None, int(completions),
                      int(turns), int(last))


# When an open session opened: the later of its first turn (since its last completion)
# and that completion
_OPENED = ("CASE WHEN completed_at_ns > first_turn_ns THEN completed_at_ns "
           "ELSE first_turn_ns END")


def sql(m: str, char: str, instr: str) -> dict[str, str]:
    """The statements, with placeholder ``m`` (``char``: the dialect's function of a code
    point, ``instr``: its position of a substring)."""
    service = f"SUBSTR(session_id, {instr}(session_id, {char}(31)) + 1)"  # the key's service
    return {
        "upsert": f"INSERT INTO sessions (session_id, state, first_turn_ns, last_turn_ns, "
                  f"turns, bytes) VALUES ({m}, 'open', {m}, {m}, {m}, {m}) "
                  "ON CONFLICT (session_id) DO UPDATE SET state = 'open', claim = NULL, "
                  # re-opened: its open time is its first turn since the completion (a
                  # conversation resumed days later is not open since its last completion)
                  "first_turn_ns = CASE WHEN sessions.state = 'complete' AND "
                  f"excluded.first_turn_ns < {_NO_FIRST} THEN excluded.first_turn_ns "
                  "ELSE sessions.first_turn_ns END, "
                  "last_turn_ns = CASE WHEN excluded.last_turn_ns > sessions.last_turn_ns "
                  "THEN excluded.last_turn_ns ELSE sessions.last_turn_ns END, "
                  "turns = sessions.turns + excluded.turns, "
                  "bytes = sessions.bytes + excluded.bytes",
        # a session its last turn moved out of (``session_writes``)
        "gone": f"DELETE FROM sessions WHERE session_id = {m} AND turns <= 0",
        # idle: open, the last turn before the cutoff; oldest first
        "idle": f"SELECT session_id, last_turn_ns FROM sessions WHERE state = 'open' AND "
                f"last_turn_ns < {m} ORDER BY last_turn_ns, session_id LIMIT {m}",
        # long: open since before the cutoff (its first turn, or its first turn since its
        # last completion: the later of the two times, rows written before re-opening set
        # first_turn_ns holding the completion's); oldest first
        "long": f"SELECT session_id, last_turn_ns FROM sessions WHERE state = 'open' AND "
                f"{_OPENED} < {m} ORDER BY {_OPENED}, session_id LIMIT {m}",
        # the open-sessions bound's victims: each open session ranked by how many of its
        # service's open sessions are newer, the highest first (the service holding the
        # most gives way, its oldest first, until it holds no more than the next), then
        # oldest first: a service opening new ids completes its own, not others'
        "crowded": f"SELECT session_id, last_turn_ns FROM (SELECT session_id, last_turn_ns, "
                   f"ROW_NUMBER() OVER (PARTITION BY {service} ORDER BY last_turn_ns DESC, "
                   "session_id DESC) AS held FROM sessions WHERE state = 'open') ranked "
                   f"ORDER BY held DESC, last_turn_ns, session_id LIMIT {m}",
        # claims of processes that died (or hang): claimed before the cutoff
        "stale": f"SELECT session_id, last_turn_ns FROM sessions WHERE state = 'claimed' "
                 f"AND claimed_at_ns < {m} ORDER BY claimed_at_ns LIMIT {m}",
        "claim": f"UPDATE sessions SET state = 'claimed', claim = {m}, claimed_at_ns = {m} "
                 f"WHERE session_id = {m} AND last_turn_ns = {m} AND (state = 'open' OR "
                 f"(state = 'claimed' AND claimed_at_ns < {m}))",
        # the first completion's time kept (migration 18): the one the metrics count (one an
        # earlier release's worker stored without it, in a rolling upgrade: FIRST_COMPLETED)
        "complete": f"UPDATE sessions SET state = 'complete', claim = NULL, body = {m}, "
                    f"passed = {m}, completed_at_ns = {m}, completions = completions + 1, "
                    f"first_completed_at_ns = CASE WHEN completions = 0 THEN {m} "
                    f"ELSE {FIRST_COMPLETED} END, events_due_ns = {m} "
                    f"WHERE session_id = {m} AND state = 'claimed' AND claim = {m}",
        # completions whose event is owed, its holder's lease over (``events``): oldest first
        "events_due": f"SELECT session_id, completions, events_due_ns FROM sessions WHERE "
                      f"events_due_ns < {m} ORDER BY events_due_ns LIMIT {m}",
        "events_lease": f"UPDATE sessions SET events_due_ns = {m} WHERE session_id = {m} AND "
                        f"completions = {m} AND events_due_ns = {m}",
        "events_sent": f"UPDATE sessions SET events_due_ns = NULL WHERE session_id = {m} AND "
                       f"completions = {m}",
        # whose claim the session is under (a claim whose answer was lost: ``postgresql``)
        "claimed_by": f"SELECT claim FROM sessions WHERE session_id = {m}",
        # whose lease the owed event is under (a lease whose answer was lost: ``postgresql``)
        "events_held": f"SELECT events_due_ns FROM sessions WHERE session_id = {m} AND "
                       f"completions = {m}",
        "record": f"SELECT state, body, completions, turns, last_turn_ns FROM sessions "
                  f"WHERE session_id = {m}",
        # the session judge's write: onto the completion it judged, the body it read
        "judged": f"SELECT body FROM sessions WHERE session_id = {m} AND state = 'complete' "
                  f"AND completions = {m}",
        "judge": f"UPDATE sessions SET body = {m} WHERE session_id = {m} AND "
                 f"state = 'complete' AND completions = {m} AND body = {m}",
        # not complete: the two states named, a range of sessions_by_state each (``<>``
        # scanned the completed ones too, as many as conversation ids were ever sent)
        "open": "SELECT COUNT(*) FROM sessions WHERE state IN ('open', 'claimed')",
        # open and not claimed: what the open-sessions bound may still complete
        "unclaimed": "SELECT COUNT(*) FROM sessions WHERE state = 'open'",
        # the keys in a range (a conversation id's, in every service: ``keys_of``)
        "keys": f"SELECT session_id FROM sessions WHERE session_id >= {m} AND session_id < {m} "
                f"ORDER BY session_id LIMIT {m}",
        # retention: a batch of the sessions whose last turn is older than the cutoff (every
        # state named: a range of sessions_by_state each, not a scan of the table a batch)
        "delete": f"DELETE FROM sessions WHERE session_id IN (SELECT session_id FROM "
                  f"sessions WHERE state IN ('open', 'claimed', 'complete') AND "
                  f"last_turn_ns < {m} LIMIT {m})",
    }


class KeptSessions:
    """The session methods of ``EvaluationStore``, for both stores: each gives
    ``_session_sql`` (its statements) and ``_session_exec(sql, args)`` -> (rows, rowcount),
    one autocommit statement (the claim and the completion are each one atomic UPDATE)."""

    _session_sql: dict[str, str]

    def _session_exec(self, statement: str, args: Sequence[Any]) -> tuple[list[Any], int]:
        raise NotImplementedError

    def _one(self, name: str, *args: Any) -> tuple[list[Any], int]:
        return self._session_exec(self._session_sql[name], args)

    def _again(self, name: str, *args: Any) -> tuple[list[Any], int]:
        """``_one`` for an idempotent statement: a store whose session can be lost
        (PostgreSQL) tries it once more on a new connection."""
        return self._one(name, *args)

    def sessions_due(self, idle_before_ns: int, claim_before_ns: int,
                     limit: int) -> list[tuple[str, int]]:
        """(session id, last turn ns) of open sessions idle since before ``idle_before_ns``
        and of claims taken before ``claim_before_ns`` (their process died), at most
        ``limit`` of each, oldest first."""
        idle = self._one("idle", idle_before_ns, limit)[0]
        stale = self._one("stale", claim_before_ns, limit)[0]
        return [(str(r[0]), int(r[1])) for r in [*idle, *stale]]

    def sessions_open_since(self, before_ns: int, limit: int) -> list[tuple[str, int]]:
        """(session id, last turn ns) of at most ``limit`` open sessions not opened (a
        first turn, or a first turn since a completion) since ``before_ns``
        (``sessions.max_session_duration_s``), oldest first. Reads every open session's row
        (no index on these times): 11 ms at 100,000 open sessions on SQLite, against 4 ms
        for the open count the job takes at each check."""
        return [(str(r[0]), int(r[1])) for r in self._one("long", before_ns, limit)[0]]

    def session_keys(self, conversation_id: str, limit: int) -> list[str]:
        """The keys of the sessions of ``conversation_id``, in any service (at most
        ``limit``, by key): those starting with the id and the separator. One range read of
        the table's primary key."""
        low = session_key("", conversation_id)
        high = low[:-1] + chr(ord(KEY_SEPARATOR) + 1)
        return [str(r[0]) for r in self._one("keys", low, high, limit)[0]]

    def crowded_open_sessions(self, limit: int, keep: int = 0) -> list[tuple[str, int]]:
        """(session id, last turn ns) of at most ``limit`` open sessions to complete for the
        open-sessions bound, and no more than the open ones past ``keep`` (the bound),
        counted now without the claimed ones: those another process is completing are no
        longer open (counted, a second process checking meanwhile completed as many again);
        those of the services holding the most open sessions, the oldest of each first (a
        service gives way until it holds no more than the next one), so a service opening
        new ids completes its own, not another's conversations. Ranks every open session (a
        window over the table): read only past the bound."""
        limit = min(limit, int(self._one("unclaimed")[0][0][0]) - keep)
        if limit <= 0:
            return []
        return [(str(r[0]), int(r[1])) for r in self._one("crowded", limit)[0]]

    def claim_session(self, session_id: str, last_turn_ns: int, claim: str, now_ns: int,
                      claim_before_ns: int) -> bool:
        """Take the session to evaluate it: True for one caller in the fleet (open with this
        last turn, or claimed before ``claim_before_ns``)."""
        return self._one("claim", claim, now_ns, session_id, last_turn_ns,
                         claim_before_ns)[1] == 1

    def complete_session(self, session_id: str, claim: str, record: dict[str, Any],
                         now_ns: int, events_due_ns: int | None = None) -> bool:
        """Store the record of a session claimed with ``claim``; False (nothing stored) when
        a turn came meanwhile (the row is open again) or the claim was taken over.
        ``events_due_ns``: the completion's event is owed (``session_events_due`` from then
        on), in the same statement; None: no event goes out."""
        verdict = record.get("verdict") or {}
        passed = verdict.get("passed") if isinstance(verdict, dict) else None
        return self._one("complete", json.dumps(record), passed, now_ns, now_ns,
                         events_due_ns, session_id, claim)[1] == 1

    # The completion's event is owed from its store until the events sink delivered it (or
    # dropped it for good): ``events_due_ns`` is when another process may send it, the lease
    # of the one that completed it (or sent it last). A process that dies holding it, or
    # stops before its sink delivered, leaves the mark: the fleet sends it once the lease is
    # over (at least once). A later completion replaces the mark with its own.

    def session_events_due(self, before_ns: int, limit: int) -> list[tuple[str, int, int]]:
        """(session id, completions, due ns) of at most ``limit`` completions whose event is
        owed and whose lease ended before ``before_ns``, oldest first."""
        return [(str(r[0]), int(r[1]), int(r[2]))
                for r in self._one("events_due", before_ns, limit)[0]]

    def lease_session_events(self, session_id: str, completions: int, due_ns: int,
                             until_ns: int) -> bool:
        """Take the owed event of a ``session_events_due`` row until ``until_ns``: True for
        one caller in the fleet (the mark still ``due_ns``)."""
        return self._one("events_lease", until_ns, session_id, completions, due_ns)[1] == 1

    def session_events_sent(self, entries: Sequence[tuple[str, int]]) -> None:
        """The events of these (session id, completions) were delivered or dropped for good:
        no longer owed (a later completion's mark stays)."""
        for session_id, completions in entries:
            self._again("events_sent", session_id, completions)

    def put_session_judge(self, session_id: str, completions: int,
                          judge: dict[str, Any]) -> bool:
        """The session judge's result onto the stored record of completion number
        ``completions`` (1 the first): False, nothing written, when the session was re-opened
        or completed again since (that completion gets its own judgement). One writer of the
        ``judge`` part (``evaluate.judge.stage``); the body is replaced only if it is the one
        read (compare and set), so a completion landing in between is never overwritten."""
        rows = self._one("judged", session_id, completions)[0]
        if not rows or not rows[0][0]:
            return False
        body = str(rows[0][0])
        record = json.loads(body)
        record["judge"] = judge
        return self._one("judge", json.dumps(record), session_id, completions, body)[1] == 1

    def session_record(self, session_id: str) -> SessionRow | None:
        rows = self._one("record", session_id)[0]
        return row_of(tuple(rows[0])) if rows else None

    def open_session_count(self) -> int:
        """Sessions not complete (open or claimed)."""
        return int(self._one("open")[0][0][0])
