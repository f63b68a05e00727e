"""Stage: trajectory (part). Actions written as code become steps.

Agents that act through code never send their tool calls as tool-call messages: smolagents'
CodeAgent writes a Python block that calls its tools (``Code:\\n```py ... ```<end_code>`` or
``<code>...</code>``), mini-swe-agent writes one ```` ```bash ```` block per turn. Here:

- ``trajectory.code_parse`` finds the blocks in an LLM reply (``code_blocks``) and reads a
  Python block's calls of *known* tools (a name the trace offers as a tool or a managed
  agent) with their arguments (``python_calls``);
- a shell block is one action (a ``bash`` step with ``{"command": ...}``), read by
  ``trajectory.shell.shell_commands`` (``shlex``) when rebuilt, to count what cannot be lexed;
- ``rebuild_code_actions`` turns the calls that no span ran into ``rebuilt`` tool steps right
  after the LLM step that wrote them (same span id, the parent of the span that ran the code),
  see its docstring for when a call counts as run;
- code given to an interpreter-like tool (``trajectory.interpreters``: ``execute_code``,
  ``run_python``, ...) is read by the same parser into the calls it makes, steps inside that
  tool step (``_Rebuilder.interpreted``).

Hostile input: code longer than ``MAX_CODE_CHARS`` is not parsed; parse depth errors
(``RecursionError``, ``MemoryError``), syntax errors, unterminated quotes and more than
``MAX_CALLS`` calls are counted in ``Trajectory.code_actions`` (``unparsed_<reason>``), never
raised. Each LLM reply holding a code fence is parsed once.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from otel_eval.base.steps import Step
from otel_eval.base.text import checked
from otel_eval.evaluate.conventions.messages import answer_text, message_text, results_text
from otel_eval.evaluate.trajectory.code_parse import (
    MAX_CODE_CHARS,
    code_blocks,
    python_calls,
)
from otel_eval.evaluate.trajectory.interpreters import interpreter_code
from otel_eval.evaluate.trajectory.shell import shell_commands

__all__ = ["CODE_TOOL", "last_message_text", "normalised_code", "rebuild_code_actions"]

CODE_TOOL = "python_interpreter"  # smolagents' name for a code action (ActionStep.tool_calls)


def normalised_code(code: str) -> str:
    """A code action as its step's arguments: common indentation removed, trailing spaces,
    blank lines and comment-only lines dropped, at most ``MAX_CODE_CHARS`` characters."""
    lines = [line.rstrip() for line in code[:MAX_CODE_CHARS].splitlines()]
    kept = [line for line in lines if line and not line.lstrip().startswith("#")]
    return textwrap.dedent("\n".join(kept))


def _reply(step: Step) -> str | None:
    text = step.reply
    raw = step.output_text
    if text is None and raw is not None and ("```" in raw or "<code>" in raw):
        text = answer_text(raw)
    if text is None or ("```" not in text and "<code>" not in text):
        return None
    return text


_DECODER = json.JSONDecoder()
# Object starts tried from the end of an input: the last message's nested objects are met
# first (agno's tool message holds its arguments), then its own start.
_TAIL_TRIES = 8
# The roles of a message that says what the agent observed: the user's words, a tool's
# result (a tool or function message; a user message of tool results, Anthropic's shape)
_OBSERVED = ("user", "tool", "tool-response", "function")


def last_message_text(raw: str | None) -> str | None:
    """The text of the last message of an LLM input, decoding only that message (an agent
    resends the whole conversation on every call: parsing each input whole would cost the
    square of the run's length): its text, else what its tool results say. None when the
    last message is not a user or tool message (then it holds no observation); a Responses
    ``function_call_output`` item is a tool message."""
    if not raw or not raw.rstrip().endswith("]"):
        return None
    end = len(raw.rstrip()) - 1
    msg = None
    # the usual order, the role first; then any order (agno's), or no role (Responses items).
    # ``{"`` starts an object wherever it is (a quote inside a JSON string is escaped): the
    # last message's nested objects are met first, then its own start
    for start, tries in (('{"role"', 2), ('{"', _TAIL_TRIES)):
        at = end
        for _ in range(tries):
            at = raw.rfind(start, 0, at)
            if at < 0:
                break
            try:
                found, stop = _DECODER.raw_decode(raw, at)
                found = checked(found, raw[at:stop])  # this message's text, not the input's
            except (ValueError, RecursionError):
                continue
            if not raw[stop:end].strip():
                msg = found  # the object that runs to the list's end: the last message
                break
        if msg is not None:
            break
    if not isinstance(msg, dict):
        return None
    if msg.get("role") in _OBSERVED or msg.get("type") == "function_call_output":
        text = message_text(msg)
        return text if text is not None else results_text(msg)
    return None


class _Runs:
    """The steps that ran an LLM step's code: its later siblings up to the next LLM
    sibling (smolagents: the TOOL and managed-agent spans of the same ``Step N`` span)."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.after: dict[int, list[Step]] = {}
        open_llm: dict[str | None, int] = {}  # parent span id -> position of its last LLM
        for position, step in enumerate(steps):
            if step.rebuilt:
                continue
            at = open_llm.get(step.parent_span_id)
            if step.kind == "llm":
                open_llm[step.parent_span_id] = position
                self.after[position] = []
            elif at is not None and step.kind in ("tool", "agent"):
                self.after[at].append(step)

    def take(self, position: int, name: str) -> Step | None:
        """The first unclaimed sibling that ran a call of ``name`` ("": any tool, for a
        shell block), claimed."""
        siblings = self.after.get(position, [])
        for i, step in enumerate(siblings):
            if step.kind == "agent":
                ran = step.node == name
            else:
                ran = name in ("", step.tool_name or step.name)
            if ran:
                return siblings.pop(i)
        return None


def _parameters(tools: Mapping[str, Any]) -> dict[str, list[str]]:
    out = {}
    for name, schema in tools.items():
        props = schema.get("properties") if isinstance(schema, Mapping) else None
        if isinstance(props, Mapping):
            out[name] = [str(k) for k in props]
    return out


class _Rebuilder:
    """State of one ``rebuild_code_actions`` pass. What it reads of the steps and tools
    (siblings, agents, spans by id, parameters) is worked out on first use: only when a reply
    or an interpreter call holds code, which most runs' do not."""

    def __init__(self, steps: Sequence[Step], tools: dict[str, Any], max_rebuilt: int,
                 set_aside: Mapping[int, Any]) -> None:
        self.steps, self.tools, self.max_rebuilt = steps, tools, max_rebuilt
        self.set_aside = set_aside  # arguments ``settle`` made unknown, by id() of the step
        self.offered = set(tools)  # the tools offered as the pass began (managed agents join)
        self.stats: dict[str, int] = {}
        self.children: dict[str, list[Step]] | None = None  # tool steps by parent, if asked
        self.read: set[str] = set()  # interpreter spans whose code a reply gave (read there)
        self.python: str | None = None  # the Python code of the reply read last
        self.inside: list[Step] = []  # the call steps of the reply read last

    @cached_property
    def runs(self) -> _Runs:
        return _Runs(self.steps)

    @cached_property
    def known(self) -> set[str]:
        """The tools a call in code may name: those offered, and the managed agents."""
        managed = {s.node for s in self.steps if s.kind == "agent" and s.node
                   and s.parent_span_id is not None}
        return self.offered | managed

    @cached_property
    def params(self) -> dict[str, list[str]]:
        return _parameters({name: self.tools[name] for name in self.offered})

    @cached_property
    def with_tools(self) -> set[str | None]:
        return {s.node for s in self.steps if s.kind == "tool" and not s.rebuilt}

    @cached_property
    def by_id(self) -> dict[str, Step]:
        return {s.span_id: s for s in self.steps if not s.rebuilt}

    @cached_property
    def next_llm(self) -> dict[int, Step]:
        """LLM position -> the next LLM step of its agent."""
        out: dict[int, Step] = {}
        last: dict[str | None, int] = {}
        for position, step in enumerate(self.steps):
            if step.kind == "llm" and not step.rebuilt:
                if step.node in last:
                    out[last[step.node]] = step
                last[step.node] = position
        return out

    @cached_property
    def spanned(self) -> set[str]:
        """Tools whose calls have spans."""
        return {s.tool_name or s.name for s in self.steps if s.kind == "tool"
                and not s.rebuilt}

    def count(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    def code_step(self, llm: Step, position: int, code: str, found: bool) -> Step | None:
        """The action step of a reply's Python code (smolagents runs every block it writes),
        or None: an interpreter tool span ran it (that span is the step, claimed as in_code
        False), or nothing shows the agent runs Python (no chain span around the LLM step,
        no call of a known tool in it, no smolagents ``<code>`` / ``<end_code>`` marker: a
        shell agent's reply may show Python it does not run)."""
        ran = self.runs.take(position, CODE_TOOL)
        if ran is not None:
            self.read.add(ran.span_id)  # its code is this reply's: read once, here
            return None
        parent = self.by_id.get(llm.parent_span_id or "")
        chain = parent is not None and parent.kind == "chain"
        if not (chain or found or "<end_code>" in (llm.output_text or "")
                or "<code>" in (llm.output_text or "")):
            return None
        step = Step(0, llm.span_id, llm.parent_span_id, "tool", CODE_TOOL, node=llm.node,
                    within_unknown=llm.within_unknown,
                    depth=llm.depth, start_ns=llm.end_ns, end_ns=llm.end_ns,
                    tool_name=CODE_TOOL, arguments={"code": normalised_code(code)},
                    rebuilt=True, code_block=True, convention=llm.convention)
        if chain and parent is not None:
            step.result = parent.result  # smolagents: the execution logs of the block
            step.end_ns = max(step.end_ns, parent.end_ns)
            if parent.status == "error":
                step.status, step.error = "error", parent.error
        elif position in self.next_llm:  # what the agent was told next: the observation
            step.result = last_message_text(self.next_llm[position].input_text)
        self.count("code_steps")
        return step

    def calls(self, text: str) -> list[tuple[str, dict[str, Any], str]]:
        """(name, arguments, source) of the actions of one reply: its one shell block (a
        shell agent runs a reply only when it holds exactly one; Python blocks beside it are
        snippets in its reasoning), else the calls of known tools in its Python blocks
        (smolagents runs them all, joined)."""
        blocks = code_blocks(text)
        shell = [code for language, code in blocks if language == "shell"]
        python = "\n".join(code for language, code in blocks if language == "python")
        if len(shell) == 1:
            self.count("blocks")
            command = shell[0].strip()
            return [("", {"command": command}, command)]
        if not python.strip():
            return []
        self.count("blocks")
        found, problem = python_calls(python, self.known, self.params)
        if problem:
            self.count(f"unparsed_{problem}")
        self.python = python
        return [(c.name, c.arguments, c.source) for c in found]

    def step_for(self, llm: Step, position: int, name: str, arguments: dict[str, Any],
                 source: str, in_code: bool = False) -> Step | None:
        """The rebuilt step of one call, or None when a tool span ran it (or, in an agent
        whose tools have spans, when none did: it did not run)."""
        ran = self.runs.take(position, name)
        if ran is not None and ran.kind == "tool":
            ran.in_code = in_code
            if ran.arguments is None and id(ran) in self.set_aside \
                    and self.set_aside[id(ran)] == arguments:
                # the value its span recorded, which did not fit the tool's schema, is what
                # the code called it with: its arguments, right or wrong (``settle``)
                ran.arguments = arguments
                ran.unknown.pop("arguments", None)
                ran.sources["arguments"] = f"{ran.sources.get('arguments', '')} (the code's call)"
            self.inside.append(ran)
            self.count("steps")
            return None
        if ran is None and llm.node in self.with_tools:
            return None
        if self.stats.get("rebuilt", 0) >= self.max_rebuilt:
            self.count("over_limit")  # a trace's bound: 64 calls x 256 blocks x every reply
            return None
        tool = name or "bash"
        if not name:  # a shell action rebuilt: can its commands be read?
            problem = shell_commands(source)[2]
            if problem:
                self.count(f"unparsed_{problem}")
        step = Step(0, llm.span_id, llm.parent_span_id, "tool", tool, node=llm.node,
                    within_unknown=llm.within_unknown,
                    depth=llm.depth, start_ns=llm.end_ns, end_ns=llm.end_ns, tool_name=tool,
                    arguments=arguments, rebuilt=True, convention=llm.convention,
                    in_code=in_code)
        if ran is not None:  # a managed agent: its span ran it
            step.result, step.status, step.error = ran.result, ran.status, ran.error
            step.end_ns = ran.end_ns
            self.tools.setdefault(name, {})
        else:
            parent = self.by_id.get(llm.parent_span_id or "")
            if parent is not None and parent.kind == "chain":
                step.result = parent.result  # smolagents: the execution logs of the block
                if parent.status == "error" and source and source[:200] in (parent.error or ""):
                    step.status, step.error = "error", parent.error
            elif position in self.next_llm:  # what the agent was told next: the observation
                step.result = last_message_text(self.next_llm[position].input_text)
        self.count("steps")
        self.count("rebuilt")
        self.inside.append(step)
        return step


    def interpreted(self, tool: Step) -> list[Step]:
        """The calls of known tools in the code given to an interpreter-like tool
        (``trajectory.interpreters``), as steps inside it: a tool span under it that ran a
        call is that call's step (marked ``in_code``); a call of a tool that has no span in
        the trace is rebuilt right after it (its span id, under it: its ``in_code`` steps,
        result the interpreter's output); a call of a tool with spans elsewhere but none
        under this one did not run. Returns the rebuilt steps."""
        name = tool.tool_name or tool.name
        code = interpreter_code(name, tool.arguments, self.tools.get(name))
        if code is None or tool.span_id in self.read:
            return []
        self.count("interpreter_blocks")
        found, problem = python_calls(code, self.known - {name}, self.params)
        if problem:
            self.count(f"unparsed_{problem}")
        if found and self.children is None:
            self.children = {}
            for s in self.steps:
                if s.kind == "tool" and not s.rebuilt and s.parent_span_id is not None:
                    self.children.setdefault(s.parent_span_id, []).append(s)
        children = (self.children or {}).get(tool.span_id, [])
        out = []
        for call in found:
            self.count("calls")
            ran = next((c for c in children if (c.tool_name or c.name) == call.name), None)
            if ran is not None:
                children.remove(ran)
                ran.in_code = True
                self.count("steps")
                continue
            if call.name in self.spanned:
                continue  # its tool has spans: this call has none, it did not run
            if self.stats.get("rebuilt", 0) >= self.max_rebuilt:
                self.count("over_limit")
                continue
            step = Step(0, tool.span_id, tool.span_id, "tool", call.name, node=tool.node,
                        within_unknown=tool.within_unknown,
                        depth=tool.depth + 1, start_ns=tool.start_ns, end_ns=tool.end_ns,
                        tool_name=call.name, arguments=call.arguments, result=tool.result,
                        rebuilt=True, in_code=True, convention=tool.convention)
            if tool.status == "error" and call.source[:200] in (tool.error or ""):
                step.status, step.error = "error", tool.error
            self.count("steps")
            self.count("rebuilt")
            out.append(step)
        return out


def rebuild_code_actions(steps: list[Step], tools: dict[str, Any], max_rebuilt: int = 500,
                         set_aside: Mapping[int, Any] | None = None,
                         ) -> tuple[list[Step], dict[str, int]]:
    """``steps`` with the tool calls made by code actions (in LLM replies that request no
    tool calls: a reply that does acts through them, its code is an example) inserted as
    rebuilt tool steps, re-indexed, and the counts of what was read (``blocks``, ``calls``,
    ``steps``, ``rebuilt``, ``unparsed_<reason>``, ``over_limit``: calls past
    ``max_rebuilt`` rebuilt steps, not made steps; empty when no LLM reply holds code).

    A call (of a known tool, in an LLM reply's code) was run by a later sibling span of the
    LLM step, before the next LLM sibling, with its name (a tool span, or a managed agent's
    span: then the step is rebuilt with that agent's result, as smolagents runs managed agents
    like tools); not by any span, it is rebuilt only in an agent whose tool calls have no spans
    at all (an instrumentation that records only LLM calls): where tool spans exist, a call
    without one did not run (the code failed before it). A managed agent called from code is
    added to ``tools`` (it was offered to the model as a callable)."""
    work = _Rebuilder(steps, tools, max_rebuilt, set_aside or {})
    out: list[Step] = []
    interpreters = []  # (position in out, the tool step): read once every reply's is
    for position, step in enumerate(steps):
        out.append(step)
        if step.kind == "tool" and not (step.code_block or step.in_code):
            interpreters.append((len(out), step))
        if step.kind != "llm" or step.rebuilt or step.tool_calls:
            continue  # a reply with tool calls acts through them: its code is an example
        text = _reply(step)
        if text is None:
            continue
        work.python, work.inside = None, []
        actions = work.calls(text)
        code = (work.code_step(step, position, work.python, bool(actions))
                if work.python is not None else None)
        if code is not None:
            out.append(code)
        for name, arguments, source in actions:
            work.count("calls")
            rebuilt = work.step_for(step, position, name, arguments, source,
                                    in_code=code is not None)
            if rebuilt is not None:
                out.append(rebuilt)
        if code is not None and code.status == "error" and any(
                s.status == "error" for s in work.inside):
            code.status, code.error = "ok", None  # one failure: the call's, not twice
    for at, tool in reversed(interpreters):  # from the end: earlier positions stay
        out[at:at] = work.interpreted(tool)
    if len(out) != len(steps):
        for i, step in enumerate(out):
            step.index = i
    return out, work.stats
