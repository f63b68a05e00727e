"""Stage: evaluate, sessions, offline. ``otel-eval eval`` groups the evaluated traces by
their conversation id and prints a session record per conversation after the trace records
(``--format jsonl``: ``{"record": "session", ...}``).

A file is all there is of a conversation, so every session is ``complete``. Each turn is
kept slim (the fields the session detectors and the record read), and a session is judged on
the turns ``serve``'s session job reads of it (``store.sessions.turns_sql``): the newest by
when each began (then trace id, as the store's ``started_at_ns``), whatever the order they
were evaluated in, at most ``sessions.max_turns`` and, past the newest,
``sessions.max_turns_chars`` of the turns' JSON in all; the others counted in
``counts.turns_cut``, the bound that cut them in ``cut_by``. With a success model, each record
has ``prediction`` as ``serve``'s session job gives it (``sessions.predict``: each turn's
model view kept beside).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any

from otel_eval.base.jsontext import json_text
from otel_eval.evaluate.predict import Predictor
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.evaluate import evaluate_session, in_turn_order
from otel_eval.evaluate.sessions.predict import model_view, session_prediction
from otel_eval.store.sessions import session_key

__all__ = ["SessionCollector"]

_TURN_KEYS = ("trace_id", "service", "agent", "user_id", "start_time_unix_nano", "duration_s",
              "status", "input", "output", "verdict", "counts", "findings", "usage")
_STEP_KEYS = ("index", "kind", "tool_name", "arguments", "tool_calls", "call_id")


def slim(body: dict[str, Any]) -> dict[str, Any]:
    """What a session reads of a turn's v1 object."""
    turn = {k: body.get(k) for k in _TURN_KEYS}
    steps = body.get("steps") or ()
    # every step counted (as the service's turns are), though only tool and LLM steps kept
    turn["counts"] = {"steps": len(steps), **(body.get("counts") or {})}
    turn["steps"] = [{**{k: s.get(k) for k in _STEP_KEYS if k in s},
                      "result": True if s.get("result") is not None else None}  # told or not
                     for s in steps if s.get("kind") in ("tool", "llm")]
    llm = [s for s in steps if s.get("kind") == "llm"]
    if llm and turn["steps"]:  # the last LLM call's answer (read when the turn has no output)
        kept = next(s for s in reversed(turn["steps"]) if s.get("kind") == "llm")
        kept["answer"] = llm[-1].get("answer")
    return turn


# (start as the store keeps it, trace id, arrival), slim turn, model view, characters
_Turn = tuple[tuple[int, str, int], dict[str, Any], dict[str, Any] | None, int]
_ARRIVAL = itertools.count()  # ties of the same trace id (never in one input) by arrival


@dataclass
class _Kept:
    """The turns of one session kept, a heap with the oldest (by start, then trace id) on
    top: each slim, its model view (with a model) and the characters of its JSON; how many
    were added in all."""

    turns: list[_Turn] = field(default_factory=list)
    chars: int = 0
    seen: int = 0


def _order(body: dict[str, Any]) -> tuple[int, str, int]:
    """Where a turn stands among its session's: when it began as the store keeps it
    (``store.base.evaluation_row``'s ``started_at_ns``: 0 unknown or out of range), then its
    trace id, as ``store.sessions.turns_sql`` reads them."""
    start = body.get("start_time_unix_nano")
    if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start < 2**63:
        start = 0
    return (start, str(body.get("trace_id")), next(_ARRIVAL))


class SessionCollector:
    """Turns by session (conversation id within its service: ``store.sessions``), the
    newest by start kept; ``records()`` once all are in."""

    def __init__(self, config: SessionsConfig, predictor: Predictor | None = None) -> None:
        self.config = config
        self.predictor = predictor
        self.sessions: dict[str, _Kept] = {}

    def add(self, body: dict[str, Any], chars: int | None = None) -> None:
        """A turn's v1 object; ``chars``: the length of its JSON text as stored
        (``Evaluation.to_json_text``), else encoded here."""
        session_id, service = body.get("session_id"), body.get("service")
        if not isinstance(session_id, str):
            return
        key = session_key(service if isinstance(service, str) else None, session_id)
        kept = self.sessions.setdefault(key, _Kept())
        kept.seen += 1
        size = len(json_text(body)) if chars is None else chars
        view = model_view(body) if self.predictor is not None else None
        heapq.heappush(kept.turns, (_order(body), slim(body), view, size))
        kept.chars += size
        cfg = self.config  # the newest by start first, as the session job reads them
        while len(kept.turns) > cfg.max_turns or (
                len(kept.turns) > 1 and kept.chars > cfg.max_turns_chars):
            kept.chars -= heapq.heappop(kept.turns)[3]

    def records(self) -> list[dict[str, Any]]:
        """One ``{"record": "session", ...}`` per conversation, in first-seen order."""
        out = []
        for key, kept in self.sessions.items():
            turns = [turn for _, turn, _, _ in sorted(kept.turns)]
            record = {"record": "session", **evaluate_session(
                key, turns, self.config, "complete", kept.seen)}
            if record["counts"]["turns_cut"]:  # as the session job says which bound cut
                record["cut_by"] = ("max_turns" if len(turns) >= self.config.max_turns
                                    else "max_turns_chars")
            if self.predictor is not None:
                views = [view for _, _, view, _ in sorted(kept.turns) if view is not None]
                record["prediction"] = session_prediction(
                    self.predictor, record["session_id"], in_turn_order(views),
                    record["findings"])
            out.append(record)
        return out
