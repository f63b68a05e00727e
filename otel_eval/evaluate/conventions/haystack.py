"""Haystack's chat messages as OpenInference records them: tool results read from the
``ChatMessage`` reprs of an LLM span's ``input.value``.

``openinference-instrumentation-haystack`` flattens a Haystack ``ChatMessage`` into
``llm.input_messages.N.message.*`` by its text only, so a tool message (its content a
``ToolCallResult``, no text) keeps just its role: no call id, no result. The message itself
is in the span's ``input.value``, ``{"messages": [...]}``, as the repr Haystack prints::

    ChatMessage(_role=<ChatRole.TOOL: 'tool'>, _content=[ToolCallResult(result="Failed to
    invoke Tool `get_weather` ...", origin=ToolCall(tool_name='get_weather', arguments={...},
    id='call_NEX4...', extra=None), error=True)], _name=None, _meta={})

``tool_results`` reads, per message position, the call id, the result text and Haystack's
own ``error`` flag of such a message. The calls an LLM asked for are flattened without their
ids (``llm.output_messages.0.message.tool_calls.M.tool_call.function.*``); ``call_ids`` reads
them, in order, from the reply's repr in ``output.value`` (``{"replies": [...]}``, each call
a ``ToolCall(tool_name='get_weather', arguments={...}, id='call_NEX4...', extra=None)``), so
the tool message that answered a call is found by its id; ``reply_finish_reasons`` reads each
reply's finish reason from its ``_meta`` (``{'model': ..., 'finish_reason': 'stop', ...}``, the
repr's last field, so its last ``, _meta={`` is the reply's own whatever the content before it
says). The tools offered are in ``input.value`` too, beside the messages (``{"messages": [...],
"tools": [...]}``), each the repr of a Haystack ``Tool``: ``Tool(name='get_weather',
description='...', parameters={...}, function=<...>, ...)``; ``offered_tools`` reads each
name, and its ``parameters`` (a JSON schema as a dict literal; unknown, ``{}``, when the
literal does not end at the first ``}, function=``). Nothing else of a repr is read; a
message that does not have this exact shape gives nothing (unknown). Bounded: at most
``MAX_MESSAGES`` messages, ``MAX_CALLS`` calls and ``MAX_TOOLS`` tools, a result literal of at
most ``MAX_RESULT_CHARS`` and a schema literal of at most ``MAX_SCHEMA_CHARS`` (decoded by
``base.pysource.literal``), anchored regular expressions without nested repetition, at
positions found by ``str.find`` / ``str.rfind``: linear in the input.
"""

from __future__ import annotations

import json
import re
from typing import Any

from otel_eval.base.pysource import literal
from otel_eval.evaluate.conventions.values import parse_json

__all__ = ["MAX_CALLS", "MAX_MESSAGES", "MAX_RESULT_CHARS", "MAX_SCHEMA_CHARS", "MAX_TOOLS",
           "call_ids", "offered_tools", "reply_finish_reasons", "tool_results"]

MAX_MESSAGES = 1_000  # messages of one input read
MAX_RESULT_CHARS = 20_000  # a longer result literal is not decoded (as envelopes' literals)
MAX_CALLS = 128  # calls of one reply read
MAX_TOOLS = 128  # tools of one request read
MAX_SCHEMA_CHARS = 20_000  # a longer parameters literal is not decoded (its schema unknown)
_TOOL = "ChatMessage(_role=<ChatRole.TOOL: 'tool'>, _content=[ToolCallResult(result="
_STRING = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_RESULT = re.compile(_STRING)
_ORIGIN = re.compile(rf", origin=ToolCall\(tool_name=(?:{_STRING}), arguments=")
_FLAG = re.compile(r"\), error=(True|False)\)\]")  # the origin's end, then the flag
_ID = re.compile(rf"({_STRING})(?:, extra=None)?")  # after the origin's last ", id="
_CALL = "ToolCall(tool_name="
_CALL_NAME = re.compile(rf"({_STRING}), arguments=")
_CALL_ID = re.compile(rf", id=({_STRING})(?:, extra=|\))")  # ToolCall has had no extra
_REPLY = "ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, "
_META = ", _meta={"
_META_FINISH = re.compile(r"'finish_reason': '([A-Za-z_]{1,40})'")
_OFFER = '"tools": ["'
_TOOL_HEAD = re.compile(  # Tool, and its subclasses' reprs that keep the dataclass's fields
    rf"[A-Za-z]{{0,40}}Tool\(name=({_STRING}), description=(?:{_STRING}|None), parameters=")
_PARAMETERS_END = "}, function="
_SCHEMAS: dict[str, str] = {}  # a parameters literal -> its schema as JSON
_SCHEMAS_KEPT = 64  # at most 64 x MAX_SCHEMA_CHARS of literals held; emptied when full
_DECODER = json.JSONDecoder()


