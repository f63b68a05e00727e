"""Stage: store, reads. Sessions (conversations) as the store holds them: the turns stored
with a ``session_id`` (migration 6), whichever worker, process or Kafka consumer stored each.

A session is a conversation id within one service (``service.name``; "" without one), as
Langfuse and Phoenix scope sessions to a project: two services whose conversations share an
id (LangGraph's example ``thread_id`` "1", or a sender guessing one) make two sessions, so
one's turns never fail the other's conversation or page its owners. The store keys a
session by ``session_key(service, conversation id)`` (migration 9), in the evaluations'
``session_id`` column and the ``sessions`` table alike; records, the API, the web view and
events show the conversation id and the service apart (``split_session_key``).

``GET /v1/sessions`` takes a ``SessionQuery``:

    service, agent      the session's service / agent (its last turn's named agent, the one
                        its metrics count it under), as the metrics label them ("unknown":
                        none; ``query.label_condition``); the agent applied as ``passed`` is
                        (the store selects the sessions a turn of which has it)
    passed              true | false: the session's verdict (applied after the session is
                        evaluated on read: a page may hold fewer than ``limit`` sessions, and
                        then says where to go on with its cursor)
    detector            a session finding by this detector ("loop"), or of this kind
                        ("loop:repeated_across_turns"), or of one of these kinds
                        ("budget:session_turns,session_steps"): the shape
                        ``/v1/evaluations`` takes (``query.check_detector``); applied as
                        ``passed`` is
    since, until        the session's last turn's evaluation time, Unix seconds or RFC 3339;
                        since <= t < until
    counted_since, counted_until
                        the window the session metrics count the session in, as the alert's
                        and the dashboard's links give it: when its first completion was
                        stored (``sessions.first_completed_at_ns``, the instant the job
                        counted it; a later one, after a late turn re-opened the session,
                        counts only as re-opened), Unix seconds or RFC 3339; since <= t <
                        until. A session never completed is counted in no window
    counted_window      with ``counted_until``: the window before it, a Prometheus duration
                        ("1h"; ``query.windowed``), what a dashboard point over ``[$window]``
                        counts up to its time
    limit               1..200, default 20
    cursor              ``next_cursor`` of the previous page

Sessions are listed newest first by their last turn (evaluation time, then session id), the
cursor being the position after the last one returned (keyset pagination, as
``/v1/evaluations``). One SQL text per dialect (only the placeholder differs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from otel_eval.store.query import (
    QueryError,
    check_detector,
    decode_cursor,
    encode_cursor,
    filter_values,
    in_window,
    label_condition,
    page_limit,
    single_values,
    time_bounds,
    windowed,
)

__all__ = ["MAX_SESSION_LIMIT", "AmbiguousSession", "SessionCursor", "SessionQuery", "StoredTurns",
           "session_key", "session_list_sql", "session_service", "split_session_key",
           "turns_sql"]

MAX_SESSION_LIMIT = 200  # sessions per page (each is read and evaluated: its turns' bodies)
MAX_SESSION_ID_CHARS = 256  # as read (conventions.conversations.MAX_ID_CHARS)
MAX_SESSION_KEY_CHARS = 4096  # a key in a cursor: the id, the separator and the service
# A session key holds at most this much of the service.name: span content sets the name, and
# a key goes into cursors and links, which an unbounded name would make too long to send back
# (a 5,000-character name at the end of a page made the next page a 400). Longer names are
# cut, as a metric label cuts them; two services whose names differ only past it share
# sessions (no service names itself so). With the id's ``MAX_SESSION_ID_CHARS`` a key is at
# most 2,049 bytes of UTF-8, under what PostgreSQL's b-tree indexes take (2,704 bytes: a key
# of 1,024 characters of service was refused there, and the turn was not stored);
# migration 11 cut the keys of 1,024 that earlier versions wrote.
MAX_SERVICE_CHARS = 256
# Between a session key's conversation id and its service. One inside either is replaced (by
# U+FFFD, as text columns replace what no driver encodes), so a key has exactly one: two
# (service, id) pairs never share a key, and an id's keys are one range of them (the id and
# the separator first), which no other id's keys enter.
KEY_SEPARATOR = "\x1f"


def session_key(service: str | None, conversation_id: str) -> str:
    """How the store keys the session of ``conversation_id`` within ``service`` (its first
    ``MAX_SERVICE_CHARS``)."""
    return _part(conversation_id) + KEY_SEPARATOR + _part((service or "")[:MAX_SERVICE_CHARS])


def _part(text: str) -> str:
    return text.replace(KEY_SEPARATOR, "\ufffd")


def split_session_key(key: str) -> tuple[str, str]:
    """(service, conversation id) of a ``session_key`` (a separator either held: U+FFFD)."""
    conversation_id, _, service = key.partition(KEY_SEPARATOR)
    return service, conversation_id


MAX_SERVICES_NAMED = 20  # services an ambiguous conversation id's answer names, at most


def session_service(params: Mapping[str, Sequence[str]]) -> str | None:
    """The ``?service=`` of a session's URL (None: not given; "": the turns without one; a
    longer one than ``MAX_SERVICE_CHARS`` is cut, as the key cuts it); ``QueryError`` for any
    other parameter, or one given twice."""
    for name, given in params.items():
        if name != "service":
            raise QueryError(name, "unknown parameter (known: service)")
        if len(given) != 1:
            raise QueryError(name, "given more than once")
    service = params.get("service")
    return None if service is None else service[0]


class AmbiguousSession(LookupError):
    """A conversation id that turns of several services carry: which session is meant takes
    the service (``?service=``). ``services``: some of them (by name; more than
    ``MAX_SERVICES_NAMED``: that many and one more)."""

    def __init__(self, session_id: str, services: list[str]) -> None:
        super().__init__(session_id)
        self.session_id = session_id
        self.services = services
_TEXT = ("service", "agent", "detector")
# When a session was first completed (what the counted window selects on): the column, or
# for a session completed once without it, that completion (an earlier release's worker still
# running after migration 18, a rolling upgrade, completes sessions without setting it)
FIRST_COMPLETED = ("COALESCE(first_completed_at_ns, "
                   "CASE WHEN completions = 1 THEN completed_at_ns END)")
PARAMETERS = (*_TEXT, "passed", "since", "until", "counted_since",
              "counted_until", "counted_window", "limit", "cursor")


class StoredTurns(NamedTuple):
    """What the store holds of one session."""

    bodies: list[dict[str, Any]]  # the newest turns read, newest first
    total: int  # turns stored in all
    last_ns: int  # the newest turn's evaluation time (0: no turn)
    chars: int = 0  # of the bodies read, as stored (JSON): what holding them costs


@dataclass(frozen=True)
class SessionCursor:
    """Where the next page starts: after this session of the newest-first order."""

    last_ns: int
    session_id: str

    def encode(self) -> str:
        return encode_cursor(self.last_ns, self.session_id)

    @classmethod
    def decode(cls, text: str) -> SessionCursor:
        at, session_id = decode_cursor(
            text, lambda key: 0 < len(key) <= MAX_SESSION_KEY_CHARS)
        return cls(at, session_id)


@dataclass(frozen=True)
class SessionQuery:
    # The session's service / an agent of one of its turns; None = any.
    service: str | None = None
    agent: str | None = None
    # The session's verdict; None = any.
    passed: bool | None = None
    # "detector", "detector:kind" or "detector:kind,kind" of at least one session finding
    # (``query.check_detector``, as ``EvaluationQuery``'s); None = any.
    detector: str | None = None
    # The last turn's evaluation time bounds, Unix nanoseconds: since <= t < until.
    since_ns: int | None = None
    until_ns: int | None = None
    # When the session's first completion was stored, Unix nanoseconds: since <= t < until
    # (the window the session metrics counted it in; a session never completed matches none).
    counted_since_ns: int | None = None
    counted_until_ns: int | None = None
    # Page size, 1..200.
    limit: int = 20
    # Position after the previous page's last session; None = the newest.
    cursor: SessionCursor | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_SESSION_LIMIT:
            raise QueryError("limit", f"must be an integer in 1..{MAX_SESSION_LIMIT}")
        if self.detector is not None:
            check_detector(self.detector)

    @classmethod
    def from_params(cls, params: Mapping[str, Sequence[str]]) -> SessionQuery:
        """From URL query parameters (``urllib.parse.parse_qs`` output)."""
        values = single_values(params, PARAMETERS)
        kwargs = filter_values(values, _TEXT)
        time_bounds(values, kwargs)
        windowed(values, kwargs, "counted_window", "counted_since", "counted_until")
        page_limit(values, kwargs, MAX_SESSION_LIMIT)
        if values.get("cursor"):
            kwargs["cursor"] = SessionCursor.decode(values["cursor"])
        return cls(**kwargs)


def session_list_sql(q: SessionQuery, mark: str, after: SessionCursor | None,
                     n: int) -> tuple[str, list[Any]]:
    """SELECT (session_id, last turn's evaluated_at_ns) of the next ``n`` sessions after
    ``after`` matching ``q``'s service, agent and time filters, newest first (the counted
    window on the ``sessions`` table's completion time)."""
    where, args = ["session_id IS NOT NULL"], list[Any]()
    # service and agent as the metrics label them (query.label_condition: "unknown" is none)
    if q.service is not None:  # the service is part of the session's key: every turn's
        condition, given = label_condition("service", q.service, mark)
        where += [condition] if condition else []
        args += given
    if q.agent is not None:  # a turn has it: the session's other turns still count (its
        # last turn, the order); the session's own agent is read after (``reader``)
        condition, given = label_condition("agent", q.agent, mark)
        if condition:
            where.append(f"session_id IN (SELECT session_id FROM evaluations WHERE "
                         f"{condition} AND session_id IS NOT NULL)")
            args += given
    # the first completion's time, the instant the session metrics count it
    completed, given_ns = in_window(FIRST_COMPLETED, q.counted_since_ns, q.counted_until_ns,
                                    mark)
    args += given_ns
    if completed:
        where.append("session_id IN (SELECT session_id FROM sessions WHERE "
                     + " AND ".join(completed) + ")")
    last = "MAX(evaluated_at_ns)"
    having, given_ns = in_window(last, q.since_ns, q.until_ns, mark)
    args += given_ns
    if after is not None:
        having.append(f"({last} < {mark} OR ({last} = {mark} AND session_id > {mark}))")
        args += [after.last_ns, after.last_ns, after.session_id]
    sql = (f"SELECT session_id, {last} AS last_ns FROM evaluations WHERE "
           + " AND ".join(where) + " GROUP BY session_id"
           + (" HAVING " + " AND ".join(having) if having else "")
           + f" ORDER BY last_ns DESC, session_id LIMIT {mark}")
    return sql, [*args, n]


def turns_sql(mark: str) -> str:
    """The newest turns (the session's newest evaluation time, body, how many the session
    has) of one session, newest first by when each turn began (started_at_ns, then trace id:
    the reverse of ``in_turn_order``; before, by evaluation time, so an old turn re-evaluated
    last, late spans re-opening it, took a newer turn's place): at most LIMIT (at least 1),
    and past the first at most a number of
    characters of JSON in all (a running sum: the turn that would go past it and those after
    are not read). One statement: the turns and their count are one snapshot (two, and a
    retention batch or another worker's turn committed between them gave a count that was
    not the turns': a negative or false ``turns_cut``). The work is bounded by the bounds,
    not by the session: a recursive walk reads the turns newest first, each the next along
    the session index after the last one, until LIMIT or until the sum goes past; the count
    reads the index only. Before, the running sum took the length of every stored body of
    the session at each read (a conversation id with thousands of large turns made each
    completion read them all). The walk goes along the index by start
    (``evaluations_by_session_start``); the newest evaluation time and the count along the
    one by evaluation time. Arguments: session id, session id, limit, characters, session
    id, session id."""
    newest = (f"SELECT trace_id FROM evaluations WHERE session_id = {mark} {{}}"
              f"ORDER BY started_at_ns DESC, trace_id DESC LIMIT 1")
    # after the last one read: a range of the session index, then past its ties
    after = "AND started_at_ns <= w.at AND (started_at_ns < w.at OR trace_id < w.id) "
    return (f"WITH RECURSIVE walk (k, at, id, body, upto) AS (SELECT 1, started_at_ns, "
            f"trace_id, body, CAST(LENGTH(body) AS BIGINT) FROM evaluations WHERE trace_id = "
            f"({newest.format('')}) UNION ALL SELECT w.k + 1, e.started_at_ns, e.trace_id, "
            f"e.body, w.upto + LENGTH(e.body) FROM walk w JOIN evaluations e ON e.trace_id = "
            f"({newest.format(after)}) WHERE w.k < {mark} AND "
            f"w.upto + LENGTH(e.body) <= {mark}) "
            f"SELECT (SELECT MAX(evaluated_at_ns) FROM evaluations WHERE session_id = {mark}), "
            f"body, (SELECT COUNT(*) FROM evaluations WHERE session_id = {mark}) "
            f"FROM walk ORDER BY k")


def stored_turns(rows: list[Any]) -> StoredTurns:
    """``StoredTurns`` of the rows ``turns_sql`` selects (none: the session has no turn)."""
    return StoredTurns([json.loads(r[1]) for r in rows], int(rows[0][2]) if rows else 0,
                       int(rows[0][0]) if rows else 0, sum(len(r[1]) for r in rows))
