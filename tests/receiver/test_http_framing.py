"""Framing a front end and this server must read alike: ``Expect: 100-continue`` and
``Content-Length``, over raw sockets on the OTLP/HTTP receiver and the admin API.

A refusal on the headers (no token, too large, wrong type) is the final status, never a
``100 Continue`` first: a client told to continue sends the body it is then refused for.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.harness import Harness, running_service

from otel_eval.base.model import Span
from otel_eval.decode import encode

LIMIT = 64 * 1024
PB = "application/x-protobuf"


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    with running_service(tmp_path, **{
            "receiver.max_message_bytes": LIMIT,
            "receiver.bearer_tokens": {"agents": "otlp-secret"},
            "admin.write_tokens": {"labeller": "admin-secret"}}) as harness:
        yield harness


def _body(trace: str = "ab" * 16) -> bytes:
    return encode.encode_spans([Span(trace, "01" * 8, None, "root", 1, 2)]).SerializeToString()


def _head(s: socket.socket) -> bytes:
    """One answer's status line and headers (what the client waits for before the body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = s.recv(1)
        assert piece, data
        data += piece
    return data


def _send_head(port: int, lines: list[str]) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall("".join(f"{line}\r\n" for line in lines).encode() + b"\r\n")
    return s


def _otlp_post(token: str, ctype: str, length: int) -> list[str]:
    return ["POST /v1/traces HTTP/1.1", "Host: localhost", f"Content-Type: {ctype}",
            f"Authorization: Bearer {token}", f"Content-Length: {length}",
            "Expect: 100-continue"]


@pytest.mark.parametrize(("listener", "lines", "status"), [
    ("otlp", _otlp_post("wrong", PB, 1000), b"401"),
    ("otlp", _otlp_post("otlp-secret", PB, LIMIT + 1), b"413"),
    ("otlp", _otlp_post("otlp-secret", "text/plain", 1000), b"415"),
    ("admin", ["POST /v1/feedback HTTP/1.1", "Host: localhost", "Content-Type: application/json",
               "Content-Length: 1000", "Expect: 100-continue"], b"401"),
], ids=["otlp-no-token", "otlp-too-large", "otlp-wrong-type", "admin-no-token"])
def test_a_request_refused_on_its_headers_gets_no_100_continue(
        h: Harness, listener: str, lines: list[str], status: bytes) -> None:
    port = h.svc.http.port if listener == "otlp" else h.svc.admin.port  # type: ignore[union-attr]
    with _send_head(port, lines) as s:
        assert _head(s).startswith(b"HTTP/1.1 " + status + b" ")


def test_a_request_read_gets_100_continue_then_its_answer(h: Harness) -> None:
    body = _body()
    assert h.svc.http is not None
    with _send_head(h.svc.http.port, _otlp_post("otlp-secret", PB, len(body))) as s:
        assert _head(s) == b"HTTP/1.1 100 Continue\r\n\r\n"  # as the client waits for it
        s.sendall(body)
        assert _head(s).startswith(b"HTTP/1.1 200 ")
    assert h.svc.engine.open_traces() == 1


def _answers(s: socket.socket) -> list[bytes]:
    """The status lines of every answer until the server closes (the bodies here are short
    JSON, without one)."""
    data = b""
    while piece := s.recv(65536):
        data += piece
    return re.findall(rb"HTTP/1\.1 \d{3} ", data)


SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"


def test_a_second_content_length_is_not_ignored_on_a_post(h: Harness) -> None:
    """``Content-Length: 0`` then the length of a hidden request: a front end that reads the
    last line forwards the hidden request as this one's body; it must not be answered."""
    assert h.svc.http is not None
    head = [*_otlp_post("otlp-secret", PB, 0)[:-1], f"Content-Length: {len(SMUGGLED)}"]
    with _send_head(h.svc.http.port, head) as s:
        s.sendall(SMUGGLED)
        answers = _answers(s)
    assert len(answers) == 1 and answers[0].startswith(b"HTTP/1.1 400 "), answers


