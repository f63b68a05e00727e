"""Stage: trajectory (part). Actions written as code become steps.

Agents that act through code never send their tool calls as tool-call messages: smolagents'
CodeAgent writes a Python block that calls its tools (``Code:\\n```py ... ```<end_code>`` or
``<code>...</code>``), mini-swe-agent writes one ```` ```bash ```` block per turn. Here:

- ``code_blocks`` finds the blocks in an LLM reply (a ``str.find`` scan: linear, no regex
  backtracking);
- ``python_calls`` reads a Python block with ``ast``: every call of a *known* tool (a name the
  trace offers as a tool or a managed agent), in source order, with its arguments: literals
  evaluated (``ast.literal_eval`` of literal nodes only; a name bound to a literal by an earlier
  top-level assignment counts), anything else kept as its source text; positional arguments
  are named from the tool's schema when it has one;
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

import ast
import json
import re
import textwrap
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import cached_property
from operator import itemgetter
from typing import Any

from otel_eval.base.model import Step
from otel_eval.base.text import checked
from otel_eval.evaluate.conventions.messages import answer_text, message_text
from otel_eval.evaluate.trajectory.interpreters import interpreter_code
from otel_eval.evaluate.trajectory.shell import MAX_COMMAND_CHARS, shell_commands

__all__ = ["CODE_TOOL", "MAX_CALLS", "MAX_CODE_CHARS", "CodeCall", "called_names",
           "code_blocks", "normalised_code", "python_calls", "rebuild_code_actions"]

MAX_CODE_CHARS = MAX_COMMAND_CHARS  # longer code is not parsed (real actions are < 10 kB)
MAX_CALLS = 64  # tool calls read from one block; more are counted and dropped
MAX_SOURCE_CHARS = 2_000  # source text kept for a non-literal argument
MAX_BLOCKS = 256  # code blocks read from one reply (the scan is linear: a bound on memory)
_PYTHON = ("py", "python", "python3", "")
_IDENTIFIER = re.compile(r"[^\W\d]\w*")  # a Python name (Unicode letters too)
_SHELL = ("bash", "sh", "shell", "console")


@dataclass(frozen=True, slots=True)
class CodeCall:
    """One call of a known tool inside a code block."""

    name: str
    arguments: dict[str, Any]
    source: str  # the call's source text (bounded)


# --- finding the blocks -----------------------------------------------------------------------


def _fence(text: str, at: int) -> int:
    """Position of the next ```` ``` ```` from ``at`` that starts a line (after indentation),
    -1 when none: a fence in prose (an RST ````code````) is no fence."""
    while (found := text.find("```", at)) >= 0:
        before = found - 1
        while before >= 0 and text[before] in " \t":  # each space is passed over once
            before -= 1
        if before < 0 or text[before] == "\n":
            return found
        at = found + 3
    return -1