def tool_results(raw: str | None) -> dict[int, dict[str, Any]]:
    """Position -> ``{"role": "tool", "tool_call_id", "content", "error"}`` of each tool
    message of a Haystack request's ``input.value``; empty when it holds none."""
    if not raw or _TOOL not in raw:
        return {}
    doc = parse_json(raw)
    messages = doc.get("messages") if isinstance(doc, dict) else None
    out: dict[int, dict[str, Any]] = {}
    for position, text in enumerate(messages[:MAX_MESSAGES] if isinstance(messages, list)
                                    else ()):
        if isinstance(text, str) and text.startswith(_TOOL):
            found = _tool_result(text)
            if found is not None:
                out[position] = found
    return out


def _tool_result(text: str) -> dict[str, Any] | None:
    result = _RESULT.match(text, len(_TOOL))
    if result is None or len(result.group()) > MAX_RESULT_CHARS:
        return None
    origin = _ORIGIN.match(text, result.end())
    if origin is None:
        return None
    # anchored matches at found positions only (each str.rfind once): linear in the text,
    # whatever the arguments between hold
    flag_at = text.rfind("), error=", origin.end())
    flag = _FLAG.match(text, flag_at) if flag_at >= 0 else None
    id_at = text.rfind(", id=", origin.end(), flag_at) if flag is not None else -1
    call = _ID.fullmatch(text, id_at + 5, flag_at) if id_at >= 0 else None
    if flag is None or call is None:
        return None
    try:
        content, call_id = literal(result.group()), literal(call.group(1))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not (isinstance(content, str) and isinstance(call_id, str) and call_id):
        return None
    return {"role": "tool", "tool_call_id": call_id, "content": content,
            "error": flag.group(1) == "True"}


def offered_tools(raw: str | None) -> dict[str, Any]:
    """{name: parameters JSON schema, {} when unknown} of each ``Tool`` repr in a Haystack
    request's ``input.value``; empty when it offers none (or none of this shape)."""
    if not raw or _OFFER not in raw:
        return {}
    doc = parse_json(raw)
    tools = doc.get("tools") if isinstance(doc, dict) else None
    out: dict[str, Any] = {}
    for text in tools[:MAX_TOOLS] if isinstance(tools, list) else ():
        head = _TOOL_HEAD.match(text) if isinstance(text, str) else None
        if head is None:
            continue
        name = _string(head.group(1))
        if name:
            out[name] = _parameters(text, head.end())
    return out


def _string(quoted: str) -> str | None:
    if "\\" not in quoted:
        return quoted[1:-1]  # a literal without escapes is its text
    try:
        value = literal(quoted)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, str) else None


def _parameters(text: str, at: int) -> dict[str, Any]:
    """The schema literal at ``at`` (``{}``: unknown). The same tools' reprs come in every
    request of a run and every run of an agent: a literal is decoded once (``_SCHEMAS``, its
    JSON, so each trajectory gets its own objects)."""
    end = text.find(_PARAMETERS_END, at)
    if end < 0 or end + 1 - at > MAX_SCHEMA_CHARS:
        return {}
    source = text[at:end + 1]
    known = _SCHEMAS.get(source)
    if known is None:
        try:
            schema = literal(source)
            known = json.dumps(schema) if isinstance(schema, dict) else "{}"
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            known = "{}"  # no literal, or values JSON has no form for
        if len(_SCHEMAS) >= _SCHEMAS_KEPT:
            _SCHEMAS.clear()
        _SCHEMAS[source] = known
    decoded: dict[str, Any] = _DECODER.decode(known)
    return decoded


def call_ids(raw: str | None) -> list[tuple[str, str]]:
    """(tool name, call id) of each ``ToolCall`` in a Haystack reply's ``output.value``, in
    order; empty when it holds none (or one is not of that exact shape)."""
    if not raw or '"replies"' not in raw or _CALL not in raw:
        return []
    doc = parse_json(raw)
    replies = doc.get("replies") if isinstance(doc, dict) else None
    out: list[tuple[str, str]] = []
    for text in replies if isinstance(replies, list) else ():
        if not isinstance(text, str):
            continue
        at = text.find(_CALL)
        while at >= 0 and len(out) < MAX_CALLS:
            nxt = text.find(_CALL, at + len(_CALL))
            end = nxt if nxt >= 0 else len(text)
            name = _CALL_NAME.match(text, at + len(_CALL), end)
            id_at = text.rfind(", id=", name.end(), end) if name is not None else -1
            call = _CALL_ID.match(text, id_at, end) if id_at >= 0 else None
            if name is None or call is None:
                return []  # not the shape read here: no ids rather than shifted ones
            try:
                tool, call_id = literal(name.group(1)), literal(call.group(1))
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return []
            if not (isinstance(tool, str) and isinstance(call_id, str)):
                return []
            out.append((tool, call_id))
            at = nxt
    return out


def reply_finish_reasons(replies: Any) -> list[str]:
    """The finish reason in each assistant reply's ``_meta`` of a Haystack ``{"replies": [...]}``
    (the generator's own, e.g. OpenAI's ``stop`` / ``length``); a reply without one gives
    none."""
    out: list[str] = []
    for text in replies[:MAX_MESSAGES] if isinstance(replies, list) else ():
        if isinstance(text, str) and text.startswith(_REPLY):
            at = text.rfind(_META)
            found = _META_FINISH.search(text, at) if at >= 0 else None
            if found is not None:
                out.append(found.group(1))
    return out
