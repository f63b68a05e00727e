"""Stage: trajectory (part). What a later LLM step was told a tool call returned.

A tool call that exists only in an LLM's output messages is rebuilt as a tool step; its result
is the tool message with the same call id in the input of a later LLM step of the same agent
(OpenAI ``{"role": "tool", "tool_call_id": ...}``, a GenAI ``tool_call_response`` part, or a
result part of another API: Anthropic's ``tool_result`` (``tool_use_id``; ``is_error``), the
Responses API's ``function_call_output`` item (``call_id``), the AI SDK's ``tool-result``
(``toolCallId``; an ``error-text`` or ``error-json`` output), Bedrock Converse's
``toolResult`` (``toolUseId``; ``status: error``)).

Promise: linear in the bytes of the trace, whatever the number of calls and LLM steps.
Agents resend the whole conversation on every LLM call, so input *i* holds ~i messages and a
trace of n LLM steps carries O(n^2) message bytes: parsing one whole input per call made a
2,000-step trace take 28 s (bench/README "Rebuilt tool results"). Here:

- only the next ``LOOKAHEAD`` LLM steps of the agent are searched (the result is handed to
  the very next call of the agent in practice), each with one C-speed substring search, and
  an input searched more than ``_SCANS`` times is read once for its JSON strings instead;
- in the input that mentions the id, the first lookup decodes only the JSON object around the
  id (a bounded number of attempts); a second lookup into the same input parses it once in
  full and keeps a map ``id -> result``, so k calls answered by one input cost one parse;
- the answer is the input's *last* tool message for the id: some runs reuse call ids (a
  counter per reply, ``call_0``), and the input after a call holds the answers of every
  earlier call of that id before its own.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Any, cast

from otel_eval.base.steps import Step
from otel_eval.base.text import checked
from otel_eval.evaluate.conventions.messages import message_text, result_part_text, tool_response
from otel_eval.evaluate.conventions.values import as_str, parse_json

__all__ = ["LOOKAHEAD", "Answer", "ToolResponses", "answered_after"]

LOOKAHEAD = 16  # later LLM steps of the same agent searched for a call's result
_MAX_ID = 256  # longer "call ids" are not looked up (real ones are < 64 characters)
_OCCURRENCES = 8  # occurrences of an id tried by the local decode before parsing in full
_BRACES = 4  # enclosing-object starts tried per occurrence
_DECODER = json.JSONDecoder()
_MISS = object()
# Lookups into one input that scan it for the id; past them its JSON strings are read once
# and each later lookup is a set lookup (linear in the input, whatever the lookups).
_SCANS = 4
# A JSON string as written, quotes included (no backtracking: the two branches are disjoint)
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


Answer = tuple[str | None, bool]  # what the call returned, and whether it failed


def _tool_message(msg: dict[str, Any]) -> Answer:
    """A tool message's content (or, with none, its text parts: LiteLLM's GenAI messages keep
    OpenAI's ``tool_call_id`` beside ``parts``) and its ``error`` flag (``True`` only where
    the instrumentation recorded one: Haystack's, read by ``conventions.haystack``)."""
    content = msg.get("content")
    text = as_str(content) if content is not None else message_text(msg)
    return text, msg.get("error") is True


def _part_id(part: dict[str, Any]) -> Any:
    """The call id a result part (or item) answers, in its API's key; None for no result."""
    kind = part.get("type")
    if kind == "tool_call_response":
        return part.get("id")
    if kind == "tool_result":
        return part.get("tool_use_id")
    if kind == "function_call_output":
        return part.get("call_id")
    if kind == "tool-result":
        return part.get("toolCallId")
    inner = part.get("toolResult")
    return inner.get("toolUseId") if isinstance(inner, dict) else None


# The AI SDK's tool-result ``output`` types of a failed call (``createToolModelOutput``'s
# error modes: the tool threw, or its input was invalid).
_AI_SDK_ERRORS = ("error-text", "error-json")


def _part_answer(part: dict[str, Any]) -> Answer:
    """A result part's text and whether its API flagged it failed (Anthropic's ``is_error``,
    Bedrock's ``status: error``, the AI SDK's ``output`` of type ``error-text`` or
    ``error-json``, and its earlier ``isError``)."""
    if part.get("type") == "tool_call_response":
        return tool_response(part), False
    inner = part.get("toolResult")
    output = part.get("output")
    failed = part.get("is_error") is True or part.get("isError") is True or (
        isinstance(inner, dict) and inner.get("status") == "error") or (
        isinstance(output, dict) and output.get("type") in _AI_SDK_ERRORS)
    return result_part_text(part), failed


def _parts(obj: dict[str, Any]) -> list[Any]:
    """The item itself and the parts of a message (``parts``, or a ``content`` list)."""
    parts = obj.get("parts", obj.get("content"))
    return [obj, *parts] if isinstance(parts, list) else [obj]


def _response_of(obj: Any, call_id: str) -> Any:  # Answer | _MISS
    """The answer ``obj`` carries for ``call_id`` (a tool message, a result part, or a
    message holding one), else ``_MISS``."""
    if not isinstance(obj, dict):
        return _MISS
    if obj.get("tool_call_id") == call_id:
        return _tool_message(obj)
    for part in _parts(obj):
        if isinstance(part, dict) and _part_id(part) == call_id:
            return _part_answer(part)
    return _MISS


