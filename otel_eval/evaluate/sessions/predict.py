"""Stage: evaluate, sessions. ``prediction.p_success`` of a conversation, by the same model
as a trace's (``evaluate/predict``, the default model unless ``prediction.model_path`` says
otherwise), applied to the conversation as one run:

    turns (v1 objects, in turn order) -> one Evaluation: the turns' steps concatenated in
    start order (re-indexed), their findings, the last turn's answer, the first turn's start
    to the last turn's end -> Predictor.predict -> {"p_success", "model"}

So p_success means for a session what it means for a trace: the chance the run (here, the
whole conversation) succeeded, read from what the agent did. The steps are rebuilt from the
stored v1 objects (the fields the features and the run text read); a turn's text fields
are the ones the v1 object kept (``steps.CONTENT_CHARS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from otel_eval.base.results import NOT_ENDED_KINDS, Evaluation, Finding
from otel_eval.base.steps import Step, ToolCall, Trajectory
from otel_eval.evaluate.predict import Predictor

__all__ = ["SESSION_NOT_ENDED_KINDS", "conversation_evaluation", "model_view",
           "session_prediction"]

# The session's own ``non_termination`` kinds that say the conversation did not end on its
# own terms (as ``pending_tool_calls`` says of a run): p_success 0
SESSION_NOT_ENDED_KINDS = frozenset({"pending_tool_call"})

# What the model reads of a turn's v1 object and of its steps (``model_view``).
_TURN_KEYS = ("trace_id", "service", "agent", "start_time_unix_nano", "duration_s", "status",
              "input", "output", "findings")
_STEP_KEYS = ("span_id", "parent_span_id", "kind", "name", "status", "error",
              "start_time_unix_nano", "end_time_unix_nano", "tool_name", "arguments",
              "tool_calls", "input_tokens", "output_tokens", "finish_reasons", "answer",
              "result")


def model_view(body: dict[str, Any]) -> dict[str, Any]:
    """The fields of a turn's v1 object ``conversation_evaluation`` reads (offline keeps this
    of each turn, not the whole object)."""
    turn = {k: body.get(k) for k in _TURN_KEYS}
    turn["steps"] = [{k: s.get(k) for k in _STEP_KEYS if k in s}
                     for s in body.get("steps") or () if isinstance(s, dict)]
    return turn


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _step(index: int, s: dict[str, Any]) -> Step:
    calls = [ToolCall(str(c.get("name")), c.get("arguments"), c.get("call_id"),
                      str(c.get("outcome") or "")) for c in s.get("tool_calls") or ()
             if isinstance(c, dict)]
    return Step(index=index, span_id=str(s.get("span_id") or ""),
                parent_span_id=s.get("parent_span_id"), kind=s.get("kind") or "other",
                name=str(s.get("name") or ""),
                status="error" if s.get("status") == "error" else "ok",
                error=s.get("error"), start_ns=_int(s.get("start_time_unix_nano")) or 0,
                end_ns=_int(s.get("end_time_unix_nano")) or 0, tool_name=s.get("tool_name"),
                arguments=s.get("arguments"), result=s.get("result"),
                input_tokens=_int(s.get("input_tokens")),
                output_tokens=_int(s.get("output_tokens")),
                finish_reasons=[str(r) for r in s.get("finish_reasons") or ()],
                tool_calls=calls, answer=s.get("answer"), prompt=s.get("prompt"))


def _finding(f: dict[str, Any]) -> Finding:
    severity = f.get("severity")
    return Finding(str(f.get("detector")), str(f.get("kind")),
                   severity if severity in ("warning", "error") else "info",
                   str(f.get("message") or ""))


def conversation_evaluation(session_id: str, turns: Sequence[dict[str, Any]]) -> Evaluation:
    """The conversation as one run (``turns`` in turn order)."""
    steps: list[Step] = []
    findings: list[Finding] = []
    for turn in turns:
        for s in turn.get("steps") or ():
            if isinstance(s, dict):
                steps.append(_step(len(steps), s))
        findings += [_finding(f) for f in turn.get("findings") or () if isinstance(f, dict)]
    first, last = (turns[0], turns[-1]) if turns else ({}, {})
    start = _int(first.get("start_time_unix_nano")) or 0
    last_start = _int(last.get("start_time_unix_nano")) or start
    duration = last.get("duration_s")
    end = last_start + int(duration * 1e9) if isinstance(duration, int | float) else last_start
    statuses = {t.get("status") for t in turns}
    status = "complete" if statuses <= {"complete"} else str(last.get("status") or "complete")
    answer = last.get("output") if isinstance(last.get("output"), str) else None
    trajectory = Trajectory(trace_id=str(last.get("trace_id") or session_id), source="session",
                            status=status,  # type: ignore[arg-type]
                            steps=steps, service=last.get("service"), agent=last.get("agent"),
                            start_ns=start, end_ns=max(start, end), output=answer,
                            answer=answer, task=first.get("input"), session_id=session_id)
    return Evaluation(trajectory, findings)


def session_prediction(predictor: Predictor, session_id: str,
                       turns: Sequence[dict[str, Any]],
                       session_findings: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """``{"p_success", "model"}`` of the conversation (``turns`` in turn order). How it ended
    (``Predictor.predict``'s ``ending``): any turn's finding that it did not end, its last
    turn's other ``non_termination`` findings, and the session's own (``session_findings``,
    the record's) that it ended with a call pending in its last turn; an earlier turn that
    raised, answered nothing or whose model call failed was asked again, and is no end of
    the conversation, and a closing question (``unanswered_question``) is a polite close."""
    evaluation = conversation_evaluation(session_id, turns)
    last = turns[-1] if turns else {}
    ending = [f for f in evaluation.findings if f.kind in NOT_ENDED_KINDS]
    ending += [_finding(f) for f in last.get("findings") or ()
               if isinstance(f, dict) and f.get("detector") == "non_termination"]
    ending += [_finding(f) for f in session_findings
               if isinstance(f, dict) and f.get("detector") == "non_termination"
               and f.get("kind") in SESSION_NOT_ENDED_KINDS]
    return predictor.predict(evaluation, ending)
