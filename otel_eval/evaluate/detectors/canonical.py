"""Canonical JSON of call arguments, and a call's key bounded (stage: evaluate, for
``calls``, ``loop`` and ``reference``, and the judge's prompt: the one canonical form of
tool-call arguments; ``judge.compact`` calls ``canonical_arguments``, it has no rule of its own).

Canonical text: sorted keys, no spaces, whitespace in strings collapsed, integral floats as
ints (``canonical_arguments``; ``_plain_canonical`` builds it in one pass for plain JSON).
Repeats are found by comparing keys for equality (loops, retries, reworded and circling
calls) and a finding shows a key's first 200 characters. The canonical text of a call with
a 48 kB argument of control characters is ~290 kB, and every call keeps its key until the
trace is evaluated: 500 rebuilt calls held ~150 MB. So a key (``arguments_key``) is the
text itself when it has at most ``HEAD_CHARS`` characters, else its first ``HEAD_CHARS``
characters, ``\\x02``, its length and a BLAKE2b-128 digest of all of it; a large value's
text is produced in pieces (``canonical_pieces``, at most ``_PIECE`` characters of a string
at a time) and never joined. Two keys are equal exactly when the texts are (a short text is
never equal to a long one's key: that is longer than ``HEAD_CHARS``), and what a finding
shows is unchanged. Memory per call: the head and one piece beyond the value (which the step
holds already).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from otel_eval.base.text import load_content

# Characters of a key kept as they are (a finding shows at most 200 of them).
HEAD_CHARS = 256
_PIECE = 4096  # characters of one string encoded at a time
_WORD = re.compile(r"\S+")  # str.split()'s words: \s is the same Unicode whitespace
# json.dumps with non-default options builds an encoder per call; this is the same encoder
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              default=str).encode
_encode_str = json.encoder.encode_basestring  # the ensure_ascii=False string encoder
# Arguments whose canonical text has at most this many characters are encoded whole, at once
# (the pieces' generators cost ~4x more on the datasets' arguments): a bounded transient.
_SMALL_CHARS = 64 * 1024


def norm_ws(text: str) -> str:
    # = re.sub(r"\s+", " ", text).strip(): str.split() splits on the same (Unicode)
    # whitespace as the regex's \s, at a fifth of the cost
    return " ".join(text.split())


def nfc(value: Any) -> Any:
    """``value`` with its strings (keys too) in Unicode NFC: "café" composed or decomposed
    is the same text (no compatibility folding). Linear in the value; a string already NFC
    is kept as it is."""
    if isinstance(value, str):
        return value if unicodedata.is_normalized("NFC", value) else \
            unicodedata.normalize("NFC", value)
    if isinstance(value, Mapping):
        return {nfc(str(k)): nfc(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [nfc(v) for v in value]
    return value


def _normalize(value: Any) -> Any:
    kind = type(value)  # exact-type fast paths first: JSON arguments are plain dicts/strs
    if kind is str:
        return " ".join(value.split())
    if kind is dict:
        return {str(k): _normalize(v) for k, v in value.items()}
    if kind is int or kind is bool or value is None:
        return value
    if isinstance(value, str):
        return norm_ws(value)
    if isinstance(value, Mapping):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # 250.0 and 250 are the same argument
    return value


def normalized(value: Any) -> Any:
    """A value with whitespace in strings collapsed and integral floats made ints."""
    return _normalize(value)


def _plain_canonical(value: Any) -> str | None:
    """``_CANONICAL(_normalize(value))`` in one pass for plain JSON values (dicts with string
    keys, lists, strings, ints, bools, null, integral floats); None for anything else. Tool
    arguments are small: the encoder's per-call set-up cost more than their encoding."""
    kind = type(value)
    if kind is str:
        return _encode_str(" ".join(value.split()))
    if kind is dict:
        items = []
        for k in sorted(value) if all(type(k) is str for k in value) else ():
            inner = _plain_canonical(value[k])
            if inner is None:
                return None
            items.append(f"{_encode_str(k)}:{inner}")
        return f"{{{','.join(items)}}}" if len(items) == len(value) else None
    if kind is list:
        elements = []
        for v in value:
            inner = _plain_canonical(v)
            if inner is None:
                return None
            elements.append(inner)
        return f"[{','.join(elements)}]"
    if kind is int:
        return int.__repr__(value)
    if value is None or kind is bool:
        return "null" if value is None else "true" if value else "false"
    if kind is float and value.is_integer():
        return int.__repr__(int(value))  # 250.0 and 250 are the same argument
    return None


def _canonical(value: Any) -> str:
    plain = _plain_canonical(value)
    return plain if plain is not None else _CANONICAL(_normalize(value))


