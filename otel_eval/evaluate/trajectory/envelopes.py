"""Stage: trajectory (part). The arguments inside the envelopes frameworks record around them.

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
- ``tool_call``: a call object around the arguments, as MCP instrumentations record the
  request (``{"tool_name" | "name": <the tool>, "arguments" | "args" | "input": {...}}``, the
  JSON-RPC ``{"method": "tools/call", "params": {...}}``).

A dict whose keys the tool's schema declares is the arguments, never an envelope (a tool may
have a parameter named ``kwargs``). ``fits`` tells whether arguments fit an offered schema
(required present, no undeclared key): the trajectory treats arguments that do not fit and
look like an envelope as *unknown* (``unparsed``), never as the call's arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_eval.base.pysource import literal
from otel_eval.base.text import load_content
from otel_eval.evaluate.conventions.values import parse_json

__all__ = ["MAX_LAYERS", "MAX_LITERAL_CHARS", "fits", "python_literal", "unknown_keys",
           "unwrap"]

MAX_LAYERS = 4
# A Python literal longer than this is left as text (literal_eval is linear, but bounded).
MAX_LITERAL_CHARS = 20_000
_CALLBACK_KEYS = frozenset({"input_str", "inputs", "tags", "metadata", "kwargs", "run_id",
                            "parent_run_id", "name", "serialized", "color", "callbacks",
                            "tool_call_id"})
_CALL_KEYS = frozenset({"args", "kwargs", "sanitize_inputs_outputs"})
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
    if props is not None and props and all(k in props for k in keys):
        return value, None  # the arguments themselves
    if keys == {"kwargs"} and isinstance(value["kwargs"], dict):
        return value["kwargs"], "kwargs"
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