def _all_responses(text: str) -> dict[str, Answer]:
    """Every call id answered in an input (the last answer wins: ids may be reused), from one
    full parse."""
    messages = parse_json(text)
    if isinstance(messages, dict):
        messages = messages.get("messages")
    out: dict[str, Answer] = {}
    for msg in messages if isinstance(messages, list) else ():
        if not isinstance(msg, dict):
            continue
        tid = msg.get("tool_call_id")
        if isinstance(tid, str):
            out[tid] = _tool_message(msg)
        for part in _parts(msg):
            if isinstance(part, dict) and isinstance(pid := _part_id(part), str):
                out[pid] = _part_answer(part)
    return out


def _local(text: str, quoted: str, call_id: str, at: int) -> Any:  # Answer | _MISS
    """Decode only the objects enclosing the last occurrences of ``quoted`` (the id as a
    JSON string), from the one at ``at`` back: the result when one of them answers the call,
    ``_MISS`` when undecided (then the input is parsed in full)."""
    for _ in range(_OCCURRENCES):
        if at < 0:
            return _MISS
        brace = at
        for _ in range(_BRACES):
            brace = text.rfind("{", 0, brace)
            if brace < 0:
                break
            try:
                obj, end = _DECODER.raw_decode(text, brace)
                obj = checked(obj, text[brace:end])  # this object's text, not the input's
            except (ValueError, RecursionError):
                continue  # a "{" inside a string
            if end <= at:
                continue  # a closed object before the id: its container starts further back
            found = _response_of(obj, call_id)
            if found is not _MISS:
                return found
            break  # the object holding this occurrence is no answer (e.g. the call itself)
        at = text.rfind(quoted, 0, at)
    return _MISS


def answered_after(text: str, call_id: str) -> list[tuple[str, Answer]]:
    """The calls an input answers after its answer to ``call_id`` (in its order; none when it
    does not answer ``call_id``), from one full parse."""
    ids = list(_all_responses(text).items())
    at = next((i for i, (cid, _) in enumerate(ids) if cid == call_id), len(ids))
    return ids[at + 1:]


class ToolResponses:
    """Results of rebuilt calls, looked up in the later LLM inputs of ``steps`` (in order)."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self._steps = steps
        self._positions: dict[str | None, list[int]] = {}  # node -> its LLM steps with input
        for position, step in enumerate(steps):
            if step.kind == "llm" and step.input_text:
                self._positions.setdefault(step.node, []).append(position)
        self._looked: set[int] = set()  # inputs that had one local lookup
        self._parsed: dict[int, dict[str, Answer]] = {}  # inputs parsed in full
        self._scans: dict[int, int] = {}  # input -> substring scans for an id into it
        self._strings: dict[int, frozenset[str]] = {}  # input -> its JSON strings, as written

    def result(self, position: int, node: str | None, call_id: str | None) -> str | None:
        """What the first of the next ``LOOKAHEAD`` LLM steps of ``node`` after ``position``
        that mentions ``call_id`` was told the call returned, its last answer of that id
        (None: not found)."""
        return self.answer(position, node, call_id)[0]

    def answer(self, position: int, node: str | None, call_id: str | None) -> Answer:
        """``result``, and whether that tool message said the call failed."""
        if not isinstance(call_id, str) or not call_id or len(call_id) > _MAX_ID:
            return None, False  # ids come from span content: a list or a number is no id
        # the id as a JSON string, as the usual encoders write it (escaped, non-ASCII kept or
        # \u-escaped): one C-speed scan finds a mention, another the last one to decode at
        needles = dict.fromkeys((json.dumps(call_id, ensure_ascii=False), json.dumps(call_id)))
        positions = self._positions.get(node, [])
        first = bisect_right(positions, position)
        for later in positions[first:first + LOOKAHEAD]:
            text = self._steps[later].input_text or ""
            quoted = self._mention(later, text, needles)
            if quoted is not None:
                return self._answer(later, text, call_id, quoted)
        return None, False

    def _mention(self, position: int, text: str, needles: Iterable[str]) -> str | None:
        """The form of the id ``text`` mentions, or None: a substring scan for the first
        ``_SCANS`` lookups into an input, then its JSON strings, read once (each lookup
        scanning the input again was quadratic: thousands of result-less tool steps before
        one long input)."""
        strings = self._strings.get(position)
        if strings is None:
            scans = self._scans[position] = self._scans.get(position, 0) + 1
            if scans <= _SCANS:
                return next((q for q in needles if q in text), None)
            strings = self._strings[position] = frozenset(_JSON_STRING.findall(text))
        return next((q for q in needles if q in strings), None)

    def _answer(self, position: int, text: str, call_id: str, quoted: str) -> Answer:
        parsed = self._parsed.get(position)
        if parsed is None and position not in self._looked:
            self._looked.add(position)
            found = _local(text, quoted, call_id, text.rfind(quoted))
            if found is not _MISS:
                return cast(Answer, found)
        if parsed is None:
            parsed = self._parsed[position] = _all_responses(text)
        return parsed.get(call_id, (None, False))
