"""Stage: evaluate, sessions. One conversation's record from its turns.

``evaluate_session`` takes the turns as stored (v1 evaluation objects: ``Evaluation.to_json``
offline, the store's bodies in the service), puts them in start order, runs the session
detectors (``sessions.detectors``) and keeps each turn's own verdict. The record:

    session_id, service, agent,     of the conversation (the last turn naming one)
    user_id
    status                          open | complete (the session completion job: ``job``)
    turns                           how many turns it has (read or cut)
    traces                          the trace ids of the turns read, in turn order
    start_time_unix_nano            the first turn's start
    verdict                         {passed, reasons}: passes when no session finding has
                                    severity error and every turn with a verdict passed
    findings                        [{detector, kind, severity, message, trace_id, step,
                                    attributes}]
    counts                          turns, turns_read, turns_cut, failed_turns, steps,
                                    tool_calls, findings, turn_findings
    turn_verdicts                   each turn's passed (None: no verdict), in turn order
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from otel_eval.base.jsontext import finite
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.detectors import DETECTORS, budget
from otel_eval.store.sessions import split_session_key

__all__ = ["evaluate_session", "in_turn_order"]


def _start(turn: dict[str, Any]) -> tuple[int, str]:
    start = turn.get("start_time_unix_nano")
    return (start if isinstance(start, int) else 0, str(turn.get("trace_id")))


def in_turn_order(turns: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns by start time (then trace id: one order whatever the store returned)."""
    return sorted(turns, key=_start)


def _last_named(turns: Sequence[dict[str, Any]], key: str) -> str | None:
    for turn in reversed(turns):
        if turn.get(key):
            return str(turn[key])
    return None


def _verdict(turns: Sequence[dict[str, Any]],
             findings: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], list[bool | None]]:
    reasons = [f["message"] for f in findings if f["severity"] == "error"]
    passed: list[bool | None] = []
    for number, turn in enumerate(turns):
        verdict = turn.get("verdict")
        ok = verdict.get("passed") if isinstance(verdict, dict) else None
        passed.append(ok if isinstance(ok, bool) else None)
        if ok is False and isinstance(verdict, dict):
            why = "; ".join(str(r) for r in verdict.get("reasons") or ()) or "failed"
            reasons.append(f"turn {number + 1} ({turn.get('trace_id')}) failed: {why}")
    return {"passed": not reasons, "reasons": reasons}, passed


def _counts(turns: Sequence[dict[str, Any]], total: int, findings: int,
            passed: Sequence[bool | None]) -> dict[str, int]:
    steps = tool_calls = turn_findings = 0
    for turn in turns:
        counts = turn.get("counts") or {}
        steps += int(counts.get("steps", len(turn.get("steps") or ())))
        tool_calls += int(counts.get("tool_calls", 0))
        turn_findings += len(turn.get("findings") or ())
    return {"turns": total, "turns_read": len(turns), "turns_cut": total - len(turns),
            "failed_turns": sum(1 for p in passed if p is False), "steps": steps,
            "tool_calls": tool_calls, "findings": findings, "turn_findings": turn_findings}


def evaluate_session(key: str, turns: Sequence[dict[str, Any]], config: SessionsConfig,
                     status: str, total: int | None = None) -> dict[str, Any]:
    """The session record of ``turns`` (any order; ``total``: the turns it has in all, when
    some were not read), the session ``key`` (``store.sessions.session_key``: its service
    and conversation id, which the record names apart). ``status`` ``complete`` lets the
    end-of-conversation detectors judge the last turn. Its numbers are finite (a sum of
    finite turn values may not be: a non-finite one as the protobuf JSON mapping's string,
    ``jsontext.finite``, as the trace results): every output of it is strict JSON."""
    service, session_id = split_session_key(key)
    ordered = in_turn_order(turns)
    complete = status == "complete"
    findings = [f for detect in DETECTORS.values() for f in detect(ordered, config, complete)]
    findings += budget(ordered, config, complete, total)
    verdict, passed = _verdict(ordered, findings)
    first = _start(ordered[0])[0] if ordered else 0
    return finite({
        "session_id": session_id,
        "service": service or None,
        "agent": _last_named(ordered, "agent"),
        "user_id": _last_named(ordered, "user_id"),
        "status": status,
        "turns": len(ordered) if total is None else total,
        "traces": [t.get("trace_id") for t in ordered],
        "start_time_unix_nano": first,
        "verdict": verdict,
        "findings": findings,
        "counts": _counts(ordered, len(ordered) if total is None else total, len(findings),
                          passed),
        "turn_verdicts": passed,
    })
