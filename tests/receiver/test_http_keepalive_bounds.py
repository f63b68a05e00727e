"""The HTTP server's per-request bounds on a keep-alive connection, over a real loopback socket
with an injected clock: a request's deadlines count from its own first byte, even when that
byte came in with the previous request (pipelined, read ahead into the connection's buffer),
and its head is bounded by ``max_header_bytes`` exactly, not by that plus the read buffer."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from otel_eval.receive.config import HttpLimits
from otel_eval.receive.httpmessage import Request, Response
from otel_eval.receive.httpserver import HttpServer

LIMITS = HttpLimits(read_header_timeout_s=10.0, read_timeout_s=60.0, idle_timeout_s=120.0,
                    max_header_bytes=4096)


@contextmanager
def _server(handler: Callable[[Request], Response], clock: Callable[[], float],
            closed: list[str]) -> Iterator[int]:
    server = HttpServer("127.0.0.1:0", handler, name="test", limits=LIMITS, clock=clock,
                        on_close=closed.append)
    server.start()
    try:
        yield server.port
    finally:
        server.shutdown(1.0)


def _answer(s: socket.socket) -> bytes:
    """One answer's status line (its body is the JSON below, read whole), or b"" at close."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = s.recv(1)
        if not piece:
            return b""
        data += piece
    head, _, _ = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
    while length:
        length -= len(s.recv(length))
    return head.split(b"\r\n", 1)[0]


def _post(path: str, length: int, *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: localhost", f"Content-Length: {length}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_pipelined_requests_read_deadline_counts_from_its_own_start() -> None:
    """The first request took 61 s (of 60 for it); the second, pipelined behind it, then
    sends its body at once: it was cut (``read_timeout``), its deadline counted from the
    first request's start."""
    now = [0.0]
    closed: list[str] = []

    def handler(req: Request) -> Response:
        req.body(100)
        if req.path == "/first":
            now[0] = 61.0  # answered 61 s after the connection was accepted
        return Response(200, b"{}")

    with _server(handler, lambda: now[0], closed) as port, \
            socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(_post("/first", 2) + b"{}" + _post("/second", 2))
        assert _answer(s) == b"HTTP/1.1 200 OK"
        s.sendall(b"{}")  # the second request's body, as soon as the first is answered
        assert _answer(s) == b"HTTP/1.1 200 OK", closed


def test_a_pipelined_requests_head_has_its_header_deadline() -> None:
    """After the first request, every read of the connection takes 6 s: the second request,
    whose head began in the first one's read, must have its head in 10 s from when it
    begins; its deadline was the idle timeout (120 s) until a later read of its head."""
    now = [0.0]
    step = [0.0]
    closed: list[str] = []

    def clock() -> float:
        now[0] += step[0]
        return now[0]

    def handler(req: Request) -> Response:
        if req.path == "/first":
            step[0] = 6.0
        return Response(200, b"{}")

    second = _post("/second", 0, f"X-Pad: {'a' * 1000}")
    with _server(handler, clock, closed) as port, \
            socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        # one read takes the first request and the start of the second
        s.sendall(_post("/first", 0) + second[:100])
        assert _answer(s) == b"HTTP/1.1 200 OK"
        s.sendall(second[100:])
        assert _answer(s) == b""
    assert closed == ["header_timeout"]


def test_a_head_past_max_header_bytes_is_refused_431() -> None:
    closed: list[str] = []
    with _server(lambda _req: Response(200, b"{}"), lambda: 0.0, closed) as port:
        for size, status in ((LIMITS.max_header_bytes, b"HTTP/1.1 200 OK"),
                             (LIMITS.max_header_bytes + 1, b"HTTP/1.1 431 "),
                             (LIMITS.max_header_bytes + 6000, b"HTTP/1.1 431 ")):
            head = _post("/", 0, "X-Pad: ")
            pad = size - len(head)
            head = _post("/", 0, f"X-Pad: {'a' * pad}")
            assert len(head) == size
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(head)
                assert _answer(s).startswith(status), (size, closed)
    assert closed == ["header_too_large", "header_too_large"]



def test_a_request_line_past_max_header_bytes_on_a_new_connection_is_refused_431() -> None:
    """A request line alone past the limit is cut while it is read, before http.server set
    anything of the request: the 431 then failed on the request line it logs (a traceback,
    the connection closed without a word)."""
    closed: list[str] = []
    line = b"GET /" + b"a" * (LIMITS.max_header_bytes + 10_000) + b" HTTP/1.1\r\n\r\n"
    with (_server(lambda _req: Response(200, b"{}"), lambda: 0.0, closed) as port,
          socket.create_connection(("127.0.0.1", port), timeout=30) as s):
        s.sendall(line)
        answer = b""
        while piece := s.recv(65536):
            answer += piece
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    assert answer.endswith(b'{"error": "request headers exceed 4096 bytes"}'), answer
    assert closed == ["header_too_large"]
