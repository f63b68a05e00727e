"""Stage: store, the interface. What every store does, and what both implementations share.

``EvaluationStore`` is the one interface the engine, the judge, the results API, feedback,
retention and the issues job use; ``SqliteStore`` and ``PostgresStore`` implement it and pass
one contract test (tests/store/test_store_contract.py). Revision rules, the same in both:

- ``put_many`` writes whole rows: a new evaluation, or a re-evaluation of the trace (re-opened
  by late spans, or replayed after a crash), which supersedes the stored row whatever its
  revision (a replay restarts at revision 0 and carries every span the crash left pending).
- Evaluations are idempotent per trace content: each row keeps the ``content_digest`` of the
  trace it was made from (``model.content_digest``), and the engine skips a released trace
  whose digest the store already holds for its trace id (``content_digests``, read once per
  batch): a Kafka record redelivered to another worker after a rebalance, or a spool row
  replayed after a crash between the store's commit and the spool's delete, is done, not
  evaluated again. Late spans change the digest, so a re-opened trace is evaluated again.
- ``put_judge`` and ``put_feedback_and_verdict`` each change their own part of a row, and only
  when the stored row is still the revision they read, evaluated at the time they read (a
  replay restarts at revision 0, so another worker's or a restart's re-evaluation may hold
  the same revision: before, the judge of the old evaluation landed on the new one, and
  feedback put the old findings back); otherwise nothing is written and they answer False
  (the judge's work belongs to that revision; feedback reads again and retries). Neither
  bumps the revision.
- Feedback writes its outcome's row and the verdict it re-judged with it in one transaction
  (``put_feedback_and_verdict``): of two feedbacks for one trace, the last to commit wrote
  both, so the stored verdict says the outcome the feedback table holds (what calibration,
  the engine and training read).
- Retention (``delete_older_than``) deletes the feedback of the evaluations it deletes (and
  any other feedback whose evaluation is gone): an outcome without its run labels nothing.
  It deletes ``RETENTION_BATCH`` evaluations per transaction, oldest first: a backlog of
  expired rows never holds the store's write lock (or one statement) for long.

The agent history (``remember_agents`` / ``recall_agent``, read by
``otel_eval.evaluate.agent_inference``) is a table of (service, fingerprint, agent, last seen),
bounded the same way in both: per service the ``AGENT_HISTORY_PER_SERVICE`` most recently
seen rows (its service rows, which name its agents, kept first: ``SERVICE_FINGERPRINT``),
in all ``AGENT_HISTORY_ROWS`` (checked every ``AGENT_HISTORY_PRUNE_EVERY`` calls, so it
overshoots by at most that many batches), none older than ``AGENT_HISTORY_MAX_AGE_S``;
service and agent names cut to ``AGENT_HISTORY_NAME_CHARS``. Past ``AGENT_HISTORY_ROWS`` the
service holding the most rows gives way first, its least recently seen first, until it holds
no more than the next one (``prune_history``; its service rows last, and none kept when only
some would be): a flood of new service names, or one busy service, takes a quiet service's
rows only down to what each of the others holds, so while no more than ``AGENT_HISTORY_ROWS``
services hold rows a quiet one-agent service is still recalled; past that many service
names the least recently seen services' last rows go too (their runs without an agent name
read as unknown). ``remember_agents`` says the rows each bound deleted
(``HISTORY_EVICTION_REASONS``), counted in ``otel_eval_agent_history_evicted_total``.

Text is held alike: PostgreSQL text cannot hold NUL, so every text argument of either store
(and of the issues catalogue) holds U+FFFD in its place (``stored_args``), what is written
and what is looked up alike; the JSON bodies escape it (``\\u0000``) and keep it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from otel_eval.base.results import Evaluation
from otel_eval.base.text import valid_text
from otel_eval.store.query import EvaluationQuery, Page
from otel_eval.store.session_rows import SessionRow
from otel_eval.store.sessions import SessionCursor, SessionQuery, StoredTurns, session_key

POSTGRESQL_SCHEMES = ("postgresql", "postgres")

Row = tuple[str, int, int, str | None, str | None, str | None, str, bool | None, str, str | None,
            str | None, int, str | None]
# The columns of a Row, in order (inserts name them: the table's order depends on migrations)
ROW_COLUMNS = ("trace_id, revision, evaluated_at_ns, service, agent, task_id, status, passed, "
               "body, content_digest, session_id, started_at_ns, span_ids")
# Retention's delete of the outcomes whose evaluation is gone (with the evaluations it deleted,
# or before it deleted them: rows of a version that left them). One pass of the feedback
# table, a primary-key lookup a row: it holds no more rows than the evaluations do.
DELETE_ORPHAN_FEEDBACK = ("DELETE FROM feedback WHERE NOT EXISTS (SELECT 1 FROM evaluations e "
                          "WHERE e.trace_id = feedback.trace_id)")
# Evaluations retention deletes per transaction (``delete_older_than``): the write lock (SQLite:
# the whole file's, which the worker processes' writes wait for) is let go between batches,
# and no statement runs long enough for PostgreSQL's statement_timeout however much expired
# (50,000 evaluations of 40 kB took 37 s in one transaction, past the workers' busy wait).
RETENTION_BATCH = 500
# The oldest expired evaluations, a batch of them (along evaluations_by_time)
RETENTION_IDS = ("SELECT trace_id FROM evaluations WHERE evaluated_at_ns < {m} "
                 "ORDER BY evaluated_at_ns LIMIT {m}")
# (service, agent, fingerprints strongest first) of a completed run (agent_inference.learned)
AgentRun = tuple[str, str, Sequence[str]]

AGENT_HISTORY_PER_SERVICE = 64  # rows: a few agents x a few fingerprints, plus renames
AGENT_HISTORY_ROWS = 20_000  # rows in all (about 300 services at their cap)
AGENT_HISTORY_PRUNE_EVERY = 32  # remember_agents calls between the whole-table prunes
AGENT_HISTORY_MAX_AGE_S = 30 * 86_400  # a fingerprint not seen for 30 days is forgotten
AGENT_HISTORY_NAME_CHARS = 256
# The fingerprint every run of a service shows (``agent_inference.SERVICE_FINGERPRINT``): its
# rows are the service's agents, "a service with one agent is that agent" reads them. A
# service's most recently seen of them, up to this many, are the last of its rows to go: a
# busy agent whose runs each show new fingerprints filled the rows and pushed out a rare
# agent's service row, and the service read as the busy agent's alone (its runs named so).
SERVICE_FINGERPRINT = "service"
AGENT_HISTORY_AGENTS_KEPT = AGENT_HISTORY_PER_SERVICE // 2
# Why ``remember_agents`` deleted rows: past AGENT_HISTORY_PER_SERVICE of a service, past
# AGENT_HISTORY_ROWS in all, not seen for AGENT_HISTORY_MAX_AGE_S
HISTORY_EVICTION_REASONS = ("max_service_rows", "max_rows", "max_age")


@dataclass(frozen=True)
class SessionLimits:
    """Limits of a store's database sessions (``StoreConfig``; PostgreSQL applies them with
    ``SET`` at each connect, SQLite has no server to wait on). Seconds; 0: no limit."""

    statement_timeout_s: float = 30.0
    lock_timeout_s: float = 10.0
    # SQLite: every commit flushed to disk (``synchronous=FULL``; else NORMAL, flushed at the
    # WAL's checkpoints). On with ``store.spool_fsync``: the spool's flushed delete of a
    # request follows the commit of its trace's evaluation, so that commit must survive a
    # power loss too, or the trace is in neither. PostgreSQL commits durably on its own.
    fsync: bool = False


class EvaluationStore(Protocol):
    """Evaluations keyed by trace id. Thread-safe; one per process (never shared across
    processes: each opens its own connection from the path or URL)."""

    # Where it is, for logs: a file path, or the URL without its password.
    location: str

    def put_many(self, evaluations: Iterable[Evaluation]) -> list[bool]:
        """Store in one transaction; per evaluation, whether it superseded a stored row.
        A row of the same revision evaluated at the same time is the same evaluation
        written again (PostgreSQL: a batch tried again on a new connection after the one
        its commit went through on was lost before answering): it supersedes nothing."""
        ...

    def put_judge(self, trace_id: str, revision: int, judge: dict[str, Any],
                  evaluated_at_ns: int | None = None) -> bool:
        """Attach the judge's object to ``revision`` (evaluated at ``evaluated_at_ns``: a
        replay, here or by another worker, evaluates a trace at the same revision again);
        False when re-evaluated since or gone."""
        ...

    def put_feedback_and_verdict(self, trace_id: str, revision: int, outcome: str,
                                 now_ns: int, findings: list[dict[str, Any]],
                                 verdict: dict[str, Any],
                                 evaluated_at_ns: int | None = None) -> bool:
        """Record ``outcome`` (received at ``now_ns``) and replace the findings and verdict of
        ``revision`` (evaluated at ``evaluated_at_ns``, as ``put_judge``), in one transaction;
        False, nothing written, when re-evaluated or gone."""
        ...

    def get(self, trace_id: str) -> dict[str, Any] | None: ...

    def get_stamped(self, trace_id: str) -> tuple[dict[str, Any], int] | None:
        """(the stored v1 object, when it was evaluated: ``evaluated_at_ns``), one read, or
        None: what is sent again from a stored evaluation is timed as its first send was."""
        ...

    def get_versioned(self, trace_id: str) -> tuple[dict[str, Any], int, int] | None:
        """``get_stamped`` and the row's version (migration 20): the writes made to the
        evaluation since ``put_many`` stored it (0), one per judge or feedback write, all
        in one read: a results-topic record's ``otel_eval.row_version``."""
        ...

    def stamp(self, trace_id: str) -> tuple[int, int] | None:
        """(revision, evaluated_at_ns) of the stored evaluation, or None: a worker that
        re-evaluates a dead one's traces tells that worker's commit from an older row."""
        ...

    def latest(self, limit: int) -> list[dict[str, Any]]: ...

    def query(self, q: EvaluationQuery) -> Page:
        """One page of evaluations matching ``q``, newest first (``otel_eval.store.query``)."""
        ...

    def since(self, evaluated_after_ns: int, limit: int = 100_000,
              keep: Keep | None = None) -> Window:
        """Evaluated after a time, oldest first; past ``limit`` the newest ``limit``, and
        the window says it was cut (``Window.truncated``). Read ``SINCE_CHUNK`` rows at a
        time; with ``keep``, each body is replaced by ``keep(body)`` as soon as it is parsed
        (the issues job keeps the fields it reads)."""
        ...

    def count(self) -> int: ...

    def session_ids(self, q: SessionQuery, after: SessionCursor | None,
                    n: int) -> list[tuple[str, int]]:
        """(session id, its last turn's evaluation time) of the next ``n`` sessions after
        ``after`` matching ``q``'s filters but ``passed``, newest first
        (``otel_eval.store.sessions``)."""
        ...

    def session_turns(self, session_id: str, limit: int,
                      max_chars: int = 1 << 62) -> StoredTurns:
        """The session's newest turns (at most ``limit``, and past the first at most
        ``max_chars`` of JSON), how many it has, when the last was stored."""
        ...

    # The sessions kept (``otel_eval.store.session_rows``): ``put_many`` opens and updates
    # them; the session completion job claims and completes them, once in the fleet.

    def sessions_due(self, idle_before_ns: int, claim_before_ns: int,
                     limit: int) -> list[tuple[str, int]]: ...

    def sessions_open_since(self, before_ns: int, limit: int) -> list[tuple[str, int]]: ...

    def session_keys(self, conversation_id: str, limit: int) -> list[str]: ...

    def crowded_open_sessions(self, limit: int, keep: int = 0) -> list[tuple[str, int]]: ...

    def claim_session(self, session_id: str, last_turn_ns: int, claim: str, now_ns: int,
                      claim_before_ns: int) -> bool: ...

    def complete_session(self, session_id: str, claim: str, record: dict[str, Any],
                         now_ns: int, events_due_ns: int | None = None) -> bool: ...

    def session_events_due(self, before_ns: int, limit: int) -> list[tuple[str, int, int]]: ...

    def lease_session_events(self, session_id: str, completions: int, due_ns: int,
                             until_ns: int) -> bool: ...

    def session_events_sent(self, entries: Sequence[tuple[str, int]]) -> None: ...

    def put_session_judge(self, session_id: str, completions: int,
                          judge: dict[str, Any]) -> bool: ...

    def session_record(self, session_id: str) -> SessionRow | None: ...

    def open_session_count(self) -> int: ...

    def put_feedback(self, trace_id: str, outcome: str, now_ns: int) -> None:
        """The outcome's row alone, verdict unchanged (seeding a store; the service records
        an outcome with ``put_feedback_and_verdict``)."""
        ...

    def feedback(self, trace_id: str) -> str | None: ...

    def owe_results(self, trace_id: str, now_ns: int) -> None:
        """``trace_id``'s results-topic record is owed (an outcome re-judged its verdict):
        kept until ``results_paid`` with the same ``now_ns`` (migration 21)."""
        ...

    def results_paid(self, trace_id: str, owed_at_ns: int) -> None:
        """The record owed at ``owed_at_ns`` was delivered (or dropped for good); a later
        outcome's owing stays."""
        ...

    def results_owed(self, limit: int) -> list[tuple[str, int]]:
        """Up to ``limit`` owed records (trace id, owed at ns), oldest first."""
        ...

    def feedback_many(self, trace_ids: Collection[str]) -> dict[str, str]:
        """The known outcomes of those of ``trace_ids`` that have one (one query per batch:
        the engine reads them for every batch it evaluates)."""
        ...

    def feedback_version(self) -> tuple[int, ...]:
        """A value that changes whenever an outcome is recorded, changed or deleted, by any
        process on the store (``filters.FEEDBACK_VERSION``: the rows, the newest time, a sum
        of the times): the calibration report is kept while it stays the same."""
        ...

    def labelled(self, limit: int) -> list[tuple[str, dict[str, Any]]]:
        """(outcome, the parts of the stored evaluation calibration reads) of the ``limit``
        traces whose outcome was recorded last (``POST /v1/feedback``), newest first: what
        ``calibration`` checks the judge and the predictor against. The parts are shaped as in
        the body: ``service``, ``agent``, ``judge.judges.<name>.scores`` and
        ``prediction.p_success`` with its ``model`` (only when the body has it); the rest of
        the body is not read (``filters.LABELLED_*``)."""
        ...

    def content_digests(self, trace_ids: Collection[str]) -> dict[str, str]:
        """The content digest stored with the evaluation of each of ``trace_ids`` that is
        stored ("" for a row from before digests were kept), in one query per batch: the
        engine evaluates a released trace only when its content differs from what the stored
        evaluation was made from, and knows which trace ids have a stored run at all
        (``Trace.late_if_stored``)."""
        ...

    def stored_span_ids(self, trace_ids: Collection[str]) -> dict[str, frozenset[str]]:
        """The span ids and log records' keys (``model.content_ids``) the stored evaluation
        of each of ``trace_ids`` was made from (rows stored before they were kept, schema
        version 16, are left out), in one query: a released trace that does not hold them all
        is a fragment of the stored run (spans that came after it was stored, a replay with
        fewer of its records), never stored over it (``evaluate.stage``)."""
        ...

    def delete_older_than(self, cutoff_ns: int, batch: int = RETENTION_BATCH,
                          stop: Callable[[], bool] = lambda: False) -> int:
        """Delete the evaluations stored before ``cutoff_ns``, oldest first, ``batch`` of them
        and their feedback per transaction (other writers get in between); then the
        sessions' rows whose last turn is older (in batches too) and any feedback whose
        evaluation is gone; how many evaluations. ``stop()`` true before a batch ends the
        pass there (a shutdown; the next pass goes on)."""
        ...

    def remember_agents(self, runs: Sequence[AgentRun]) -> dict[str, int]:
        """Record each run's fingerprints as seen for its (service, agent), now; the rows
        the bounds deleted meanwhile, by reason (``HISTORY_EVICTION_REASONS``; none: {})."""
        ...

    def recall_agent(self, service: str, fingerprints: Sequence[str]) -> str | None:
        """The agent of the first of ``fingerprints`` exactly one agent of ``service`` was
        seen with (``pick_agent``), else None."""
        ...

    def open(self) -> EvaluationStore:
        """Connect, bring the schema up to date; returns the store (the constructor does no
        I/O: ``serve`` opens its store at start)."""
        ...

    def close(self) -> None: ...


