"""What a handler of the shared HTTP server (``httpserver``) sees and answers.

    Request -> Handler -> Response

A handler is a plain function ``Request -> Response`` (status, headers, body), the same for
every listener (the OTLP/HTTP receiver, the admin API and its pages; ``routing`` picks one
per path). It reads the body through ``Request.body(limit)`` (``decode.body``: framing and
size limits; ``BodyError`` says why not, and the server answers it), and calls
``Request.authenticated()`` once the sender showed a known token. Errors the handler did not
choose (bad framing, limits, a handler bug) are worded by the listener's ``ErrorBody``
(``json_error`` by default).
"""

from __future__ import annotations

import email.message
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass
class Request:
    method: str
    path: str  # without the query string
    query: str
    headers: email.message.Message
    peer: str
    _read: Callable[[int], bytes] = field(repr=False)
    _trust: Callable[[str], None] = field(default=lambda _sender: None, repr=False)

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def authenticated(self, sender: str = "") -> None:
        """The sender showed a known token (``sender``: its name): its connection is kept
        ahead of partial requests when the listener is full (``reuse_partial``), and its
        body counts in the share of the bodies in flight of its address and that name, not
        of its address alone (behind a proxy every sender is one address; call it before
        reading the body)."""
        self._trust(sender)

    def body(self, limit: int) -> bytes:
        """The body, decoded and at most ``limit`` bytes (``BodyError`` says why not)."""
        return self._read(limit)


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)
    # Close the connection after this answer (say so when the body was not read).
    close: bool = False


Handler = Callable[[Request], Response]
# How a listener words an error it did not choose (bad framing, limits, a handler bug):
# (request or None before it was parsed, status, message) -> Response.
ErrorBody = Callable[[Request | None, int, str], Response]


def json_error(_request: Request | None, status: int, message: str) -> Response:
    import json
    return Response(status, json.dumps({"error": message}).encode())
