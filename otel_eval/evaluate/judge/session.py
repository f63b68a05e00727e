"""The judge at the session level: a completed conversation as one judge call.

    session record + its turns (turn order, as stored) -> render_session (a bounded
    transcript) -> prompting.session -> Judge.judge_session (the same JudgeClient as the trace
    judges: concurrency, rate limits, hourly cost budget, retries, validation, redaction)
    -> {"mode": "combined", "model", "judges": {"session": ...}, "overall", "totals"}

One call per session, whatever ``judge.combined`` says: the conversation is one object to
grade. Span content is hostile: every text is cut (``TEXT_CHARS``), at most ``CALLS_SHOWN``
tool calls a turn, ``TURNS_SHOWN`` turns (the first and the newest) and
``render.FINDINGS_SHOWN`` findings (the most severe, as the trace judges') are written, so
the prompt is bounded whatever the conversation; each part is escaped like the trace judges'.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from otel_eval.evaluate.judge.frame import TURN_HEADER, escape
from otel_eval.evaluate.judge.render import (
    FINDING_CHARS,
    Redact,
    Rendered,
    finding_lines,
    unchanged,
)

TEXT_CHARS = 1500  # per user message or reply
ARGS_CHARS = 200  # per tool call's arguments
CALLS_SHOWN = 8  # tool calls written per turn (the rest counted)
TURNS_SHOWN = 40  # turns written: the first FIRST_TURNS and the newest (the rest counted)
FIRST_TURNS = 4


def _cut(value: Any, limit: int, redact: Redact = unchanged, continued: bool = True) -> str:
    """``value`` as text, redacted whole before it is cut (a secret across the cut would
    keep a part that no longer reads as one), a line of it that starts like a line of the
    prompt's frame (a turn's header among them) escaped (``frame.escape``; ``continued``: on
    a line the transcript opened, as ``  user: ``)."""
    if value is None:
        return ""
    text = redact(value if isinstance(value, str) else json.dumps(value, default=str))
    text = text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} cut]"
    return escape(text, continued)


def _calls(steps: Any, redact: Redact) -> list[str]:
    calls = [s for s in steps if isinstance(s, Mapping) and s.get("kind") == "tool"] \
        if isinstance(steps, list) else []
    out = []
    for step in calls[:CALLS_SHOWN]:
        failed = " -> error" if step.get("status") == "error" or step.get("error") else ""
        name = " ".join(_cut(step.get("tool_name") or step.get("name") or "?", 80,
                             redact).splitlines())
        arguments = _cut(step.get("arguments"), ARGS_CHARS, redact)
        out.append(f"  tool call: {name}({arguments}){failed}")
    if len(calls) > CALLS_SHOWN:
        out.append(f"  ({len(calls) - CALLS_SHOWN} more tool calls)")
    return out


def _verdict(turn: Mapping[str, Any]) -> str:
    verdict = turn.get("verdict")
    passed = verdict.get("passed") if isinstance(verdict, Mapping) else None
    return {True: "passed", False: "failed"}.get(passed, "unknown")  # type: ignore[arg-type]


def _turn(number: int, turn: Mapping[str, Any], redact: Redact) -> str:
    lines = [f"{TURN_HEADER}{number} (checks by code: {_verdict(turn)})",
             f"  user: {_cut(turn.get('input'), TEXT_CHARS, redact)}",
             *_calls(turn.get("steps"), redact),
             f"  agent: {_cut(turn.get('output'), TEXT_CHARS, redact)}"]
    return "\n".join(lines)


def _shown(turns: Sequence[Mapping[str, Any]], redact: Redact) -> list[str]:
    numbered = list(enumerate(turns, 1))
    if len(numbered) <= TURNS_SHOWN:
        return [_turn(n, t, redact) for n, t in numbered]
    head, tail = numbered[:FIRST_TURNS], numbered[-(TURNS_SHOWN - FIRST_TURNS):]
    hidden = len(numbered) - len(head) - len(tail)
    return [*(_turn(n, t, redact) for n, t in head), f"({hidden} turns not shown)",
            *(_turn(n, t, redact) for n, t in tail)]


def _findings(record: Mapping[str, Any], turns: Sequence[Mapping[str, Any]],
              redact: Redact) -> str:
    number = {t.get("trace_id"): n for n, t in enumerate(turns, 1)}

    def line(f: Mapping[str, Any]) -> str:
        where = number.get(f.get("trace_id"))
        return (f"- {_cut(f.get('detector'), 40)}/{_cut(f.get('kind'), 40)} "
                f"({_cut(f.get('severity'), 20)}"
                f"{f', turn {where}' if where else ''}): "
                f"{_cut(f.get('message'), FINDING_CHARS, redact)}")

    findings = [f for f in record.get("findings") or () if isinstance(f, Mapping)]
    return finding_lines(findings, lambda f: f.get("severity"), line)


def render_session(record: Mapping[str, Any], turns: Sequence[Mapping[str, Any]],
                   redact: Redact = unchanged) -> Rendered:
    """The conversation as the frame prompt's parts: the first request as the task, the
    transcript as the run, the last reply as the final output, the session findings; each
    text ``redact``-ed before it is cut."""
    first = turns[0] if turns else {}
    last = turns[-1] if turns else {}
    return Rendered(task=_cut(first.get("input"), TEXT_CHARS, redact, continued=False),
                    trajectory="\n\n".join(_shown(turns, redact)),
                    final_output=_cut(last.get("output"), TEXT_CHARS, redact, continued=False),
                    findings=_findings(record, turns, redact), steps=())
