"""Stage: trajectory (part). The arguments and results inside the envelopes frameworks
record around them.

What a span carries as a tool's input is often not the arguments but a wrapper around them.
``unwrap`` takes the arguments out of every known one, in one place, layer by layer (at most
``MAX_LAYERS``), and says which it was:

- ``json``: a JSON text, also one encoded twice (a JSON string holding JSON);
- ``python_repr``: a Python dict literal (``{'city': 'Paris'}``, as LangChain prints inputs),
  read by ``ast.literal_eval`` (``base.pysource.literal``: literals only, never ``eval``),
  at most ``MAX_LITERAL_CHARS``;
- ``langchain_callback``: LangChain / LangGraph callback inputs
  ``{"input_str": ..., "inputs": ..., "tags", "metadata", "kwargs", ...}`` (``inputs`` when it
  is a dict, else ``input_str``);
- ``call``: a function call as the OpenLLMetry SDK and smolagents record it,
  ``{"args": [...], "kwargs": {...}}`` (``sanitize_inputs_outputs`` beside them): positional
  arguments named from the tool's schema, in its order, when it declares enough of them;
- ``kwargs``: LlamaIndex's ``{"kwargs": {...}}``;
- ``run``: BeeAI's ``Tool.run(input, options)`` as OpenInference records it, ``{"input":
  {...}, "options": null | {...}}``;
- ``tool_call``: a call object around the arguments, as MCP instrumentations record the
  request (``{"tool_name" | "name": <the tool>, "arguments" | "args" | "input": {...}}``, the
  JSON-RPC ``{"method": "tools/call", "params": {...}}``).

A dict whose keys the tool's schema declares is the arguments, never an envelope (a tool may
have a parameter named ``kwargs``). ``fits`` tells whether arguments fit an offered schema
(required present, no undeclared key): the trajectory treats arguments that do not fit and
look like an envelope as *unknown* (``unparsed``), never as the call's arguments.

A tool's *result* may be a framework's object around the text the tool returned, recorded as
JSON. ``unwrap_result`` takes the text out of each known one (below), and says
whether the envelope records a failed call (``take_off_results``: the step is then a failed
call, its flag the source):

- ``langchain_message``: LangChain's ``messages_to_dict`` of a ``ToolMessage``, ``{"type":
  "tool", "data": {"content": ..., "status": "success" | "error", ...}}`` (OpenInference's
  LangChain instrumentation);
- ``langchain_serialized``: a serialized ``ToolMessage``, ``{"lc": 1, "type": "constructor",
  "id": [..., "ToolMessage"], "kwargs": {"content": ..., "status": ...}}``, also under the
  run's ``{"output": ...}`` (LangChain.js);
- ``llamaindex_tool_output``: LlamaIndex's ``ToolOutput``, ``{"content": ...}`` or ``{"blocks":
  [{"text": ...}]}`` beside ``tool_name``, ``raw_input``, ``raw_output`` and ``is_error``;
- ``mcp_result``: OpenLLMetry's MCP tool span, ``{"result": <the first content's text>}``
  and ``"is_error": true`` when the server answered ``isError``;
- ``mcp_call_tool_result``: the MCP ``tools/call`` result itself, a ``CallToolResult``
  (``{"content": [{"type": "text", "text": ...}], "isError": true | false}``, maybe with
  ``structuredContent`` and ``_meta``), as a GenAI ``gen_ai.tool.call.result`` or a
  framework's output records it: ``isError`` true is a failed call (the MCP conventions'
  ``error.type`` ``tool_error``), false or absent is not; an ``isError`` that is no boolean
  is no envelope we know.

Content as text blocks is their texts joined by newlines; any other content (an image, a
structure) leaves the envelope as recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from otel_eval.base.pysource import literal
from otel_eval.base.steps import Step
from otel_eval.base.text import load_content
from otel_eval.evaluate.conventions.values import parse_json

__all__ = ["MAX_LAYERS", "MAX_LITERAL_CHARS", "fits", "python_literal", "take_off_result",
           "take_off_results", "unknown_keys", "unwrap", "unwrap_result"]

MAX_LAYERS = 4
# A Python literal longer than this is left as text (literal_eval is linear, but bounded).
MAX_LITERAL_CHARS = 20_000
_CALLBACK_KEYS = frozenset({"input_str", "inputs", "tags", "metadata", "kwargs", "run_id",
                            "parent_run_id", "name", "serialized", "color", "callbacks",
                            "tool_call_id"})
_CALL_KEYS = frozenset({"args", "kwargs", "sanitize_inputs_outputs"})
_RUN_KEYS = frozenset({"input", "options"})
_NAME_KEYS = ("tool_name", "name", "tool")
_ARGUMENT_KEYS = ("arguments", "args", "input", "params")


def python_literal(text: str) -> Any:
    """A Python dict literal, or None."""
    if len(text) > MAX_LITERAL_CHARS or not text.startswith("{"):
        return None
    try:
        value = literal(text)
        repr(value)  # an int past Python's str-conversion limit (a long 0x literal): text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _properties(schema: Any) -> Mapping[str, Any] | None:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return props if isinstance(props, Mapping) else None


def _text(value: str) -> tuple[Any, str | None]:
    text = value.strip()
    if text[:1] in ("{", "[", '"'):
        parsed = parse_json(text) if text[:1] != '"' else _json_string(text)
        if parsed is not text:
            return parsed, "json"
    literal = python_literal(text)
    if literal is not None:
        return literal, "python_repr"
    return value, None


def _json_string(text: str) -> Any:
    """A JSON string holding JSON (encoded twice) -> the inner JSON text; else ``text``."""
    try:
        decoded = load_content(text)
    except ValueError:
        return text
    return decoded if isinstance(decoded, str) and decoded.strip()[:1] in ("{", "[") else text


def _call(value: dict[str, Any], schema: Any) -> Any:
    kwargs = value["kwargs"] if isinstance(value["kwargs"], dict) else {}
    positional = value["args"] if isinstance(value["args"], list) else []
    if not positional:
        return kwargs
    props = _properties(schema)
    names = list(props) if props is not None else []
    if len(names) >= len(positional):
        return {**dict(zip(names, positional, strict=False)), **kwargs}
    return {"args": positional, **kwargs}


def _layer(value: dict[str, Any], schema: Any, tool: str | None) -> tuple[Any, str | None]:
    keys = value.keys()
    props = _properties(schema)
    if props is not None and props and keys <= props.keys():
        return value, None  # the arguments themselves
    if keys == {"kwargs"} and isinstance(value["kwargs"], dict):
        return value["kwargs"], "kwargs"
    if keys == _RUN_KEYS and isinstance(value["input"], dict) \
            and isinstance(value["options"], dict | None):
        return value["input"], "run"
    if "args" in keys and "kwargs" in keys and keys <= _CALL_KEYS:
        return _call(value, schema), "call"
    if ("input_str" in keys or "inputs" in keys) and keys <= _CALLBACK_KEYS:
        inner = value.get("inputs")
        if isinstance(inner, dict) and inner:
            return inner, "langchain_callback"
        if isinstance(value.get("input_str"), str):
            return value["input_str"], "langchain_callback"
    if value.get("method") == "tools/call" and isinstance(value.get("params"), dict):
        return value["params"], "tool_call"
    names = [k for k in _NAME_KEYS if isinstance(value.get(k), str)]
    inner_keys = [k for k in _ARGUMENT_KEYS if k in keys]
    if len(names) == 1 and len(inner_keys) == 1 and len(keys) <= 3:
        inner = value[inner_keys[0]]
        if (tool is None or value[names[0]] == tool) and isinstance(inner, dict | str):
            return inner, "tool_call"
    return value, None


def unwrap(value: Any, schema: Any = None, tool: str | None = None) -> tuple[Any, list[str]]:
    """(the arguments inside ``value``, the envelopes taken off, outermost first)."""
    found: list[str] = []
    for _ in range(MAX_LAYERS):
        if isinstance(value, str):  # a bare text argument stays text (LangChain's "Paris")
            inner, name = _text(value)
            if name is None:
                break
        elif isinstance(value, dict):
            inner, name = _layer(value, schema, tool)
            if name is None:
                break
        else:
            break
        value = inner
        found.append(name)
    return value, found


def unknown_keys(arguments: Any, schema: Any) -> list[str]:
    """Keys of ``arguments`` the schema does not declare (none when it declares none)."""
    props = _properties(schema)
    if not props or not isinstance(arguments, dict):
        return []
    return [k for k in arguments if k not in props]


def fits(arguments: Any, schema: Any) -> bool | None:
    """Whether ``arguments`` fit the schema's declared parameters (an object, its required
    keys present, no key it does not declare); None when the schema declares none."""
    props = _properties(schema)
    if not props:
        return None
    if not isinstance(arguments, dict):
        return False
    required = schema.get("required") if isinstance(schema, Mapping) else None
    if isinstance(required, list) and any(k not in arguments for k in required
                                          if isinstance(k, str)):
        return False
    return not unknown_keys(arguments, schema)


# A result is parsed only when one of these is in it: every result envelope holds one (a key,
# or the serialized class's name), so the JSON tool results of other tools cost a search.
_RESULT_MARKER = re.compile(
    r'"tool_call_id"|ToolMessage|"raw_output"|"result"|"isError"|"content"')
_LLAMAINDEX_KEYS = frozenset({"tool_name", "raw_input", "raw_output", "is_error"})
_CALL_TOOL_RESULT_KEYS = frozenset({"content", "isError", "structuredContent", "_meta"})


def _content_text(content: Any) -> str | None:
    """A message's content as text: a string, or text blocks' texts joined; else None."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        return None
    texts = []
    for block in content:
        text = block.get("text") if isinstance(block, dict) else None
        if not isinstance(text, str):
            return None
        texts.append(text)
    return "\n".join(texts)


