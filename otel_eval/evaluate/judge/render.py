"""Trajectory -> the text every judge prompt embeds (compacted, findings included).

One rendering per trace is shared by all judges (and by the combined call): the task, the
system prompt once, each step in tree order labelled ``[step N]`` (LLM steps show only the
text they add to the conversation, and their output; a tool step's arguments only when they
differ from the call shown), the final output (unless already shown) and the deterministic
findings. Step indexes are the ids judges answer with, so every score maps back
to a span id and agent node.

The whole view is held to a share of what the agent itself read (``view_budget_chars``):
an agent re-sends its history on every call, so its input grows with the square of its
length while the judge reads each text once. The findings are listed up to
``FINDINGS_SHOWN`` (the rest counted, each message cut: ``finding_lines``) and their text
counts in the budget. Step headers, the task and the final output are never cut; the other
texts are cut to head + tail at one common length (``fit``), weighted so the agent's
decisions and the user's turns keep more than replies, tool results and prompts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from otel_eval.base.results import Evaluation, Finding
from otel_eval.base.steps import Step, Trajectory
from otel_eval.base.words import wide_count
from otel_eval.evaluate.detectors.canonical import canonical_arguments
from otel_eval.evaluate.judge.compact import (
    Message,
    MessageLog,
    compact_json,
    is_raw_reply,
    normalize,
    parse_messages,
    reply_message,
    sent_chars,
    split,
    trim,
)
from otel_eval.evaluate.judge.config import CompactionConfig
from otel_eval.evaluate.judge.frame import STEP_HEADER, escape


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


@dataclass(frozen=True, slots=True)
class _Cut:
    """A text of the run that the view's budget may cut to head + tail: ``prefix`` + ``text``,
    at most ``cap`` chars of it (its configured limit), ``weight`` x the budget's level."""

    prefix: str
    text: str
    cap: int
    weight: int
    head_ratio: float

    def shown(self, limit: int) -> str:
        # escaped once cut: a tail may start at any character of the text
        return self.prefix + escape(trim(self.text, min(self.cap, limit), self.head_ratio),
                                    continued=bool(self.prefix))

    def __str__(self) -> str:
        return self.shown(self.cap)


# Weights of a text's share of the budget (``_level``): the agent's decisions (tool calls and
# their arguments) and errors before user turns, before replies, tool results and prompts.
_CALL, _ASKED, _SAID = 4, 2, 1
# A cut text keeps at least this much, times its weight (head and tail around the marker).
# Chars.
_MIN_CUT_CHARS = 100
# Characters per token when sizing the view against the agent's input tokens (English prose
# and JSON with gpt-4o's tokenizer: 3.5-4.5; the low end, so the view is not under-sized).
CHARS_PER_TOKEN = 3.5

Piece = str | _Cut
T = TypeVar("T")
# What every text of the run goes through before it is cut (the judge's ``Redactor``): a
# secret across a cut would keep a part that no longer reads as one (a key without its
# ``sk-`` prefix), and pass the redaction of the prompt.
Redact = Callable[[str], str]


def unchanged(text: str) -> str:
    return text


def one_line(name: str | None) -> str | None:
    """A span's name (tool, agent node) as written in a step header: on that one line."""
    return None if name is None else " ".join(name.splitlines())


def _role(role: str) -> str:
    """A message's role (span text) as it opens its line of the view."""
    return escape(" ".join(role.splitlines()))


