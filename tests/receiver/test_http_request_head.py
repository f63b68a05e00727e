"""The request head as RFC 9112 has it, over raw loopback sockets to the shared HTTP server
(``httpconn``) with an injected clock: what is dropped before a request line (2.2), and what
is answered 400 and counted ``bad_request_line`` rather than read some other way than a
front end reads it (a request line, field lines: 3, 5)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from otel_eval.receive.config import HttpLimits
from otel_eval.receive.httpconn import EMPTY_LINES
from otel_eval.receive.httpmessage import Request, Response
from otel_eval.receive.httpserver import HttpServer

LIMITS = HttpLimits(read_header_timeout_s=10.0, read_timeout_s=60.0, idle_timeout_s=120.0,
                    max_header_bytes=4096)
GET = b"GET /last HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"


class _Counts:
    """What the server counted: connections closed and requests refused, by reason."""

    def __init__(self) -> None:
        self.closed: list[str] = []
        self.refused: list[str] = []


def _echo(req: Request) -> Response:
    """Answers with the request's path and its body (read whole)."""
    body = req.body(1000) if req.header("Content-Length") else b""
    return Response(200, b"%s %s" % (req.path.encode(), body), "text/plain")


@contextmanager
def _server(counts: _Counts, clock: Callable[[], float] = lambda: 0.0,
            handler: Callable[[Request], Response] = _echo) -> Iterator[int]:
    server = HttpServer("127.0.0.1:0", handler, name="test", limits=LIMITS, clock=clock,
                        on_close=counts.closed.append, on_refuse=counts.refused.append)
    server.start()
    try:
        yield server.port
    finally:
        server.shutdown(1.0)


def _exchange(port: int, sent: bytes, *, half_close: bool = False) -> list[tuple[bytes, bytes]]:
    """Send ``sent`` on one connection (then close its sending half); every answer's status
    line and body, to the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(sent)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        return _answers(s)


def _answers(s: socket.socket, most: int = -1) -> list[tuple[bytes, bytes]]:
    """Every answer's status line and body, to the close (or the first ``most``)."""
    data = b""
    answers: list[tuple[bytes, bytes]] = []
    while len(answers) != most:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if sep:
            length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
            if len(rest) >= length:
                answers.append((head.split(b"\r\n", 1)[0], rest[:length]))
                data = rest[length:]
                continue
        with contextlib.suppress(ConnectionResetError):  # closed with bytes of ours unread
            if piece := s.recv(65536):
                data += piece
                continue
        assert not data, data
        break
    return answers


def _post(path: str, body: bytes) -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n%s" % (
        path.encode(), len(body), body)


@pytest.mark.parametrize("empty", [b"\r\n", b"\n", b"\r\n" * EMPTY_LINES],
                         ids=["crlf", "lf", "as-many-as-skipped"])
def test_empty_lines_after_a_posts_body_are_dropped(empty: bytes) -> None:
    """A client that ends a POST's body with a CRLF its Content-Length does not count: the
    next request on the connection is answered (it was dropped, the connection closed)."""
    counts = _Counts()
    with _server(counts) as port:
        answers = _exchange(port, _post("/first", b"{}") + empty + GET)
    assert answers == [(b"HTTP/1.1 200 OK", b"/first {}"), (b"HTTP/1.1 200 OK", b"/last ")]
    assert counts.closed == counts.refused == []


def test_an_empty_line_before_the_first_request_is_dropped() -> None:
    counts = _Counts()
    with _server(counts) as port:
        assert _exchange(port, b"\r\n" + GET) == [(b"HTTP/1.1 200 OK", b"/last ")]
        assert _exchange(port, b"\r\n", half_close=True) == []  # nothing to answer


@pytest.mark.parametrize("line", [b"\r\n", b" \r\n", b"\t\r\n"],
                         ids=["empty", "space", "tab"])
def test_a_request_line_past_the_empty_lines_skipped_is_a_400(line: bytes) -> None:
    """One empty line more than are skipped, or a line of blanks: a 400 (http.server closed
    the connection without a word, and without a count)."""
    counts = _Counts()
    with _server(counts) as port:
        answers = _exchange(port, b"\r\n" * EMPTY_LINES + line + GET)
    assert [status for status, _ in answers] == [b"HTTP/1.1 400 Bad Request"]
    assert counts.refused == ["bad_request_line"]


def test_empty_lines_count_in_the_head_limit() -> None:
    head = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Pad: "
    head += b"a" * (LIMITS.max_header_bytes - len(head) - 4) + b"\r\n\r\n"
    assert len(head) == LIMITS.max_header_bytes
    counts = _Counts()
    with _server(counts) as port:
        assert [s for s, _ in _exchange(port, head)] == [b"HTTP/1.1 200 OK"]
        assert [s for s, _ in _exchange(port, b"\n" + head)] == [
            b"HTTP/1.1 431 Request Header Fields Too Large"]
    assert counts.closed == ["header_too_large"]