def _call_tool_result(value: dict[str, Any]) -> tuple[str | None, bool]:
    """(the text of an MCP ``CallToolResult``'s text content, its ``isError``); None when
    ``value`` is no such result or its content is not text alone."""
    content, flag = value.get("content"), value.get("isError", False)
    if not (value.keys() <= _CALL_TOOL_RESULT_KEYS and isinstance(content, list)
            and isinstance(flag, bool)):
        return None, False
    if not all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        return None, False
    return _content_text(content), flag


def _tool_message(value: dict[str, Any]) -> tuple[Any, str | None]:
    """The fields of a LangChain ToolMessage ``value`` is, dict or serialized, and which."""
    data = value.get("data")
    if value.get("type") == "tool" and isinstance(data, dict) and data.get("type") == "tool":
        return data, "langchain_message"
    ident, kwargs = value.get("id"), value.get("kwargs")
    if (value.get("lc") == 1 and value.get("type") == "constructor" and isinstance(ident, list)
            and ident and ident[-1] == "ToolMessage" and isinstance(kwargs, dict)):
        return kwargs, "langchain_serialized"
    return None, None


def _result_layer(value: Any) -> tuple[str | None, str | None, bool]:
    if not isinstance(value, dict):
        return None, None, False
    keys = value.keys()
    if keys == {"output"} and isinstance(value["output"], dict):
        value = value["output"]  # LangChain.js: the tool run's outputs
        keys = value.keys()
    fields, name = _tool_message(value)
    if name is not None:
        return _content_text(fields.get("content")), name, fields.get("status") == "error"
    if keys >= _LLAMAINDEX_KEYS and ("content" in keys or "blocks" in keys):
        text = _content_text(value.get("content", value.get("blocks")))
        return text, "llamaindex_tool_output", value["is_error"] is True
    if "result" in keys and keys <= {"result", "is_error"} and isinstance(value["result"], str):
        return value["result"], "mcp_result", value.get("is_error") is True
    if "content" in keys:
        text, failed = _call_tool_result(value)
        return text, "mcp_call_tool_result", failed
    return None, None, False


def unwrap_result(text: str) -> tuple[str, str | None, bool]:
    """(the text a tool returned inside ``text``, the envelope taken off or None, whether the
    envelope records the call as failed); ``text`` itself when no known envelope holds it."""
    if text[:1] != "{" or _RESULT_MARKER.search(text) is None:
        return text, None, False
    inner, name, failed = _result_layer(parse_json(text))
    return (text, None, False) if inner is None or name is None else (inner, name, failed)


def take_off_results(steps: list[Step]) -> None:
    """Every tool step's result out of its envelope; a step whose envelope records a failure
    is a failed call (its result stays, as a failed span's does)."""
    for step in steps:
        take_off_result(step)


def take_off_result(step: Step) -> None:
    """A tool step's result out of its envelope, wherever the result was read (its span, or
    the tool message a later LLM call was told); a recorded failure makes the call failed."""
    if step.kind != "tool" or not step.result or step.result[:1] != "{":
        return
    text, name, failed = unwrap_result(step.result)
    if name is None:
        return
    step.result = text
    source = step.sources.get("result", "")
    step.sources["result"] = f"{source} (inside {name})".strip()
    if failed and step.status != "error":
        step.status, step.error = "error", text
        step.sources["status"] = f"{name} error flag"