def canonical_arguments(arguments: Any) -> str:
    """Arguments as canonical JSON (sorted keys, whitespace in strings collapsed)."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        try:
            arguments = load_content(arguments)
        except ValueError:
            return norm_ws(arguments)
    return _canonical(arguments)


def canonical_of_normalized(value: Any) -> str:
    """``canonical_arguments(value)`` for a value already passed through ``normalized``
    (normalizing is idempotent, so only the encoding is left to do)."""
    if value is None or isinstance(value, str):
        return canonical_arguments(value)
    return _canonical(value)


def key_text(pieces: Iterable[str]) -> str:
    """The pieces joined when they make at most ``HEAD_CHARS`` characters; else the head,
    ``\\x02``, the length and the digest of the whole."""
    head: list[str] = []
    size = 0
    digest = None
    for piece in pieces:
        if digest is None:
            head.append(piece)
            size += len(piece)
            if size > HEAD_CHARS:
                digest = hashlib.blake2b(digest_size=16)
                for p in head:
                    digest.update(p.encode("utf-8", "surrogatepass"))
                head = ["".join(head)[:HEAD_CHARS]]
        else:
            size += len(piece)
            digest.update(piece.encode("utf-8", "surrogatepass"))
    if digest is None:
        return "".join(head)
    return f"{head[0]}\x02{size}:{digest.hexdigest()}"


def normalized_text(text: str) -> Iterator[str]:
    """``" ".join(text.split())`` in pieces (one, when the text is short)."""
    if len(text) <= _PIECE:
        yield " ".join(text.split())
        return
    first = True
    for m in _WORD.finditer(text):
        if not first:
            yield " "
        first = False
        start, end = m.span()
        for i in range(start, end, _PIECE):
            yield text[i:min(i + _PIECE, end)]


def _string(text: str) -> Iterator[str]:
    """The JSON string of ``text`` with its whitespace collapsed, in pieces (each character
    is escaped on its own, so the pieces' escapes join into the whole's)."""
    if len(text) <= _PIECE:
        yield _encode_str(" ".join(text.split()))
        return
    yield '"'
    for piece in normalized_text(text):
        yield _encode_str(piece)[1:-1]
    yield '"'


def canonical_pieces(value: Any) -> Iterator[str]:
    """``_canonical(value)`` (canonical JSON of ``normalized(value)``) in pieces: the
    same text, not built."""
    if isinstance(value, str):
        yield from _string(value)
    elif value is None:
        yield "null"
    elif value is True or value is False:
        yield "true" if value else "false"
    elif isinstance(value, int):
        yield int.__repr__(value)
    elif isinstance(value, float):
        yield _float(value)
    elif isinstance(value, Mapping):
        # as ``_normalize`` makes it: keys as strings (a later equal one wins), then sorted
        items = value if all(type(k) is str for k in value) else {
            str(k): v for k, v in value.items()}
        yield "{"
        for n, k in enumerate(sorted(items)):
            yield ("," if n else "") + _encode_str(k) + ":"
            yield from canonical_pieces(items[k])
        yield "}"
    elif isinstance(value, list | tuple):
        yield "["
        for n, v in enumerate(value):
            if n:
                yield ","
            yield from canonical_pieces(v)
        yield "]"
    else:  # the encoder's default=str, of a value that is not normalized
        yield _encode_str(str(value))


def _float(value: float) -> str:
    if value.is_integer():
        return int.__repr__(int(value))  # 250.0 and 250 are the same argument
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def arguments_key(arguments: Any) -> str:
    """``key_text`` of ``canonical_arguments(arguments)``."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        try:
            arguments = load_content(arguments)
        except ValueError:
            return key_text(normalized_text(arguments))
    if _within(arguments, _SMALL_CHARS) >= 0:  # most arguments: built whole, at once
        return key_text((_canonical(arguments),))
    return key_text(canonical_pieces(arguments))


def _within(value: Any, budget: int) -> int:
    """``budget`` less an upper bound of the canonical text's length (a character escapes
    to at most 6); negative as soon as it is spent (nothing built, the walk cut short)."""
    if isinstance(value, str):
        return budget - 6 * len(value) - 2
    if isinstance(value, Mapping):
        budget -= 2
        for k, v in value.items():
            budget = _within(v, budget - 6 * len(str(k)) - 4)
            if budget < 0:
                return budget
        return budget
    if isinstance(value, list | tuple):
        budget -= 2
        for v in value:
            budget = _within(v, budget - 1)
            if budget < 0:
                return budget
        return budget
    if value is None or isinstance(value, bool):
        return budget - 5
    if isinstance(value, float):
        return budget - 330  # an integral float is written as an int: up to 309 digits
    if isinstance(value, int):
        return budget - 32 if value.bit_length() < 100 else -1
    return -1  # anything else: its str() may be of any size
