"""Trajectory -> the text every judge prompt embeds (compacted, findings included).

One rendering per trace is shared by all judges (and by the combined call): the task, the
system prompt once, each step in tree order labelled ``[step N]`` (LLM steps show only the
text they add to the conversation, and their output; a tool step's arguments only when they
differ from the call shown), the final output (unless already shown) and the deterministic
findings. Step indexes are the ids judges answer with, so every score maps back
to a span id and agent node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from otel_eval.base.model import Evaluation, Step, Trajectory
from otel_eval.evaluate.detectors.canonical import canonical_arguments
from otel_eval.evaluate.judge.compact import (
    Message,
    MessageLog,
    compact_json,
    is_raw_object,
    normalize,
    parse_messages,
    reply_message,
    trim,
)
from otel_eval.evaluate.judge.config import CompactionConfig


@dataclass(frozen=True, slots=True)
class StepRef:
    """A judged unit: an LLM step (and, for the process grader, the tool steps it led to)."""

    index: int
    span_id: str
    node: str | None
    span_ids: tuple[str, ...]  # the LLM step and its tool steps (a ClawTrack "turn")
    last_index: int  # index of the turn's last step


@dataclass(frozen=True, slots=True)
class Rendered:
    task: str
    trajectory: str
    final_output: str
    findings: str
    steps: tuple[StepRef, ...]


def turns(trajectory: Trajectory) -> tuple[StepRef, ...]:
    """LLM steps in order, each with the tool steps that follow it until the next LLM step."""
    refs: list[tuple[Step, list[Step]]] = []
    for step in trajectory.steps:
        if step.kind == "llm":
            refs.append((step, [step]))
        elif step.kind == "tool" and refs:
            refs[-1][1].append(step)
    return tuple(StepRef(s.index, s.span_id, s.node, tuple(t.span_id for t in turn),
                         turn[-1].index) for s, turn in refs)


def _json_text(value: Any, separators: tuple[str, str] | None = None) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str,
                      separators=separators)


class _Renderer:
    def __init__(self, limits: CompactionConfig) -> None:
        self.c = limits
        self.log = MessageLog()
        self.called: set[str] = set()  # lines and call arguments of the last LLM output
        self.node: str | None = None  # agent node of the last LLM step (shown when it changes)

    def message(self, m: Message, inbound: bool = False) -> str:
        """One message; ``inbound`` for an LLM call's input (its prompts are cut shorter)."""
        default = self.c.max_input_message_chars if inbound else self.c.max_message_chars
        limit = {"system": self.c.max_system_prompt_chars,
                 "tool": self.c.max_tool_output_chars}.get(m.role, default)
        body = trim(m.content, limit, self.c.head_ratio)
        line = f"  {m.role}: {body}" if body else f"  {m.role}:"
        if m.tool_calls:
            line += "\n  calls: " + trim(m.tool_calls, self.c.max_message_chars, self.c.head_ratio)
        return line

    def llm(self, step: Step) -> list[str]:
        head = f"[step {step.index}] llm"
        if step.node != self.node:
            head += f" node={step.node}" if step.node else " node=(main)"
            self.node = step.node
        lines = [head + (" status=error" if step.status == "error" else "")]
        new = self.log.new(parse_messages(step.input_text))
        if new:
            lines.append(" input (new messages):")
            lines.extend(self.message(m, inbound=True) for m in new)
        out = parse_messages(step.output_text)
        if is_raw_object(out) and (step.answer is not None or step.tool_calls):
            # never the response object whose text and calls were read: what was read
            out = [reply_message(step.answer, [(c.name, c.arguments) for c in step.tool_calls])]
        self.log.mark(out)
        self.called = {a for m in out for a in m.call_args}
        self.called.update(normalize(line) for m in out for line in m.content.splitlines())
        if out:
            lines.append(" output:")
            lines.extend(self.message(m) for m in out)
        if step.error:
            lines.append(f" error: {trim(step.error, self.c.max_message_chars)}")
        return lines

    def arguments(self, arguments: Any) -> str:
        """The arguments, or a note when the last LLM output showed them (as a structured call
        or, for agents that write code or commands, as lines of its text)."""
        text = _json_text(arguments)
        values = list(arguments.values()) if isinstance(arguments, dict) else [arguments]
        lines = [n for v in values for n in map(normalize, _json_text(v).splitlines()) if n]
        if text and (canonical_arguments(arguments) in self.called
                     or (lines and all(n in self.called for n in lines))):
            return "(as called)"
        self.log.mark_text(text)
        return trim(_json_text(arguments, (",", ":")), self.c.max_message_chars,
                    self.c.head_ratio)

    def tool(self, step: Step) -> list[str]:
        args = self.arguments(step.arguments)
        head = f"[step {step.index}] tool {step.tool_name or step.name}"
        lines = [head + (" status=error" if step.status == "error" else "") + f" args: {args}"]
        if step.result is not None:
            lines.append(" result: " + trim(compact_json(step.result),
                                            self.c.max_tool_output_chars, self.c.head_ratio))
            self.log.mark([Message("tool", step.result)])  # not again as the next input
        if step.error:
            lines.append(f" error: {trim(step.error, self.c.max_message_chars)}")
        return lines

    def render(self, trajectory: Trajectory) -> str:
        lines: list[str] = []
        for step in trajectory.steps:
            if step.kind == "llm":
                lines.extend(self.llm(step))
            elif step.kind == "tool":
                lines.extend(self.tool(step))
            elif step.status == "error":  # agent / chain steps matter only when they fail
                lines.append(f"[step {step.index}] {step.kind} {step.name} status=error"
                             f" error: {trim(step.error or '', self.c.max_message_chars)}")
        return "\n".join(lines)