def history_rows(runs: Sequence[AgentRun], now_ns: int) -> list[tuple[str, str, str, int]]:
    """(service, fingerprint, agent, seen_ns) rows of ``runs``, names cut, each row once."""
    cut = AGENT_HISTORY_NAME_CHARS
    rows = {(service[:cut], fp, agent[:cut]) for service, agent, fps in runs for fp in fps}
    return [(service, fp, agent, now_ns) for service, fp, agent in sorted(rows)]


def prune_history(cur: Any, m: str, rowid: str, services: Sequence[str], now_ns: int,
                  whole: bool, max_rows: int) -> dict[str, int]:
    """The history's bounds, on a cursor of the remembering transaction (placeholder ``m``,
    the dialect's row id ``rowid``): ``services``' rows past AGENT_HISTORY_PER_SERVICE, and
    when ``whole``, rows not seen for AGENT_HISTORY_MAX_AGE_S and rows past ``max_rows``
    in all, those of the services holding the most first (each row ranked by how many of
    its service's rows are more recently seen; the highest ranks go, the least recently seen
    first within one; a service whose service rows this cuts loses the rest of them too).
    The rows deleted, by reason."""
    deleted = dict.fromkeys(HISTORY_EVICTION_REASONS, 0)
    cur.executemany(f"DELETE FROM agent_history WHERE service = {m} AND {rowid} IN (SELECT r "
                    f"FROM ({_ranked(rowid, f'WHERE service = {m}')}) ranked WHERE held > {m})",
                    [(sv, sv, AGENT_HISTORY_PER_SERVICE) for sv in services])
    deleted["max_service_rows"] = max(cur.rowcount, 0)
    if whole:
        cur.execute(f"DELETE FROM agent_history WHERE seen_ns < {m}",
                    (now_ns - AGENT_HISTORY_MAX_AGE_S * 10**9,))
        deleted["max_age"] = max(cur.rowcount, 0)
        cur.execute("SELECT COUNT(*) FROM agent_history")
        over = int(cur.fetchone()[0]) - max_rows
        if over > 0:
            cur.execute(
                f"DELETE FROM agent_history WHERE {rowid} IN (SELECT r FROM "
                f"({_ranked(rowid, '')}) ranked ORDER BY held DESC, seen_ns, service, "
                f"fingerprint, agent LIMIT {m}) RETURNING service, fingerprint", (over,))
            gone = cur.fetchall()
            # a service left with some of its service rows would read as those agents' alone
            # (a hung run of another of its agents named after one of them): it keeps none
            cut = sorted({sv for sv, fp in gone if fp == SERVICE_FINGERPRINT})
            cur.executemany(f"DELETE FROM agent_history WHERE service = {m} AND "
                            f"fingerprint = {m}", [(sv, SERVICE_FINGERPRINT) for sv in cut])
            deleted["max_rows"] = len(gone) + (max(cur.rowcount, 0) if cut else 0)
    return {reason: n for reason, n in deleted.items() if n}