def _level(cuts: list[_Cut], room: int) -> int:
    """The largest level L (chars) with sum(min(len, cap, weight * max(L, floor))) <= room:
    max-min fair shares (water-filling), so a short text stays whole and only the longest
    are cut; 0 when even the floors do not fit (the run is then shown over its budget: a
    call keeps 4 x the floor, a user turn 2 x)."""
    def used(level: int) -> int:
        return sum(min(len(c.text), c.cap, c.weight * max(level, _MIN_CUT_CHARS))
                   for c in cuts)

    lo, hi = 0, max((min(len(c.text), c.cap) for c in cuts), default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if used(mid) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def fit(pieces: list[Piece], budget_chars: int) -> str:
    """The run's lines within ``budget_chars``: fixed lines (step headers: the ids the judge
    cites) whole, each cut text at the common level its weight gives it."""
    cuts = [p for p in pieces if isinstance(p, _Cut)]
    fixed = sum(len(p) + 1 for p in pieces if isinstance(p, str))
    fixed += sum(len(c.prefix) + 1 for c in cuts)
    whole = sum(min(len(c.text), c.cap) for c in cuts)
    if fixed + whole <= budget_chars:
        return "\n".join(map(str, pieces))
    level = _level(cuts, max(budget_chars - fixed, 0))
    return "\n".join(p if isinstance(p, str) else
                     p.shown(p.weight * max(level, _MIN_CUT_CHARS)) for p in pieces)


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
    def __init__(self, limits: CompactionConfig, redact: Redact = unchanged) -> None:
        self.c = limits
        self.redact = redact
        self.log = MessageLog()
        self.called: set[str] = set()  # lines and call arguments of the last LLM output
        self.node: str | None = None  # agent node of the last LLM step (shown when it changes)
        self.results: dict[str, int] = {}  # a long tool result -> the step that showed it

    def cut(self, prefix: str, text: str, cap: int, weight: int) -> _Cut:
        return _Cut(prefix, self.redact(text), cap, weight, self.c.head_ratio)

    def message(self, m: Message, inbound: bool = False) -> list[Piece]:
        """One message; ``inbound`` for an LLM call's input (its prompts are cut shorter)."""
        default = self.c.max_input_message_chars if inbound else self.c.max_message_chars
        limit = {"system": self.c.max_system_prompt_chars,
                 "tool": self.c.max_tool_output_chars}.get(m.role, default)
        weight = _ASKED if m.role == "user" else _SAID
        out: list[Piece] = []
        if m.content:
            out.append(self.cut(f"  {_role(m.role)}: ", m.content, limit, weight))
        elif not m.tool_calls or m.role != "assistant":  # a reply of calls only: the calls
            out.append(f"  {_role(m.role)}:")
        if m.tool_calls:
            out.append(self.cut("  calls: ", m.tool_calls, self.c.max_message_chars, _CALL))
        return out

    def llm(self, step: Step) -> list[Piece]:
        head = f"{STEP_HEADER}{step.index}] llm"
        if step.node != self.node:
            head += f" node={one_line(step.node)}" if step.node else " node=(main)"
            self.node = step.node
        lines: list[Piece] = [head + (" status=error" if step.status == "error" else "")]
        new = self.log.new(parse_messages(step.input_text))
        if new:
            lines.append(" new input:")
            lines.extend(p for m in new for p in self.message(m, inbound=True))
        out = parse_messages(step.output_text)
        if is_raw_reply(out) and (step.answer is not None or step.tool_calls):
            # never the response object whose text and calls were read, nor a reply's text
            # without the calls recorded beside it (the AI SDK's): what was read
            out = [reply_message(step.answer, [(c.name, c.arguments) for c in step.tool_calls])]
        self.log.mark(out)
        self.called = {a for m in out for a in m.call_args}
        self.called.update(normalize(line) for m in out for line in m.content.splitlines())
        if out:
            lines.append(" output:")
            lines.extend(p for m in out for p in self.message(m))
        if step.error:
            lines.append(self.cut(" error: ", step.error, self.c.max_message_chars, _CALL))
        return lines

    def arguments(self, prefix: str, arguments: Any) -> Piece:
        """The arguments, or a note when the last LLM output showed them (as a structured call
        or, for agents that write code or commands, as lines of its text)."""
        text = _json_text(arguments)
        values = list(arguments.values()) if isinstance(arguments, dict) else [arguments]
        lines = [n for v in values for n in map(normalize, _json_text(v).splitlines()) if n]
        if text and (canonical_arguments(arguments) in self.called
                     or (lines and all(n in self.called for n in lines))):
            return prefix + "(as called)"
        self.log.mark_text(text)
        return self.cut(prefix, _json_text(arguments, (",", ":")), self.c.max_message_chars,
                        _CALL)

    def result(self, step: Step, result: str) -> Piece:
        """A tool's result, or which step showed the same one (a long result re-read)."""
        text = compact_json(result)
        if len(text) >= _SAME_RESULT_CHARS:
            if (earlier := self.results.get(text)) is not None:
                return f" result: (the same as step {earlier})"
            self.results[text] = step.index
        return self.cut(" result: ", text, self.c.max_tool_output_chars, _SAID)

    def tool(self, step: Step) -> list[Piece]:
        head = f"{STEP_HEADER}{step.index}] tool {one_line(step.tool_name or step.name)}"
        lines = [self.arguments(head + (" status=error" if step.status == "error" else "")
                                + " args: ", step.arguments)]
        if step.result is not None:
            lines.append(self.result(step, step.result))
            self.log.mark([Message("tool", step.result)])  # not again as the next input
        if step.error and step.error.strip() != (step.result or "").strip():
            lines.append(self.cut(" error: ", step.error, self.c.max_message_chars, _CALL))
        return lines

    def render(self, trajectory: Trajectory) -> list[Piece]:
        lines: list[Piece] = []
        for step in trajectory.steps:
            if step.kind == "llm":
                lines.extend(self.llm(step))
            elif step.kind == "tool":
                lines.extend(self.tool(step))
            elif step.status == "error":  # agent / chain steps matter only when they fail
                head = f"{STEP_HEADER}{step.index}] {step.kind} {one_line(step.name)}"
                lines.append(self.cut(head + " status=error error: ", step.error or "",
                                      self.c.max_message_chars, _CALL))
        return lines


# A tool result this long, identical to one shown before, is shown as "the same as step N".
_SAME_RESULT_CHARS = 80
_SHORT_FINAL_CHARS = 200  # a final output this short is repeated even when shown in the run


def _plain(messages: list[Message]) -> str:
    """Task input / final output as text: a lone message's content, else role-prefixed."""
    if not messages:
        return "(not recorded)"
    if len(messages) == 1 and not messages[0].tool_calls:
        return messages[0].content
    return "\n".join(f"{m.role}: {m.content}" + (f" calls: {m.tool_calls}" if m.tool_calls
                                                   else "") for m in messages)


# Findings written in a judge prompt (trace or session), the most severe first when there are
# more; the rest are counted in one line. A trace of 10,000 failed tool calls has 10,000
# findings: written whole, they were 2.5 MB in each of its 84 step-chunk prompts.
FINDINGS_SHOWN = 20
FINDING_CHARS = 300  # a finding's message in a prompt, chars (head + tail)
FINDING_STEPS = 10  # step indexes written per finding (the rest counted)
_SEVERITY_RANK = {"error": 0, "warning": 1}


def finding_lines(findings: Sequence[T], severity: Callable[[T], Any],
                  line: Callable[[T], str]) -> str:
    """The findings as ``line`` writes them, in their order: all when at most
    ``FINDINGS_SHOWN``, else the ``FINDINGS_SHOWN`` most severe (errors, then warnings, then
    the rest, each in order) and "(N more findings)"; "(none)" when there is none."""
    if not findings:
        return "(none)"
    shown: Sequence[T] = findings
    if len(findings) > FINDINGS_SHOWN:
        ranked = sorted(range(len(findings)),
                        key=lambda i: _SEVERITY_RANK.get(severity(findings[i]), 2))
        shown = [findings[i] for i in sorted(ranked[:FINDINGS_SHOWN])]
    lines = [line(f) for f in shown]
    if len(findings) > len(shown):
        lines.append(f"({len(findings) - len(shown)} more findings)")
    return "\n".join(lines)


def _finding_line(f: Finding, redact: Redact) -> str:
    steps = f.step_indexes
    where = ""
    if steps:
        more = len(steps) - FINDING_STEPS
        where = f" (steps {', '.join(map(str, steps[:FINDING_STEPS]))}" \
                + (f" and {more} more)" if more > 0 else ")")
    message = escape(trim(redact(f.message), FINDING_CHARS), continued=True)
    return f"- [{f.severity}] {f.detector}/{f.kind}: {message}{where}"


def render_findings(evaluation: Evaluation, redact: Redact = unchanged) -> str:
    """The trace's findings for the judge, bounded (``finding_lines``)."""
    return finding_lines(evaluation.findings, lambda f: f.severity,
                         lambda f: _finding_line(f, redact))


def agent_input_tokens(trajectory: Trajectory) -> int:
    """What the agent's LLM calls read, tokens: their recorded usage, else their input text
    at ``CHARS_PER_TOKEN``, a file in it (an image) counted as what the judge is shown of it
    (``sent_chars``: its placeholder, not its base64 bytes)."""
    return sum(s.input_tokens if s.input_tokens is not None
               else int(sent_chars(s.input_text) / CHARS_PER_TOKEN) for s in trajectory.llm_steps)


def view_budget_chars(trajectory: Trajectory, limits: CompactionConfig,
                      scale: float = 1.0) -> int:
    """Characters the judge's view of this run may take (task, steps, final output and
    findings): ``view_share`` of the agent's own input, at least ``min_view_tokens``, at most
    ``max_trajectory_chars``; ``view_share`` 0 = the per-text limits only. ``scale``: the
    characters a token of the run's text takes, as a share of ``CHARS_PER_TOKEN``
    (``text_scale``: 1 for English)."""
    if limits.view_share <= 0:
        return limits.max_trajectory_chars
    tokens = max(limits.view_share * agent_input_tokens(trajectory), limits.min_view_tokens)
    return min(int(tokens * CHARS_PER_TOKEN * scale), limits.max_trajectory_chars)


def text_scale(texts: Sequence[str]) -> float:
    """The characters a token of ``texts`` takes, as a share of ``CHARS_PER_TOKEN``: 1 for
    text with no wide character; a wide one (Chinese, Japanese, Korean: ``words.wide_count``)
    is about a token on its own, so a view in Chinese holds as many tokens in ~3.5 times fewer
    characters, and its budget of tokens is its budget of characters that much smaller."""
    total = sum(map(len, texts))
    wide = sum(map(wide_count, texts))
    return total / (total + (CHARS_PER_TOKEN - 1) * wide) if wide else 1.0


def _bounded(text: str, limit: int) -> str:
    """``text`` (the run's view) cut to ``limit`` chars, head and tail (``trim``); the tail's
    first line escaped when the cut fell inside a line (it may start at any character of a
    span's text, or of a name in a step header)."""
    if limit <= 0 or len(text) <= limit:
        return text
    head, tail = split(text, limit, 0.5)
    marker = f"\n[... {len(text) - len(head) - len(tail)} chars trimmed ...]\n"
    before = text[len(text) - len(tail) - 1]
    if tail and len((before + ".").splitlines()) == 1:  # not after a line break
        first, *rest = tail.splitlines(keepends=True)
        tail = escape(first) + "".join(rest)
    return head + marker + tail


def render(evaluation: Evaluation, limits: CompactionConfig,
           redact: Redact = unchanged) -> Rendered:
    """Render once per trace, within the view's budget (``view_budget_chars``): the task and
    the final output first (up to ``max_task_chars``), then the run's steps, their long texts
    cut to fit (``fit``); each text ``redact``-ed before it is cut."""
    t = evaluation.trajectory
    # the request read from a structured input with no messages (``trajectory.build``)
    task_messages = parse_messages(t.task if t.input_messages is None and t.task is not None
                                   else t.input)
    # a plain-text task is the run's first user message
    seen = task_messages + [Message("user", m.content) for m in task_messages if m.role == "raw"]
    r = _Renderer(limits, redact)
    r.log.mark(seen)  # the task is shown above the run, not again inside it
    pieces = r.render(t)
    final = _plain(parse_messages(t.output))
    if len(final) > _SHORT_FINAL_CHARS and r.log.seen(final):
        final = "(the run's last output, shown in full above)"
    task = trim(redact(_plain(task_messages)), limits.max_task_chars, limits.head_ratio)
    final = trim(redact(final), limits.max_task_chars, limits.head_ratio)
    findings = render_findings(evaluation, redact)
    # measured before the escapes (a backslash a line: noise beside CHARS_PER_TOKEN)
    scale = text_scale([task, final, findings,
                        *(p if isinstance(p, str) else p.text[:p.cap] for p in pieces)])
    room = view_budget_chars(t, limits, scale) - len(task) - len(final) - len(findings)
    task, final = escape(task), escape(final)
    text = fit(pieces, max(room, 0))
    text = _bounded(text, limits.max_trajectory_chars)  # the hard bound, past the floors
    return Rendered(task=task, trajectory=text or "(no steps recorded)", final_output=final,
                    findings=findings, steps=turns(t))
