"""Attribute value coercion shared by the convention adapters.

Instrumentations disagree on types (OpenInference exports token counts as strings, some SDKs
put JSON in strings, others send OTLP arrays/maps), so every reader goes through these and
never raises: a value that cannot be coerced reads as ``None``.
"""

from __future__ import annotations

import json
from typing import Any

from otel_eval.base.text import checked

_DECODER = json.JSONDecoder()
# The one encoder of values written as attribute text, as instrumentations write them
# (json.dumps(value, ensure_ascii=False), what JSON cannot hold as str): as_str, the GenAI
# event overlay and the loaders' synthetic spans use it. (Comparing arguments needs canonical
# JSON instead: sorted keys, no spaces, ``detectors.canonical.canonical_arguments``.) One instance:
# json.dumps with non-default options builds an encoder per call.
dumps = json.JSONEncoder(ensure_ascii=False, default=str).encode


# The most tool calls read from one LLM output (a reply asks for a few, a parallel batch for
# tens): past it a reader stops making calls (it keeps one more, to show there were more),
# and ``conventions.read_span`` keeps the first ones and marks the step's calls known only
# in part (``Step.unknown["tool_calls"]``): a 17 MB output of 200,000 calls cost every pass
# after it ~6.5 s and ~380 MB before the trace's rebuild cap (``max_rebuilt_calls``).
MAX_OUTPUT_CALLS = 1_000


def calls_full(calls: list[Any]) -> bool:
    """For the readers: ``calls`` holds more than ``MAX_OUTPUT_CALLS``; read no more."""
    return len(calls) > MAX_OUTPUT_CALLS


# The largest count a reader keeps: 2**53, the last integer a float holds exactly. The metrics,
# the features and the cost sums turn counts into floats (a 400-digit int raises OverflowError
# there, and anything past 2**53 is already rounded); no token count, exit code or size an
# instrumentation writes comes near it, so a value beyond it is not understood (None).
MAX_INT = 2**53


def as_int(value: Any, low: int = -MAX_INT) -> int | None:
    """An integer in [``low``, MAX_INT], from an int, an integral-or-not float (truncated) or
    their text; anything else (bool, NaN, infinities, a number out of range) is None. A count
    (tokens) passes ``low`` 0: a negative one is not understood, never subtracted from a
    run's total (which could hide a budget overrun)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        n = value
    elif isinstance(value, float):
        # NaN fails the comparison; inf is out of range: neither reaches int()
        if not abs(value) <= MAX_INT:
            return None
        n = int(value)
    elif isinstance(value, str) and value:
        try:
            n = int(value)  # ValueError past 4,300 digits too (sys.int_info)
        except ValueError:
            f = as_float(value)
            return as_int(f, low) if f is not None else None
    else:
        return None
    return n if low <= n <= MAX_INT else None


def as_float(value: Any) -> float | None:
    """A finite float from an int, a float or their text; anything else (bool, NaN,
    infinities, an int too large for a float) is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            f = float(value)
        except OverflowError:  # an int of 309+ digits (a file's JSON number, not OTLP's int64)
            return None
        return f if f == f and abs(f) != float("inf") else None
    if isinstance(value, str) and value:
        try:
            f = float(value)
        except ValueError:
            return None
        return f if f == f and abs(f) != float("inf") else None
    return None