def _ranked(rowid: str, where: str) -> str:
    """The history's rows (``where``) with ``held``, each row's rank in its service, the first
    kept longest: its ``AGENT_HISTORY_AGENTS_KEPT`` most recently seen service rows, then the
    rest most recently seen first. ``r``: the row id."""
    service_row = f"fingerprint = '{SERVICE_FINGERPRINT}'"
    return (f"SELECT r, service, fingerprint, agent, seen_ns, ROW_NUMBER() OVER (PARTITION BY "
            f"service ORDER BY CASE WHEN {service_row} AND agents <= "
            f"{AGENT_HISTORY_AGENTS_KEPT} THEN 0 ELSE 1 END, seen_ns DESC, fingerprint, agent) "
            f"AS held FROM (SELECT {rowid} AS r, service, fingerprint, agent, seen_ns, "
            f"ROW_NUMBER() OVER (PARTITION BY service, {service_row} ORDER BY seen_ns DESC) "
            f"AS agents FROM agent_history {where}) firsts")


def in_batches(evaluations: Callable[[], int], sessions: Callable[[], int],
               orphans: Callable[[], int], batch: int, stop: Callable[[], bool]) -> int:
    """Retention's pass for both stores: ``evaluations()`` (a batch of them and their
    feedback, one transaction; how many) until fewer than ``batch`` go, then ``sessions()``
    likewise, then ``orphans()`` (feedback left without its evaluation); ``stop()`` checked
    before each. How many evaluations."""
    deleted = 0
    for step in (evaluations, sessions):
        while not stop():
            n = step()
            deleted += n if step is evaluations else 0
            if n < batch:
                break
        else:
            return deleted
    orphans()
    return deleted


