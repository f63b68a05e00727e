"""Stage: evaluate, sessions, offline. ``otel-eval eval`` groups the evaluated traces by
their conversation id and prints a session record per conversation after the trace records
(``--format jsonl``: ``{"record": "session", ...}``).

A file is all there is of a conversation, so every session is ``complete``. Each turn is
kept slim (the fields the session detectors and the record read), at most
``sessions.max_turns`` per session (the first ones by arrival; the others counted in
``counts.turns_cut``). With a success model, each record has ``prediction`` as ``serve``'s
session job gives it (``sessions.predict``: each turn's model view kept beside, at most as
many).
"""

from __future__ import annotations

from typing import Any

from otel_eval.evaluate.predict import Predictor
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.evaluate import evaluate_session, in_turn_order
from otel_eval.evaluate.sessions.predict import model_view, session_prediction
from otel_eval.store.sessions import session_key

__all__ = ["SessionCollector"]

_TURN_KEYS = ("trace_id", "service", "agent", "user_id", "start_time_unix_nano", "duration_s",
              "input", "output", "verdict", "counts", "findings", "usage")
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


class SessionCollector:
    """Turns by session (conversation id within its service: ``store.sessions``), in the
    order evaluated; ``records()`` once all are in."""

    def __init__(self, config: SessionsConfig, predictor: Predictor | None = None) -> None:
        self.config = config
        self.predictor = predictor
        self.turns: dict[str, list[dict[str, Any]]] = {}
        self.seen: dict[str, int] = {}
        self.viewed: dict[str, list[dict[str, Any]]] = {}  # what the model reads of each

    def add(self, body: dict[str, Any]) -> None:
        session_id, service = body.get("session_id"), body.get("service")
        if not isinstance(session_id, str):
            return
        key = session_key(service if isinstance(service, str) else None, session_id)
        self.seen[key] = self.seen.get(key, 0) + 1
        turns = self.turns.setdefault(key, [])
        if len(turns) < self.config.max_turns:
            turns.append(slim(body))
            if self.predictor is not None:
                self.viewed.setdefault(key, []).append(model_view(body))

    def records(self) -> list[dict[str, Any]]:
        """One ``{"record": "session", ...}`` per conversation, in first-seen order."""
        out = []
        for key, turns in self.turns.items():
            record = {"record": "session", **evaluate_session(
                key, turns, self.config, "complete", self.seen[key])}
            if self.predictor is not None:
                record["prediction"] = session_prediction(
                    self.predictor, record["session_id"], in_turn_order(self.viewed[key]))
            out.append(record)
        return out
