"""Text from span content made safe for every consumer (the bottom layer).

OTLP strings are valid UTF-8, but JSON inside them is parsed, and JSON can spell a lone
surrogate (``"\\ud800"``): the parsed str then holds a code point UTF-8 cannot carry, and
sqlite3, psycopg, prometheus_client and ``str.encode`` raise on it (issue 33: one such agent
name stopped serve at every restart). JSON can also nest deeper than anything reading it
recursively survives (600 levels in 1.2 KB emptied a run's findings).

- ``valid_text``: a str with each lone surrogate written as U+FFFD (the replacement
  character, as PostgreSQL's NUL already is).
- ``checked``: a value parsed from JSON text, its strings (keys included) made valid and its
  nesting bounded to ``MAX_CONTENT_DEPTH`` (a deeper one is a ``ValueError``, as the body
  decoder's ``loads_bounded``), walked iteratively and only when the text can hold either
  (a ``\\ud`` escape, more than ``MAX_CONTENT_DEPTH`` brackets): the usual span pays two
  substring searches and two counts.
- ``load_content``: ``json.loads`` of span content through ``checked``.

Every place that parses JSON from span content goes through ``checked`` or ``load_content``.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_CONTENT_DEPTH = 100  # levels of arrays/objects in JSON read from span content

_LONE = re.compile("[\ud800-\udfff]")  # after parsing, a surrogate in a str is a lone one
_DECODER = json.JSONDecoder()


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD; ``text`` itself when it has
    none (the usual case: no copy)."""
    if text.isascii() or not _LONE.search(text):
        return text
    return _LONE.sub("\ufffd", text)


def checked(value: Any, text: str) -> Any:
    """``value``, parsed from the JSON ``text``, with valid strings and at most
    ``MAX_CONTENT_DEPTH`` levels deep; ValueError when deeper."""
    kind = type(value)
    if kind is str:
        return valid_text(value)
    if kind is not dict and kind is not list:
        return value
    lone = "\\u" in text and ("\\ud" in text or "\\uD" in text)
    if not lone and text.count("[") + text.count("{") <= MAX_CONTENT_DEPTH:
        return value  # cannot hold a lone surrogate, cannot be nested that deep
    _walk(value, lone)
    return value


def _walk(root: Any, fix: bool) -> None:
    """Checks the depth of ``root`` and, with ``fix``, makes its strings valid in place."""
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:  # iterative: the check itself must not recurse
        obj, depth = stack.pop()
        if depth > MAX_CONTENT_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_CONTENT_DEPTH} levels")
        if type(obj) is dict:
            if fix and any(valid_text(k) is not k for k in obj):
                items = [(valid_text(k), v) for k, v in obj.items()]
                obj.clear()
                obj.update(items)
            slots: Any = obj.items()
        else:
            slots = enumerate(obj)
        for key, v in list(slots):
            kind = type(v)
            if kind is str:
                if fix:
                    obj[key] = valid_text(v)
            elif kind is dict or kind is list:
                stack.append((v, depth + 1))


def load_content(text: str) -> Any:
    """``json.loads`` of span content, ``checked``: ValueError when invalid or too deep."""
    try:
        return checked(_DECODER.decode(text), text)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_CONTENT_DEPTH} levels") from None
