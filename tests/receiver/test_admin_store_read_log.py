"""A store that cannot answer (down, out of connections) made every admin read a 503 and a
warning: a dashboard polling the API, or a load balancer's checks of a page, wrote a line per
request for as long as the store was down. Every read still answers 503; the log says one,
then, after ``STORE_READ_LOG_INTERVAL_S``, how many it left out meanwhile."""

from __future__ import annotations

import email.message
import logging
import sqlite3

import pytest
from prometheus_client import CollectorRegistry
from support.clock import ManualClock

from otel_eval.app.admin import STORE_READ_LOG_INTERVAL_S, AdminApi, make_handler
from otel_eval.receive.httpmessage import Request


def _down(_trace_id: str) -> None:
    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorname = "SQLITE_IOERR"  # type: ignore[attr-defined]
    raise error


def _get(path: str) -> Request:
    headers = email.message.Message()
    headers["Host"] = "localhost"
    return Request("GET", path, "", headers, "127.0.0.1", lambda _limit: b"")


def test_reads_of_a_store_that_is_down_are_one_line_then_a_count(
        caplog: pytest.LogCaptureFixture) -> None:
    api = AdminApi(CollectorRegistry(), lambda q: None,  # type: ignore[arg-type,return-value]
                   _down, lambda t, o: None, lambda: True, lambda: True)
    clock = ManualClock()
    handle = make_handler(api, clock=clock)
    with caplog.at_level(logging.WARNING, logger="otel_eval.app.admin"):
        statuses = [handle(_get(f"/v1/evaluations/{n + 1:032x}")).status for n in range(20)]
        clock.advance(STORE_READ_LOG_INTERVAL_S)
        statuses.append(handle(_get(f"/v1/evaluations/{21:032x}")).status)
    assert statuses == [503] * 21
    lines = [r.getMessage() for r in caplog.records if "store read" in r.getMessage()]
    assert len(lines) == 2, lines
    assert lines[0].endswith("(unavailable: OperationalError)"), lines
    assert lines[1].endswith("(unavailable: OperationalError) (19 more failed store reads "
                             "not logged since the last)"), lines