def _fenced(text: str, out: list[tuple[str, str]]) -> None:
    at = 0
    while len(out) < MAX_BLOCKS:
        start = _fence(text, at)
        eol = text.find("\n", start) if start >= 0 else -1
        end = _fence(text, eol) if eol >= 0 else -1
        if end < 0:
            return  # unterminated: not an action (and no quadratic rescans)
        language = text[start + 3:eol].strip().lower()
        if language in _PYTHON:
            out.append(("python", text[eol + 1:end]))
        elif language in _SHELL:
            out.append(("shell", text[eol + 1:end]))
        at = end + 3


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of each code block of an LLM reply: ``python`` or ``shell``."""
    out: list[tuple[str, str]] = []
    if "```" in text:
        _fenced(text, out)
    at = 0
    while len(out) < MAX_BLOCKS and (start := text.find("<code>", at)) >= 0:
        end = text.find("</code>", start)
        if end < 0:
            break
        out.append(("python", text[start + 6:end]))
        at = end + 7
    return out


# --- Python -------------------------------------------------------------------------------


class _Source:
    """Source segments of nodes (``ast`` offsets are UTF-8 byte columns)."""

    def __init__(self, code: str) -> None:
        # encoded once per block: many arguments on one long line each slice only themselves
        self.lines = [line.encode() for line in code.splitlines(keepends=True)]

    def segment(self, node: ast.AST) -> str:
        first, last = getattr(node, "lineno", 0) - 1, (getattr(node, "end_lineno", 0) or 0) - 1
        if first < 0 or last < first or last >= len(self.lines):
            return ""
        if last - first > 200:
            last = first + 200  # long literals: enough to recognize, bounded
        raw = self.lines[first] if first == last else b"".join(self.lines[first:last + 1])
        tail = len(self.lines[last]) - (getattr(node, "end_col_offset", 0) or 0)
        text = raw[getattr(node, "col_offset", 0):len(raw) - max(0, tail)]
        return text.decode(errors="replace")[:MAX_SOURCE_CHARS]


_MISSING = object()


def _literal(node: ast.AST) -> Any:
    try:
        value = ast.literal_eval(node)
        repr(value)  # an int past Python's str-conversion limit (a long 0x literal) is no
        # value: kept as source text, or writing the arguments out fails in every detector
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING
    return value


def _bindings(tree: ast.Module) -> dict[str, list[tuple[int, Any]]]:
    """Top-level ``name = <literal>`` assignments: name -> [(line, value)] in order."""
    out: dict[str, list[tuple[int, Any]]] = {}
    for stmt in tree.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            value = _literal(stmt.value)
            out.setdefault(stmt.targets[0].id, []).append(
                (stmt.lineno, value))  # a non-literal rebinding hides earlier literals
    return out


def _value(node: ast.AST, source: _Source, bound: dict[str, list[tuple[int, Any]]]) -> Any:
    value = _literal(node)
    if value is not _MISSING:
        return value
    if isinstance(node, ast.Name) and node.id in bound:
        # the last binding before this line (bindings are in line order: thousands of
        # bindings and uses of one name stay n log n)
        before = bisect_left(bound[node.id], node.lineno, key=itemgetter(0))
        if before and bound[node.id][before - 1][1] is not _MISSING:
            return bound[node.id][before - 1][1]
    return source.segment(node)


def _arguments(call: ast.Call, params: Sequence[str], source: _Source,
               bound: dict[str, list[tuple[int, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    extra = []
    for i, arg in enumerate(call.args):
        value = (source.segment(arg) if isinstance(arg, ast.Starred)
                 else _value(arg, source, bound))
        if i < len(params) and not isinstance(arg, ast.Starred):
            out[params[i]] = value
        else:
            extra.append(value)
    if extra:
        out["args"] = extra
    for kw in call.keywords:
        out[kw.arg if kw.arg is not None else "**"] = _value(kw.value, source, bound)
    return out


def _position(node: ast.Call) -> tuple[int, int]:
    return node.lineno, node.col_offset


def python_calls(code: str, known: AbstractSet[str],
                 params: Mapping[str, Sequence[str]] | None = None,
                 ) -> tuple[list[CodeCall], str | None]:
    """Calls of ``known`` tools in a Python block, in source order, and the reason the block
    was not (fully) read: ``too_large``, ``syntax_error``, ``too_deep``, ``too_many_calls``."""
    if len(code) > MAX_CODE_CHARS:
        return [], "too_large"
    if known.isdisjoint(_IDENTIFIER.findall(code)):
        # names no tool: nothing to read, no parse (one scan of the code, whatever the
        # number of tools offered: a name that is no identifier cannot be called)
        return [], None
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: NUL bytes
        return [], "syntax_error"
    except (RecursionError, MemoryError):
        return [], "too_deep"
    found: list[ast.Call] = []
    problem = None
    for node in ast.walk(tree):  # iterative: no recursion on deep trees
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in known):
            if len(found) == MAX_CALLS:
                problem = "too_many_calls"
                break
            found.append(node)
    found.sort(key=_position)
    source, bound = _Source(code), _bindings(tree)
    schemas = params or {}
    out = []
    try:
        for node in found:
            name = node.func.id  # type: ignore[attr-defined]
            out.append(CodeCall(name, _arguments(node, schemas.get(name, ()), source, bound),
                                source.segment(node)))
    except (RecursionError, MemoryError):
        return out, "too_deep"
    return out, problem


def _dotted(func: ast.AST) -> str | None:
    """``os.path.join`` for a call of that attribute chain, ``read`` for ``f().read``."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute) and len(parts) < 16:
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    elif not parts:
        return None  # a call of a call's result, a subscript: no name
    return ".".join(reversed(parts))


def called_names(code: str) -> frozenset[str] | None:
    """The names a Python block calls (``print``, ``os.walk``, a tool), read from its call
    nodes: a ``name(`` inside a string or a comment is no call. None when the block is not
    read (too large, a syntax error, too deep): unknown. At most ``MAX_CALLS`` x 4 calls."""
    if len(code) > MAX_CODE_CHARS:
        return None
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names: set[str] = set()
    seen = 0
    for node in ast.walk(tree):  # iterative
        if isinstance(node, ast.Call):
            seen += 1
            if seen > 4 * MAX_CALLS:
                break
            name = _dotted(node.func)
            if name is not None:
                names.add(name)
    return frozenset(names)


# --- rebuilding ------------------------------------------------------------------------------

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
_TAIL_TRIES = 4  # message starts tried from the end of an input


def last_message_text(raw: str | None) -> str | None:
    """The text of the last message of an LLM input, decoding only that message (an agent
    resends the whole conversation on every call: parsing each input whole would cost the
    square of the run's length). None when the last message is not a user or tool message
    (then it holds no observation)."""
    if not raw or not raw.rstrip().endswith("]"):
        return None
    end = len(raw.rstrip()) - 1
    at = end
    for _ in range(_TAIL_TRIES):
        at = raw.rfind('{"role"', 0, at)
        if at < 0:
            return None
        try:
            msg, stop = _DECODER.raw_decode(raw, at)
            msg = checked(msg, raw[at:stop])  # this message's text, not the whole input
        except (ValueError, RecursionError):
            continue
        if raw[stop:end].strip():
            continue  # a message nested in the last one, or not the last
        if isinstance(msg, dict) and msg.get("role") in ("user", "tool", "tool-response"):
            return message_text(msg)
        return None
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

    def __init__(self, steps: Sequence[Step], tools: dict[str, Any], max_rebuilt: int) -> None:
        self.steps, self.tools, self.max_rebuilt = steps, tools, max_rebuilt
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
    work = _Rebuilder(steps, tools, max_rebuilt)
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
