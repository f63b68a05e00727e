"""Stage: trajectory (part). Code read out of text: the blocks of an LLM reply and the tool
calls in a Python block (``trajectory.code_actions`` makes them steps).

- ``code_blocks`` finds the blocks in an LLM reply (a ``str.find`` scan: linear, no regex
  backtracking);
- ``python_calls`` reads a Python block with ``ast``: every call of a *known* tool (a name the
  trace offers as a tool or a managed agent), in source order, with its arguments: literals
  evaluated (``ast.literal_eval`` of literal nodes only; a name bound to a literal by an earlier
  top-level assignment counts), anything else kept as its source text; positional arguments
  are named from the tool's schema when it has one;
- ``called_names``: every name a Python block calls (``detectors.circling``).

Hostile input: code longer than ``MAX_CODE_CHARS`` is not parsed; parse depth errors
(``RecursionError``, ``MemoryError``), syntax errors and more than ``MAX_CALLS`` calls are
reasons returned to the caller, never raised. Every parse goes through ``base.pysource``
(one thread at a time: a CPython 3.11 race).
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from otel_eval.base.pysource import parse
from otel_eval.evaluate.trajectory.shell import MAX_COMMAND_CHARS

__all__ = ["MAX_CALLS", "MAX_CODE_CHARS", "CodeCall", "called_names", "code_blocks",
           "python_calls"]

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
        tree = parse(code)
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
        tree = parse(code)
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
