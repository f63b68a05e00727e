"""Stage: evaluate, sessions. ``GET /v1/sessions`` and ``/v1/sessions/{id}[?service=]``:

    store.session_ids(query) -> store.session_record(id): complete -> the stored record
                                                          else -> store.session_turns(id)
                                                                  -> evaluate_session (open)

A completed session is the record the session completion job stored (``sessions.job``:
evaluated once, ``status: complete``); an open one (turns may still come, or completed and
re-opened by a late turn) is computed on read from its stored turns, ``status: open``, with
the end-of-conversation detectors off. Either way from the store: the turns of one
conversation may be evaluated by different workers, processes or Kafka consumers.
Bounded per session by ``sessions.max_turns`` and ``sessions.max_turns_chars`` of JSON (the
newest turns; the others counted in ``counts.turns_cut``), per page by ``SessionQuery.limit``
and, with a ``passed``, ``detector`` or ``agent`` filter, by ``SCAN_FACTOR`` x limit sessions
looked at, and by ``max_turns_chars`` of turns read for the open sessions it looks at, as
for one session (always at least one session; else 200 open sessions of 64 MiB each, 1,000
with a filter, were read for one request): either way the page then ends early, with its
cursor.
Measured on SQLite, 100,000 turns in 20,000 sessions: a page of 20 in 72 ms, of 200 in
82 ms (the GROUP BY over the session index dominates), ``passed=false`` with none failing
(100 sessions looked at) 103 ms, one session of 5 turns 0.1 ms.
A session is a conversation id within one service (``store.sessions``). ``get`` takes the
id and, when turns of several services carry it, the service: without one it names them
(``AmbiguousSession``), as a 409 names them to the API.
"""

from __future__ import annotations

from typing import Any

from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.evaluate import evaluate_session
from otel_eval.store.base import EvaluationStore
from otel_eval.store.query import detector_kinds, label_matches
from otel_eval.store.sessions import (
    KEY_SEPARATOR,
    MAX_SERVICES_NAMED,
    AmbiguousSession,
    SessionCursor,
    SessionQuery,
    session_key,
    split_session_key,
)

__all__ = ["SCAN_FACTOR", "SessionReader"]

SCAN_FACTOR = 5  # sessions looked at per page, times its limit, with passed, detector or agent


class SessionReader:
    """Session records from a store."""

    def __init__(self, store: EvaluationStore, config: SessionsConfig) -> None:
        self.store = store
        self.config = config

    def get(self, session_id: str, service: str | None = None) -> dict[str, Any] | None:
        """The record of conversation ``session_id`` in ``service``; None when no turn
        carries this id there. Without ``service``: in the one service whose turns carry
        it; ``AmbiguousSession`` when several do."""
        if service is not None:
            found = self.record(session_key(service, session_id))
            return found if found is not None or service else self._bare(session_id)
        keys = self.store.session_keys(session_id, MAX_SERVICES_NAMED + 1)
        if len(keys) > 1:
            raise AmbiguousSession(session_id, [split_session_key(k)[0] for k in keys])
        return self.record(keys[0]) if keys else self._bare(session_id)

    def _bare(self, session_id: str) -> dict[str, Any] | None:
        """The session of turns a worker of an earlier version stored under the bare id
        during a rolling upgrade (no ``session_key``): one without a service."""
        return None if KEY_SEPARATOR in session_id else self.record(session_id)

    def record(self, key: str) -> dict[str, Any] | None:
        """The record of the session stored under ``key`` (``session_key``)."""
        return self._record(key)[0]

    def _record(self, key: str) -> tuple[dict[str, Any] | None, int]:
        """``record``, and the characters of turns' JSON read for it (0: a stored record)."""
        kept = self.store.session_record(key)
        if kept is not None and kept.state == "complete" and kept.record is not None:
            return _named(kept.record, key), 0
        bodies, total, last_ns, chars = self.store.session_turns(
            key, self.config.max_turns, self.config.max_turns_chars)
        if not bodies:
            return None, chars
        # retention may have deleted turns of a conversation still going: its row counts them
        total = max(total, kept.turns) if kept is not None else total
        record = evaluate_session(key, bodies, self.config, "open", total)
        record["last_turn_evaluated_at_unix_nano"] = last_ns
        if kept is not None and kept.completions:  # completed, then a turn came
            record["completion"] = kept.completions
        return record, chars

    def page(self, q: SessionQuery) -> dict[str, Any]:
        """``{"sessions": [...], "next_cursor": ... | null}``, newest last turn first: one
        query for the ids of the sessions to look at (one more: is there a next page?); the
        sessions looked at end once their turns read reach ``max_turns_chars``."""
        filtered = q.passed is not None or q.detector is not None or q.agent is not None
        scan = q.limit * (SCAN_FACTOR if filtered else 1)
        ids = self.store.session_ids(q, q.cursor, scan + 1)
        out: list[dict[str, Any]] = []
        looked = 0  # sessions looked at: the cursor goes after the last of them
        read = 0  # characters of turns' JSON read for the open sessions looked at
        for session_id, _ in ids[:scan]:
            if len(out) == q.limit or (looked and read >= self.config.max_turns_chars):
                break
            looked += 1
            record, chars = self._record(session_id)
            read += chars
            if record is not None and _matches(record, q):
                out.append(record)
        if looked == 0 or looked == len(ids):
            return {"sessions": out, "next_cursor": None}
        last_id, last_ns = ids[looked - 1]
        return {"sessions": out, "next_cursor": SessionCursor(last_ns, last_id).encode()}


def _named(record: dict[str, Any], key: str) -> dict[str, Any]:
    """A stored record named by its conversation id. A worker of an earlier version still
    running on a store a newer one migrated (a rolling upgrade) completes sessions under their
    keys and names the record by the key as it reads it (the id, U+001F, the service): that
    id, left as it was, was listed and linked and answered 404. Under a bare id (its turns)
    the session has no service, whatever the turns name: its link is ``?service=``."""
    if KEY_SEPARATOR not in key:  # the bare id such a worker stores its turns under
        return record if record.get("service") is None else {**record, "service": None}
    if record.get("session_id") == key:
        return {**record, "session_id": split_session_key(key)[1]}
    return record


def _matches(record: dict[str, Any], q: SessionQuery) -> bool:
    """``q``'s passed, detector and agent filters (the ones applied after reading a session:
    the agent its metrics count it under is its last turn's named one, where the store
    selected any turn's)."""
    if q.agent is not None and not label_matches(record.get("agent"), q.agent):
        return False
    verdict = record.get("verdict") or {}
    if q.passed is not None and verdict.get("passed") is not q.passed:
        return False
    if q.detector is None:
        return True
    detector, kinds = detector_kinds(q.detector)
    return any(f.get("detector") == detector and (not kinds or f.get("kind") in kinds)
               for f in record.get("findings") or () if isinstance(f, dict))
