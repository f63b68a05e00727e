"""A handler bug every request hits (answered 500) wrote an ERROR line with a full traceback
per request, and a connection that fails on a bug one per connection: an exporter retrying,
or a load balancer's checks, made a traceback a request. The log says the first with its
traceback, then, after ``BUG_LOG_INTERVAL_S``, a line saying how many it left out meanwhile."""

from __future__ import annotations

import http.client
import logging
import time

import pytest

from otel_eval.base.loglimit import BUG_LOG_INTERVAL_S
from otel_eval.receive.httpmessage import Request, Response
from otel_eval.receive.httpserver import HttpServer


def _buggy(_req: Request) -> Response:
    raise ZeroDivisionError


class _Shifted:
    """Real time (the server's deadlines run on it), moved on by hand."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def _get(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/v1/x")
        return conn.getresponse().status
    finally:
        conn.close()


def _lines(caplog: pytest.LogCaptureFixture, what: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if what in r.getMessage()]


def test_a_handler_bug_on_every_request_is_one_traceback_then_counted_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = _Shifted()
    server = HttpServer("127.0.0.1:0", _buggy, name="test", clock=clock)
    server.start()
    try:
        with caplog.at_level(logging.WARNING):
            statuses = [_get(server.port) for _ in range(20)]
            clock.offset += BUG_LOG_INTERVAL_S
            statuses.append(_get(server.port))
    finally:
        server.shutdown(5)
    assert statuses == [500] * 21
    got = _lines(caplog, "GET /v1/x failed")
    assert len(got) == 2, [r.getMessage() for r in got]
    assert got[0].exc_info and not got[1].exc_info
    assert got[1].getMessage().endswith("(19 more failed requests not logged since the last)")


def test_connections_failing_on_a_bug_are_one_traceback_then_counted_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = _Shifted()
    server = HttpServer("127.0.0.1:0", _buggy, name="test", clock=clock)
    server.bind()
    try:
        listener = server._listeners[0]
        with caplog.at_level(logging.WARNING):
            for n in range(21):
                if n == 20:
                    clock.offset += BUG_LOG_INTERVAL_S
                try:
                    raise ZeroDivisionError
                except ZeroDivisionError:
                    listener.handle_error(None, ("10.0.0.1", 1000 + n))
    finally:
        server.shutdown(5)
    got = _lines(caplog, "connection from 10.0.0.1 failed")
    assert len(got) == 2, [r.getMessage() for r in got]
    assert got[0].exc_info and not got[1].exc_info
    assert got[1].getMessage().endswith("(19 more failed connections not logged since the "
                                        "last)")