def test_empty_lines_are_read_under_the_heads_deadline() -> None:
    """A client trickling empty lines is cut at the deadline of the head they precede, which
    began with the first of them: after the first request each reading of the clock takes
    6 s, and the second's line comes after an empty line read with the first (10 s a head)."""
    now, step = [0.0], [0.0]
    counts = _Counts()

    def clock() -> float:
        now[0] += step[0]
        return now[0]

    def handler(req: Request) -> Response:
        step[0] = 6.0
        return _echo(req)

    with _server(counts, clock, handler) as port, \
            socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(_post("/first", b"{}") + b"\r\n")
        assert _answers(s, most=1) == [(b"HTTP/1.1 200 OK", b"/first {}")]
        with contextlib.suppress(ConnectionError):  # closed with bytes of ours unread
            s.sendall(b"\r\n" + GET)
        assert _answers(s) == []
    assert counts.closed == ["header_timeout"]


HEAD = b"GET /last HTTP/1.1\r\nHost: localhost\r\n"


@pytest.mark.parametrize("line", [b"Content-Length : 5", b"Content-Length\t: 5", b": 5",
                                  b"Content-Length 5", b"Cont\x85ent-Length: 5"],
                         ids=["space-before-colon", "tab-before-colon", "no-name",
                              "no-colon", "not-a-token"])
def test_a_field_line_that_is_not_name_colon_value_is_a_400(line: bytes) -> None:
    """RFC 9112 5.1: whitespace between a field name and its colon MUST be a 400. http.server
    took such a line for the start of a body and dropped it and every field after it: the
    length was not read, and the body ("hello") was answered as a request."""
    counts = _Counts()
    with _server(counts) as port:
        answers = _exchange(port, HEAD + line + b"\r\nX-After: 1\r\n\r\nhello" + GET)
    assert [status for status, _ in answers] == [b"HTTP/1.1 400 Bad Request"], answers
    assert b"bad header field line" in answers[0][1]
    assert counts.refused == ["bad_request_line"]


@pytest.mark.parametrize("lines", [b"X-A: 1\r\n 2\r\n", b"X-A: 1\r\n\t2\r\n",
                                   b" X-A: 1\r\n"],
                         ids=["space-fold", "tab-fold", "blank-before-the-first-field"])
def test_obsolete_line_folding_is_a_400_that_says_so(lines: bytes) -> None:
    """RFC 9112 5.2: obs-fold is a 400 (preferably saying so) or read as a space; http.server
    kept its CRLF in the value, and dropped a first field that began with a blank (2.2)."""
    counts = _Counts()
    with _server(counts) as port:
        head = b"GET /last HTTP/1.1\r\n" + lines + b"Host: localhost\r\n\r\n"
        answers = _exchange(port, head + GET)
    assert [status for status, _ in answers] == [b"HTTP/1.1 400 Bad Request"], answers
    assert b"obsolete line folding" in answers[0][1]
    assert counts.refused == ["bad_request_line"]


@pytest.mark.parametrize("line", [b"X-A: a\rConnection: close", b"X-A: a\r\r", b"X-A: a\x00b"],
                         ids=["cr-then-a-field", "cr-before-crlf", "nul"])
def test_a_bare_cr_or_a_nul_in_a_field_line_is_a_400(line: bytes) -> None:
    """RFC 9112 2.2, RFC 9110 5.5: a bare CR (not before the line's LF) or a NUL in a field
    MUST be refused or read as a space; http.server's email parser ended the line at the CR
    (here a Connection: close no front end saw, which cut the keep-alive)."""
    counts = _Counts()
    with _server(counts) as port:
        answers = _exchange(port, HEAD + line + b"\r\n\r\n" + GET)
    assert [status for status, _ in answers] == [b"HTTP/1.1 400 Bad Request"], answers
    assert b"a CR inside it" in answers[0][1]
    assert counts.refused == ["bad_request_line"]


@pytest.mark.parametrize("line", [b"GET  /last HTTP/1.1", b"GET /last  HTTP/1.1",
                                  b"GET\t/last\tHTTP/1.1", b" GET /last HTTP/1.1",
                                  b"GET /last HTTP/1.1 ", b"GET\xa0/last\xa0HTTP/1.1",
                                  b"GET /last\rHTTP/1.1", b"G(T /last HTTP/1.1"],
                         ids=["two-spaces", "two-spaces-before-version", "tabs",
                              "leading-space", "trailing-space", "nbsp", "bare-cr",
                              "method-not-a-token"])
def test_a_request_line_not_one_space_between_its_words_is_a_400(line: bytes) -> None:
    """RFC 9112 3: method SP request-target SP HTTP-version. http.server split it on any
    whitespace, Unicode's too (U+00A0, U+0085, U+001C..U+001F of the ISO-8859-1 text): read
    as a request where a front end reads another or none (3: lenient parsing "can result in
    request smuggling"). One space each, as Go's net/http and h11 read it."""
    counts = _Counts()
    with _server(counts) as port:
        answers = _exchange(port, line + b"\r\nHost: localhost\r\n\r\n" + GET)
    assert [status for status, _ in answers] == [b"HTTP/1.1 400 Bad Request"], answers
    assert counts.refused == ["bad_request_line"]


def test_a_request_line_ended_by_a_lone_lf_is_read() -> None:
    """RFC 9112 2.2: a recipient MAY read a lone LF as a line's end: kept."""
    counts = _Counts()
    with _server(counts) as port:
        answers = _exchange(port, b"GET /first HTTP/1.1\nHost: localhost\n\n" + GET)
    assert answers == [(b"HTTP/1.1 200 OK", b"/first "), (b"HTTP/1.1 200 OK", b"/last ")]
