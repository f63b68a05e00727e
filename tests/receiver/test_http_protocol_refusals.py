"""Requests the shared HTTP server refuses before a handler sees them (a request line that is
not HTTP/1.x, headers past the limit, HTTP/2, a TLS client at a plain-text port): each is
answered and counted in ``receiver_requests_refused_total`` with a reason, on the OTLP/HTTP
receiver (protocol ``http``) and the admin listener (``admin``), so an operator sees a client
speaking the wrong protocol, not only a connection that closed.

Over raw sockets: the answer is read to the close, and the server counts before it writes.
Every refusal is a whole HTTP/1.1 answer, as Go's net/http writes its own: a status line, the
body's type and length, and ``Connection: close`` (http.server answered a request line it could
not read as if to HTTP/0.9: a bare body, unreadable by an HTTP/1.1 client).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from support.harness import Harness, running_service

_POST = b"POST /v1/traces HTTP/1.1\r\nHost: localhost\r\n"

CASES = {  # what the client sends -> (status answered, reason counted)
    "not-a-request-line": (b"HELLO\r\n\r\n", b"400", "bad_request_line"),
    "bad-version": (b"POST /v1/traces HTTX/1.1\r\n\r\n", b"400", "bad_request_line"),
    "request-line-too-long": (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", b"414",
                              "bad_request_line"),
    "bad-request-target": (b"GET http://[::1/ HTTP/1.1\r\nHost: localhost\r\n\r\n", b"400",
                           "bad_request_line"),
    "header-line-too-long": (_POST + b"X-Big: " + b"a" * 70_000 + b"\r\n\r\n", b"431",
                             "header_too_large"),
    "too-many-headers": (_POST + b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n",
                         b"431", "header_too_large"),
    "headers-past-the-limit": (_POST + b"".join(b"X-%d: %s\r\n" % (i, b"a" * 1000)
                                                for i in range(90)) + b"\r\n",
                               b"431", "header_too_large"),
    "http-2-request-line": (b"POST /v1/traces HTTP/2.0\r\nHost: localhost\r\n\r\n", b"505",
                            "unsupported_http_version"),
    "http-2-preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"505",
                       "unsupported_http_version"),
    "tls-client-hello": (b"\x16\x03\x01\x00\x05hello", b"400", "tls_client"),
    # HTTP/0.9 (no version, no headers): refused at its line, as Go's net/http does
    "http-0.9-get": (b"GET /healthz\r\n", b"400", "bad_request_line"),
    "http-0.9-post": (b"POST /v1/traces\r\n", b"400", "bad_request_line"),
}


def _refusals(h: Harness, protocol: str) -> dict[str, float]:
    """``receiver_requests_refused_total`` of ``protocol`` by reason (those counted)."""
    return {s.labels["reason"]: s.value
            for m in h.svc.registry.collect() if m.name == "otel_eval_receiver_requests_refused"
            for s in m.samples if s.name.endswith("_total") and s.value
            and s.labels["protocol"] == protocol}


def _whole_answer(answer: bytes, status: bytes) -> bytes:
    """Check ``answer`` is an HTTP/1.1 answer of ``status``, framed and closing; its body."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    assert sep, answer[:200]
    lines = head.split(b"\r\n")
    assert lines[0].startswith(b"HTTP/1.1 " + status + b" "), answer[:200]
    fields = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in lines[1:])}
    assert fields.get(b"content-type"), head
    assert fields.get(b"content-length") == str(len(body)).encode(), head
    assert fields.get(b"connection") == b"close", head
    return body


def _exchange(port: int, sent: bytes) -> bytes:
    """Send ``sent``, then read the answer to the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(sent)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize("case", list(CASES))
def test_a_request_refused_before_its_handler_is_counted_with_a_reason(
        tmp_path: Path, case: str) -> None:
    sent, status, reason = CASES[case]
    with running_service(tmp_path) as h:
        assert h.svc.http is not None
        _whole_answer(_exchange(h.svc.http.port, sent), status)
        assert _refusals(h, "http") == {reason: 1}


def test_the_admin_listener_counts_them_too(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        for case in ("not-a-request-line", "bad-version", "http-2-request-line"):
            sent, status, _reason = CASES[case]
            body = _whole_answer(_exchange(h.svc.admin.port, sent), status)
            assert body.startswith(b'{"error": '), body
        assert b"Invalid HTTP version" in body, body
        assert _refusals(h, "admin") == {"bad_request_line": 2, "unsupported_http_version": 1}
        assert _refusals(h, "http") == {}