def pick_agent(rows: Iterable[tuple[str, str]], fingerprints: Sequence[str]) -> str | None:
    """From (fingerprint, agent) rows: the agent of the first fingerprint with one agent."""
    agents: dict[str, set[str]] = {}
    for fp, agent in rows:
        agents.setdefault(fp, set()).add(agent)
    for fp in fingerprints:
        seen = agents.get(fp)
        if seen is not None and len(seen) == 1:
            return next(iter(seen))
    return None


# What ``since`` keeps of each body (None: all of it).
Keep = Callable[[dict[str, Any]], dict[str, Any]]
# Rows ``since`` reads per query: one chunk of bodies is parsed at a time (the 10,000 bodies
# of 47 kB of an issues window were 1.3 GB parsed at once).
SINCE_CHUNK = 256


@dataclass(frozen=True)
class Window:
    """What ``since`` read: ``rows`` oldest first, and whether more were stored after the
    time than its ``limit`` (``truncated``: ``rows`` are the newest, the older left out).
    The cut comes with the rows so that no caller takes the newest for the whole window."""

    rows: list[dict[str, Any]]
    truncated: bool


def since_chunks(read: Callable[[int, tuple[int, str] | None, int], list[Any]],
                 evaluated_after_ns: int, limit: int, keep: Keep | None) -> Window:
    """``since`` for both stores: ``read(after_ns, position, n)`` returns the next ``n`` rows
    (evaluated_at_ns, trace_id, body), newest first, strictly after ``position`` (keyset);
    the bodies parsed (and kept) a chunk at a time, returned oldest first. One row past
    ``limit`` is asked for (its body never parsed): there, the window was cut."""
    out: list[dict[str, Any]] = []
    position: tuple[int, str] | None = None
    truncated, limit = False, max(0, limit)  # SQLite reads a negative LIMIT as none
    while not truncated:
        left = limit - len(out)
        n = min(SINCE_CHUNK, left + 1)  # one past the limit tells a cut window
        rows = read(evaluated_after_ns, position, n)
        for at, trace_id, body in rows[:left]:
            value = json.loads(body)
            out.append(keep(value) if keep is not None else value)
            position = (at, trace_id)
        truncated = len(rows) > left
        if len(rows) < n:
            break
    out.reverse()
    return Window(out, truncated)