_SHORT_FINAL_CHARS = 200  # a final output this short is repeated even when shown in the run


def _plain(messages: list[Message]) -> str:
    """Task input / final output as text: a lone message's content, else role-prefixed."""
    if not messages:
        return "(not recorded)"
    if len(messages) == 1 and not messages[0].tool_calls:
        return messages[0].content
    return "\n".join(f"{m.role}: {m.content}" + (f" calls: {m.tool_calls}" if m.tool_calls
                                                   else "") for m in messages)


def render_findings(evaluation: Evaluation) -> str:
    if not evaluation.findings:
        return "(none)"
    out = []
    for f in evaluation.findings:
        where = f" (steps {', '.join(map(str, f.step_indexes))})" if f.step_indexes else ""
        out.append(f"- [{f.severity}] {f.detector}/{f.kind}: {f.message}{where}")
    return "\n".join(out)


def render(evaluation: Evaluation, limits: CompactionConfig) -> Rendered:
    """Render once per trace; halves the per-message limits until the total fits."""
    t = evaluation.trajectory
    text = ""
    task_messages = parse_messages(t.input)
    # a plain-text task is the run's first user message
    seen = task_messages + [Message("user", m.content) for m in task_messages if m.role == "raw"]
    for _ in range(5):
        r = _Renderer(limits)
        r.log.mark(seen)  # the task is shown above the run, not again inside it
        text = r.render(t)
        if len(text) <= limits.max_trajectory_chars:
            break
        limits = replace(limits, max_tool_output_chars=limits.max_tool_output_chars // 2,
                         max_message_chars=limits.max_message_chars // 2,
                         max_input_message_chars=limits.max_input_message_chars // 2,
                         max_system_prompt_chars=limits.max_system_prompt_chars // 2)
    text = trim(text, limits.max_trajectory_chars, 0.5)
    final = _plain(parse_messages(t.output))
    if len(final) > _SHORT_FINAL_CHARS and r.log.seen(final):
        final = "(the run's last output, shown in full above)"
    return Rendered(
        task=trim(_plain(task_messages), limits.max_task_chars, limits.head_ratio),
        trajectory=text or "(no steps recorded)",
        final_output=trim(final, limits.max_task_chars, limits.head_ratio),
        findings=render_findings(evaluation),
        steps=turns(t),
    )
