"""Text from span content made safe for a terminal, a log line or an error answer (the bottom
layer).

Span names, agents, models, error messages and request paths come from whoever reaches a
port. Printed raw, a control character is an instruction to the terminal (an OSC 52
clipboard write, a carriage return that overwrites a FAIL with a fake PASS, a cursor move) or,
in a log, a forged line. ``printable`` writes every C0 control (U+0000-U+001F), DEL (U+007F)
and C1 control (U+0080-U+009F) as a visible escape (``\\x1b``, ``\\r``, ``\\x85``), and so
the bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069:
``\\u202e``), which display the text after them reversed (Trojan Source: a tool named
``\\u202etxt.exe`` reads as ``exe.txt``), leaving everything else - other Unicode, right-to-left
scripts included - as it is. ``keep`` names the controls a caller wants kept (``"\\n"`` for
multi-line text output). ``bidi_escaped`` escapes those bidirectional controls alone (the web
view's text, whose line breaks are its own).

``EscapingFormatter`` is the ``logging.Formatter`` of every otel-eval process: each record's
message (its arguments included) is escaped whole, so one record is one line; a traceback
keeps its newlines and nothing else.

``unescaped`` turns those escapes back (a Prometheus label value, ``printable`` of a name,
selecting the stored runs it labels).

``quoted`` is how an error answer names a client's value (a path, a header, a parameter, a
field of a body): its first ``QUOTED_CHARS`` characters as a JSON string (``"/v1/x"``, as Go's
``%q`` quotes; Python's repr, ``'/v1/x'``, and its ``\\x7f``, read as our language, not the
client's), every control escaped (JSON's ``\\u001b``), so the answer says what was wrong
without sending a 64 KiB path or a 1 MiB body back, grown by the escapes (up to 6 bytes a
byte). ``as_json`` quotes a value of a JSON body so (``null``, ``0.5``, ``"maybe"``), in the
sender's terms. ``clipped`` bounds a library's message about a client's input
(json_format's names the field and quotes its whole value): its first ``CLIPPED_CHARS``
characters.
"""

from __future__ import annotations

import json
import logging
import re

_BIDI = "\u202a-\u202e\u2066-\u2069"  # embeddings, overrides, isolates and their ends
_CONTROLS = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_BIDI_CONTROLS = re.compile(f"[{_BIDI}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    c = match.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if c < "\u0100" else f"\\u{ord(c):04x}")


def bidi_escaped(text: str) -> str:
    """``text`` with the bidirectional embeddings, overrides and isolates escaped
    (``\\u202e``), as ``printable`` writes them."""
    if not _BIDI_CONTROLS.search(text):
        return text
    return _BIDI_CONTROLS.sub(_escape, text)


# Characters of a client's value an error quotes (the rest cut).
QUOTED_CHARS = 100


# What JSON text leaves raw and a terminal acts on (DEL, C1 controls, bidirectional
# controls) or no UTF-8 stream takes (a lone surrogate, which a JSON body's "\\ud800" holds)
_RAW_IN_JSON = re.compile(f"[\x7f-\x9f{_BIDI}\ud800-\udfff]")


def _json_text(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def quoted(text: str) -> str:
    """``text``'s first ``QUOTED_CHARS`` characters as a JSON string, every control escaped
    as JSON escapes it (``\\u001b``, ``\\u202e``), other Unicode as it is; "..." after it
    when there were more."""
    return _json_text(text[:QUOTED_CHARS]) + ("..." if len(text) > QUOTED_CHARS else "")


def as_json(value: object) -> str:
    """A value of a JSON body (a str: ``quoted``) as JSON text, its first ``QUOTED_CHARS``
    characters and "..." after them when there were more, never cut inside an escape."""
    if isinstance(value, str):
        return quoted(value)
    text = _json_text(value)
    return text if len(text) <= QUOTED_CHARS else _json_cut(text, QUOTED_CHARS) + "..."


# A JSON text's escapes: backslash begins one wherever it stands (only inside a string)
_JSON_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|.)', re.DOTALL)


def _json_cut(text: str, chars: int) -> str:
    """``text`` (JSON) cut to at most ``chars`` characters, an escape the cut would split
    left out whole: ``\\u`` of ``\\u001b``, or the backslash of ``\\"``, reads as
    another escape (of the "..." after it) or as none."""
    for m in _JSON_ESCAPE.finditer(text, 0, chars + 6):  # from the start: in step
        if m.start() < chars < m.end():
            return text[:m.start()]
    return text[:chars]


# Characters of a library's message about a client's input an error answer keeps.
CLIPPED_CHARS = 400


def clipped(text: str) -> str:
    """``text``'s first ``CLIPPED_CHARS`` characters, "..." after them when there were more."""
    return text if len(text) <= CLIPPED_CHARS else text[:CLIPPED_CHARS] + "..."


_ESCAPED = re.compile(r"\\(?:x([01][0-9a-f]|7f|[89][0-9a-f])|u(202[a-e]|206[6-9])|([nrt]))")
_UNNAMED = {"n": "\n", "r": "\r", "t": "\t"}


def _unescape(match: re.Match[str]) -> str:
    byte, bidi, named = match.groups()
    return _UNNAMED[named] if named else chr(int(byte or bidi, 16))


def unescaped(text: str) -> str:
    """``printable``'s escapes in ``text`` turned back into the controls they stand for
    (what a name labelled ``text`` was, when it held any; a name that held the escape's own
    characters reads as ``text`` itself)."""
    return _ESCAPED.sub(_unescape, text) if "\\" in text else text


def printable(text: str, keep: str = "") -> str:
    """``text`` with C0/C1 controls and DEL escaped, except those in ``keep``."""
    if not _CONTROLS.search(text):  # the common case: nothing to do, no copy
        return text
    if not keep:
        return _CONTROLS.sub(_escape, text)
    return _CONTROLS.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)


def printable_cut(text: str, chars: int) -> str:
    """``printable(text)`` cut to at most ``chars`` characters, never inside an escape
    (``escaped_cut``)."""
    return escaped_cut(printable(text[:chars]), chars)  # an escape is never shorter than its char


def escaped_cut(shown: str, chars: int) -> str:
    """``shown`` (text ``printable`` escaped, maybe reworked: spaces folded) cut to at most
    ``chars`` characters, never inside an escape: a cut there could leave ``\\x`` of
    ``\\x1b``, a backslash that names no control (read as the text's own), so an escape the
    cut would split is left out whole (the text's own characters that read as one too)."""
    if len(shown) <= chars:
        return shown
    # an escape is at most 6 characters (\u202e): only one starting in the last 5 can cross
    for m in _ESCAPED.finditer(shown, max(0, chars - 5), chars + 5):
        if m.start() < chars < m.end():
            return shown[:m.start()]
    return shown[:chars]


class EscapingFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose records cannot carry control characters."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))

    def formatException(self, ei: object) -> str:
        return printable(super().formatException(ei), keep="\n")  # type: ignore[arg-type]

    def formatStack(self, stack_info: str) -> str:
        return printable(super().formatStack(stack_info), keep="\n")


def configure_logging(level: int | str, fmt: str) -> None:
    """``logging.basicConfig`` on stderr with the escaping formatter."""
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter(fmt))
    logging.basicConfig(level=level, handlers=[handler])
