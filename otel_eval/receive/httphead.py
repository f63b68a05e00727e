"""The request head, read for the shared HTTP server (``httpconn``) as RFC 9112 has it,
before http.server's parser reads it some other way than a front end.

    request line (``check_request_line``) -> field lines (``FieldLines``: each checked)
        -> http.server's parser; or ``BadHead``: a 400

http.server reads a request's field lines with ``http.client.parse_headers``, then hands them to
the ``email`` parser, which takes a line it cannot read as a field (``Host : x``, no colon)
for the start of a body: that line and every field after it were dropped, a
``Content-Length`` among them, and the body then answered as a request (smuggled).
It also continued the field before a line that begins with a blank (obs-fold: its value
then held a CRLF), and dropped the first field when it did. ``FieldLines`` is the stream it
reads them through: a line that is not ``name: value`` is a 400 first (``BadHead``), as RFC
9112 5.1 has it ("MUST respond with 400" to whitespace between a field name and its colon)
and 5.2 allows for obs-fold (a 400, "preferably" saying it is obs-fold; the other way, its
CRLF replaced by a space, reads a value its sender's front end may have read otherwise), as
Go's net/http answers both ("malformed MIME header line"). The email parser also ends a line
at a bare CR (``X: a<CR>Transfer-Encoding: chunked`` was two fields) and keeps a NUL: both
are a 400 too (RFC 9112 2.2, RFC 9110 5.5: "MUST either reject the message or replace").
Before them, the request line is three words with one space between them
(``check_request_line``): http.server split it on any whitespace, Unicode's too.
"""

from __future__ import annotations

import re
from typing import Protocol

from otel_eval.base.printable import quoted

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # RFC 9110 5.6.2
# request-line = method SP request-target SP HTTP-version (RFC 9112 3): one SP each, the
# method a token, the target and the version without blanks or controls (http.server's
# own check of the version follows), the line's end CRLF or LF (or the client's close)
_REQUEST_LINE = re.compile(_TOKEN + rb" [^\x00-\x20\x7f]+ [^\x00-\x20\x7f]+(\r?\n)?")
# field-name = token, then the colon at once (RFC 9112 5.1)
_FIELD_NAME = re.compile(_TOKEN + rb":")
_END = (b"\r\n", b"\n", b"")  # the empty line that ends the head, or the client's close


class BadHead(Exception):
    """A request head the server does not read (answered 400, as its message says)."""


def check_request_line(line: bytes) -> None:
    """Refuse (``BadHead``) a request line not ``METHOD SP TARGET SP VERSION``: http.server
    split it on any whitespace, Unicode's too (U+00A0, U+0085 of its ISO-8859-1 text), and
    read a request where a front end reads another or none (RFC 9112 3: lenient parsing
    "can result in request smuggling"); one SP each, as Go's net/http and h11 read it."""
    if not _REQUEST_LINE.fullmatch(line):
        raise BadHead(f"bad request line {_text(line)}: expected METHOD TARGET HTTP/1.1, "
                      "one space between them")


class _Lines(Protocol):
    def readline(self, size: int | None = -1, /) -> bytes: ...


class FieldLines:
    """The head's field lines as http.server reads them (``readline``), each refused
    (``BadHead``) unless it is ``name: value``; the empty line that ends them passes."""

    def __init__(self, stream: _Lines) -> None:
        self.stream = stream

    def readline(self, size: int | None = -1, /) -> bytes:
        line = self.stream.readline(size)
        if line not in _END and line.endswith(b"\n"):  # a longer one: http.client's 431
            _check(line)
        return line


def _check(line: bytes) -> None:
    """Refuse a field line (with its line end) the server would read otherwise than a front
    end (``BadHead``)."""
    if line[:1] in (b" ", b"\t"):  # obs-fold, or blanks before the first field (2.2)
        raise BadHead(f"bad header field line {_text(line)}: obsolete line folding (a line "
                      "that begins with a blank) is not accepted")
    if not _FIELD_NAME.match(line):
        raise BadHead(f"bad header field line {_text(line)}: expected a name (a token) and "
                      "a colon")
    if b"\r" in line.removesuffix(b"\n").removesuffix(b"\r") or b"\0" in line:
        raise BadHead(f"bad header field line {_text(line)}: a CR inside it (a line ends "
                      "with CRLF or LF) or a NUL")


def _text(line: bytes) -> str:
    return quoted(str(line, "iso-8859-1").rstrip("\r\n"))