def stored_text(value: Any) -> Any:
    """A statement's argument as both stores take it: text with NUL as U+FFFD (PostgreSQL
    text cannot hold NUL; SQLite is given the same, so one input reads back the same from
    either); any other value as it is."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


def stored_args(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(stored_text(v) for v in values)


def evaluation_row(ev: Evaluation) -> Row:
    """The row of an evaluation: the pulled-out columns, then the JSON body as text. Text
    columns are valid UTF-8 (a lone surrogate as U+FFFD: no driver encodes one; the body
    keeps it as a JSON escape). ``session_id`` holds the session's key (``session_key``: the
    conversation id within the service); ``started_at_ns`` when the run began (0 unknown: a
    session's turns are read newest by it, ``sessions.turns_sql``)."""
    t, v = ev.trajectory, ev.verdict
    service, session = _valid(t.service), _valid(t.session_id)
    return (ev.trace_id, t.revision, ev.evaluated_at_ns, service, _valid(t.agent),
            _valid(t.task_id), t.status, None if v is None else bool(v.passed),
            ev.to_json_text(), ev.content_digest,
            None if session is None else session_key(service, session),
            t.start_ns if 0 <= t.start_ns < 2**63 else 0, ev.span_ids)


def _valid(text: str | None) -> str | None:
    return None if text is None else valid_text(text)


def is_postgresql_url(target: str) -> bool:
    return target.partition("://")[0].lower() in POSTGRESQL_SCHEMES and "://" in target


def redact_url(url: str) -> str:
    """The URL without its password (userinfo, or the ``password`` or ``sslpassword``
    query parameter: libpq's passphrase of the client key)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}" if ":" in user else netloc
    query = "&".join(_redacted(p) for p in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


_SECRET_PARAMETERS = ("password", "sslpassword")  # libpq's parameters holding a secret


def _redacted(parameter: str) -> str:
    name, eq, _ = parameter.partition("=")
    return f"{name}=***" if eq and name.lower() in _SECRET_PARAMETERS else parameter