def as_str(value: Any) -> str | None:
    """Text as carried; structured values (OTLP arrays/maps) are serialized to JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return dumps(value)
    except (TypeError, ValueError):
        return str(value)


def parse_json(value: Any) -> Any:
    """A JSON string parsed; anything else (including invalid JSON) returned unchanged.

    Only strings that look like a JSON object or array are parsed: tool arguments such as
    ``"42"`` stay strings instead of becoming numbers. The parsed value is ``checked``: its
    strings valid UTF-8, nested at most ``MAX_CONTENT_DEPTH`` levels (deeper stays text)."""
    if not isinstance(value, str):
        return value
    if value[-1:] in "}]" and value[:1] in "{[" and value:
        # the usual case, unpadded: no copy to strip it, no whitespace to skip around it
        # (what ``decode`` adds to ``raw_decode``); anything after the value is invalid
        try:
            parsed, end = _DECODER.raw_decode(value)
            return checked(parsed, value) if end == len(value) else value
        except (ValueError, RecursionError):
            return value
    text = value.strip()
    if not text or text[0] not in "{[":
        return value
    try:
        return checked(_DECODER.decode(text), text)
    except (ValueError, RecursionError):
        return value


def cut_json(value: Any) -> bool:
    """Text that opens as a JSON object or array and never closes it (the readers keep text
    that did not parse as it came: ``parse_json``): a value known only in part, cut at an
    attribute length limit (``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``). Two such texts may be
    alike though the values differ past the cut: never compare them as the values. (A whole
    object kept as text, one nested too deep to read, closes: it is what it says.)"""
    return isinstance(value, str) and value.lstrip()[:1] in ("{", "[") \
        and value.rstrip()[-1:] not in ("}", "]")


def as_name(value: Any) -> str | None:
    """A name (a tool's, a requested call's): non-empty text as carried. Every convention
    records names as strings; any other value (a number, an array, a map) is not understood,
    None, never its JSON text (a tool named ``7`` or ``{"v": ...}`` is no tool offered)."""
    return value if isinstance(value, str) and value else None


def decode_json_string(value: Any) -> str | None:
    """A JSON-encoded string (``"sunny"``, as SDKs serialize a function's str result) decoded
    to its text; anything else as ``as_str`` gives it. (Decoding only: the encoder of stored
    JSON is ``jsontext.json_text``, of attribute text ``dumps``.)"""
    if isinstance(value, str) and value.startswith('"'):
        try:
            decoded = _DECODER.decode(value)
        except (ValueError, RecursionError):
            return value
        return checked(decoded, value) if isinstance(decoded, str) else value
    return as_str(value)


def as_list_of_str(value: Any) -> list[str]:
    """``["stop"]``, ``"stop"`` or a JSON-encoded list -> list of strings."""
    value = parse_json(value)
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list | tuple):
        return [str(v) for v in value if v is not None]
    return []


def first(attrs: Any, *keys: str) -> Any:
    """The first present, non-empty value among ``keys``."""
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return value
    return None


def tool_definition(obj: Any) -> tuple[str, Any] | None:
    """One offered tool -> (name, parameters JSON schema). Accepts the OpenAI shape
    ``{"type": "function", "function": {"name", "parameters"}}``, the flat GenAI/Anthropic
    shapes ``{"name", "parameters" | "input_schema"}``, and JSON strings of those."""
    obj = parse_json(obj)
    if not isinstance(obj, dict):
        return None
    fn = obj.get("function")
    if isinstance(fn, dict):
        obj = fn
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    schema = obj.get("parameters", obj.get("input_schema", {}))
    schema = parse_json(schema)
    return name, schema if schema is not None else {}


class UnreadOffer(dict[str, Any]):
    """What an offer's reader returns when the span records an offer it cannot read whole
    (``UNREAD_OFFER``, empty): no tool is known offered, and the agent's offer is unknown
    (``trajectory.spans``: its other spans' offers are no longer the whole of it)."""


UNREAD_OFFER = UnreadOffer()


def tool_definitions(items: Any) -> dict[str, Any]:
    """Offered tools -> {name: parameters JSON schema}: each item of ``items`` (a list, or
    its JSON text) read by ``tool_definition``; anything else offers none, and so does a
    list with an item that cannot be read (a JSON text cut at an attribute length limit):
    the offer is unknown, not the tools that were read (a call of the unread one would read
    as a tool that was not offered)."""
    items = parse_json(items)
    out: dict[str, Any] = {}
    for item in items if isinstance(items, list) else ():
        found = tool_definition(item)
        if not found:
            return UNREAD_OFFER
        out[found[0]] = found[1]
    return out
