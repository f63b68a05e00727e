"""Stage: evaluate, sessions. Detectors across the turns of one conversation.

Each is a pure function of the turns (stored v1 evaluation objects, in start order) and the
config, returning findings that name the turn (``trace_id``) and the step they point at:

- ``loop`` / ``repeated_across_turns`` (error): the same call, same tool and same canonical
  arguments (``detectors.canonical``), made in ``loop_turns`` or more turns. No single trace
  needs to repeat anything: the agent forgot what an earlier turn already learned.
- ``repeated_request`` / ``same_request`` (warning): the user's request (a turn's first user
  message, whitespace and case folded) repeated in ``repeated_request_turns`` or more turns:
  the agent did not help the first time. Short requests ("yes") are not compared.
- ``non_termination`` (complete sessions only: an open one may still go on):
  ``pending_tool_call`` (error), the last turn's last LLM call asked for a tool that never
  ran (a call that ran at the very end, a handoff such as tau-bench's
  ``transfer_to_human_agents``, is an ending); ``unanswered_question`` (warning: "anything
  else?" is a polite close), the last turn's answer is a question nobody answered.
- ``budget`` / ``session_turns`` (error): more turns than ``session_turns``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from otel_eval.evaluate.detectors.canonical import canonical_arguments, norm_ws
from otel_eval.evaluate.sessions.config import SessionsConfig

__all__ = ["DETECTORS", "SessionFinding"]

SessionFinding = dict[str, Any]
Turns = Sequence[dict[str, Any]]


def _finding(detector: str, kind: str, severity: str, message: str, turn: dict[str, Any],
             step: int | None, **attributes: Any) -> SessionFinding:
    return {"detector": detector, "kind": kind, "severity": severity, "message": message,
            "trace_id": turn.get("trace_id"), "step": step, "attributes": attributes}


def _calls(turn: dict[str, Any]) -> dict[tuple[str, str], int]:
    """(tool, canonical arguments) -> the index of its first step, for the turn's calls."""
    out: dict[tuple[str, str], int] = {}
    for step in turn.get("steps") or ():
        if step.get("kind") == "tool" and step.get("tool_name"):
            key = (str(step["tool_name"]), canonical_arguments(step.get("arguments")))
            out.setdefault(key, int(step.get("index", 0)))
    return out


def loop(turns: Turns, config: SessionsConfig, complete: bool) -> list[SessionFinding]:
    seen: dict[tuple[str, str], list[tuple[int, int]]] = {}  # call -> [(turn, step)]
    for number, turn in enumerate(turns):
        for key, step in _calls(turn).items():
            seen.setdefault(key, []).append((number, step))
    out = []
    for (tool, arguments), where in seen.items():
        if len(where) >= config.loop_turns:
            number, step = where[-1]
            out.append(_finding(
                "loop", "repeated_across_turns", "error",
                f"{tool} called with the same arguments in {len(where)} turns of the "
                "conversation", turns[number], step, tool=tool, arguments=arguments[:256],
                turns=[n + 1 for n, _ in where]))
    return out


def _request(turn: dict[str, Any]) -> str:
    text = turn.get("input")
    return norm_ws(text).casefold().rstrip(".!? ") if isinstance(text, str) else ""


def repeated_request(turns: Turns, config: SessionsConfig,
                     complete: bool) -> list[SessionFinding]:
    seen: dict[str, list[int]] = {}
    for number, turn in enumerate(turns):
        request = _request(turn)
        if len(request) >= config.min_request_chars:
            seen.setdefault(request, []).append(number)
    return [_finding("repeated_request", "same_request", "warning",
                     f"the user asked the same thing in {len(numbers)} turns",
                     turns[numbers[-1]], None, turns=[n + 1 for n in numbers],
                     request=request[:256])
            for request, numbers in seen.items() if len(numbers) >= config.repeated_request_turns]


def non_termination(turns: Turns, config: SessionsConfig,
                    complete: bool) -> list[SessionFinding]:
    if not complete or not turns:
        return []
    last = turns[-1]
    llm = [s for s in last.get("steps") or () if s.get("kind") == "llm"]
    calls = llm[-1].get("tool_calls") or () if llm else ()
    pending = [str(c.get("name")) for c in calls if c.get("outcome") != "ran"]
    if pending:
        return [_finding("non_termination", "pending_tool_call", "error",
                         "the conversation ended with a tool call pending in its last turn ("
                         + ", ".join(pending) + ")", last, int(llm[-1].get("index", 0)),
                         tools=pending)]
    answer = last.get("output")
    if isinstance(answer, str) and answer.rstrip().endswith("?"):
        return [_finding("non_termination", "unanswered_question", "warning",
                         "the conversation ended with the agent's question unanswered",
                         last, None)]
    return []


def budget(turns: Turns, config: SessionsConfig, complete: bool,
           total: int | None = None) -> list[SessionFinding]:
    limit = config.session_turns
    count = len(turns) if total is None else total
    if limit is None or count <= limit or not turns:
        return []
    return [_finding("budget", "session_turns", "error",
                     f"{count} turns in the conversation (budget {limit})", turns[-1], None,
                     value=count, limit=limit)]


Detector = Callable[[Turns, SessionsConfig, bool], list[SessionFinding]]
DETECTORS: dict[str, Detector] = {
    "loop": loop,
    "repeated_request": repeated_request,
    "non_termination": non_termination,
}