def test_a_second_content_length_is_not_ignored_on_a_get(h: Harness) -> None:
    lines = ["GET /healthz HTTP/1.1", "Host: localhost", "Content-Length: 0",
             f"Content-Length: {len(SMUGGLED)}"]
    with _send_head(h.svc.admin.port, lines) as s:
        s.sendall(SMUGGLED)
        answers = _answers(s)
    assert len(answers) == 1, answers  # the body was not read: the connection closed


@pytest.mark.parametrize("listener", ["otlp", "admin"])
def test_a_request_with_both_framings_is_the_last_on_its_connection(
        h: Harness, listener: str) -> None:
    """``Transfer-Encoding: chunked`` and a ``Content-Length``: read as chunked (RFC 9112
    6.3), then the connection closes (6.1: a front end that read the length forwarded the
    bytes after the last chunk as this request's body; they must not be answered)."""
    body = _body()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    if listener == "otlp":
        assert h.svc.http is not None
        port, lines = h.svc.http.port, _otlp_post("otlp-secret", PB, 0)[:-2]
    else:
        port = h.svc.admin.port
        lines = ["POST /v1/feedback HTTP/1.1", "Host: localhost",
                 "Content-Type: application/json", "Authorization: Bearer admin-secret"]
        chunked = b'2\r\n{}\r\n0\r\n\r\n'
    lines += ["Transfer-Encoding: chunked", f"Content-Length: {len(chunked) + len(SMUGGLED)}"]
    with _send_head(port, lines) as s:
        s.sendall(chunked + SMUGGLED)
        answers = _answers(s)
    assert len(answers) == 1 and answers[0] in (b"HTTP/1.1 200 ", b"HTTP/1.1 400 "), answers


_AUTHED = ["POST /v1/traces HTTP/1.1", "Host: localhost", f"Content-Type: {PB}",
           "Authorization: Bearer otlp-secret"]


@pytest.mark.parametrize(("framing", "status", "reason"), [
    (["Transfer-Encoding: gzip"], b"501", "unsupported_transfer_encoding"),
    (["Transfer-Encoding: gzip, chunked"], b"501", "unsupported_transfer_encoding"),
    ([], b"411", "length_required"),
], ids=["gzip", "gzip-then-chunked", "no-length"])
def test_a_framing_not_read_here_is_refused_with_its_own_reason(
        h: Harness, framing: list[str], status: bytes, reason: str) -> None:
    """A body framed in a way this server does not read (a transfer coding but chunked, or
    neither a length nor chunked) is the sender's or its proxy's setting, as an unsupported
    Content-Encoding is: refused on its headers and counted by its reason, not as
    malformed_request (a body that was read and could not be decoded)."""
    assert h.svc.http is not None
    with _send_head(h.svc.http.port, _AUTHED + framing) as s:
        assert _head(s).startswith(b"HTTP/1.1 " + status + b" ")
    refused = {labels["reason"]: n for labels, n in _samples(h, "requests_refused_total")}
    assert refused == {reason: 1}
    assert _samples(h, "spans_rejected_total") == []  # no spans were read to reject


def test_a_transfer_coding_in_an_http_1_0_request_is_refused_and_closes(h: Harness) -> None:
    """HTTP/1.0 has no transfer codings: a request framed chunked in it is faulty framing
    (RFC 9112 6.1), answered 400 and counted as its framing's refusal, never read."""
    assert h.svc.http is not None
    lines = ["POST /v1/traces HTTP/1.0", *_AUTHED[1:], "Transfer-Encoding: chunked"]
    with _send_head(h.svc.http.port, lines) as s:
        s.sendall(b"0\r\n\r\n")
        answers = _answers(s)
    assert answers == [b"HTTP/1.1 400 "]
    refused = {labels["reason"]: n for labels, n in _samples(h, "requests_refused_total")}
    assert refused == {"unsupported_transfer_encoding": 1}


def _samples(h: Harness, name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for m in h.svc.registry.collect() for s in m.samples
            if s.name == f"otel_eval_receiver_{name}" and s.value]
