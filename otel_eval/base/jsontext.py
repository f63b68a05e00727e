"""JSON text of results, as stored and exported (the bottom layer).

    json_text       a value as JSON text for storing: UTF-8 as it is, only finite floats
    ascii_json      that text with non-ASCII escaped, as ``json.dumps`` writes by default
    finite          a value with NaN / +-Infinity floats as the strings the protobuf JSON
                    mapping uses

Promises: the text is strict JSON (no bare ``NaN`` token) that UTF-8 can carry (a lone
surrogate is escaped); a value is walked only when strict encoding fails, iteratively (no
``RecursionError`` at any depth).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any


def json_text(value: Any) -> str:
    """``value`` as JSON text for storing: UTF-8 text as it is (``ensure_ascii=False``: an
    "é" is 2 bytes, not the 6 of ``\\u00e9``; control characters are ``\\u0001`` either
    way), non-finite floats replaced (``finite``, walked only when strict encoding fails).
    Text holding a lone surrogate (which UTF-8 cannot carry; JSON input can) is written
    with ``ensure_ascii`` instead."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except ValueError:
        value = finite(value)
        text = json.dumps(value, ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            return json.dumps(value)
    return text


# what ``ensure_ascii`` escapes and ``ensure_ascii=False`` keeps (DEL too)
_NOT_ASCII = re.compile("[^\x00-\x7e]")


def _escaped(match: re.Match[str]) -> str:
    c = ord(match.group())
    if c < 0x10000:
        return f"\\u{c:04x}"
    c -= 0x10000
    return f"\\u{0xd800 | (c >> 10):04x}\\u{0xdc00 | (c & 0x3ff):04x}"


def ascii_json(text: str) -> str:
    """``json_text``'s text as ``json.dumps`` writes it by default (``ensure_ascii``): each
    character past ``~`` as ``\\uXXXX`` (a surrogate pair above U+FFFF). Outside strings JSON
    text is ASCII, so escaping every such character is what the encoder does."""
    if text.isascii() and "\x7f" not in text:
        return text
    return _NOT_ASCII.sub(_escaped, text)


_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def finite(value: Any) -> Any:
    """``value`` with each NaN / +-Infinity float replaced by the string the protobuf JSON
    mapping uses ("NaN", "Infinity", "-Infinity"): Python writes bare ``NaN`` tokens that
    strict JSON parsers reject (tool arguments may carry them). ``value`` itself is returned
    when it holds none; else a copy (tuples as lists). Walked iteratively: a value nested
    deeper than the interpreter's stack (JSON 600 levels deep) is no ``RecursionError``."""
    kind = type(value)
    if kind is float:
        return "NaN" if value != value else _NON_FINITE.get(value, value)
    if kind not in _CONTAINERS or not _any_non_finite(value):
        return value
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]  # (container copied, key of a value in it)
    while stack:
        parent, key = stack.pop()
        v = parent[key]
        kind = type(v)
        if kind is float:
            parent[key] = "NaN" if v != v else _NON_FINITE.get(v, v)
        elif kind is dict:
            parent[key] = held = dict(v)
            stack.extend((held, k) for k, x in held.items() if type(x) in _CONTAINERS)
        elif kind is list or kind is tuple:
            parent[key] = items = list(v)
            stack.extend((items, i) for i, x in enumerate(items) if type(x) in _CONTAINERS)
    return root[0]


def _any_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        kind = type(v)
        if kind is float:
            if v != v or v in _NON_FINITE:
                return True
        elif kind is dict:
            stack.extend(x for x in v.values() if type(x) in _CONTAINERS)
        elif kind is not str:  # list or tuple
            stack.extend(x for x in v if type(x) in _CONTAINERS)
    return False


_CONTAINERS = frozenset((float, dict, list, tuple))
