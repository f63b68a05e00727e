"""A TLS client (an ``https://`` OTLP endpoint) at the plain-text OTLP/HTTP port: counted
(``receiver_connections_closed_total{listener="http", reason="tls_client"}``) and said once
as a warning naming the fix, then at debug for its retries, as an HTTP/2 client there is."""

from __future__ import annotations

import logging
import socket
import ssl
from pathlib import Path

import pytest
from support.harness import running_service


def _tls_hello(port: int) -> None:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with (socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
          pytest.raises((ssl.SSLError, OSError))):
        ctx.wrap_socket(raw, server_hostname="localhost")


def test_a_tls_client_at_the_plain_http_port_is_counted_and_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="otel_eval.receive.httpserver")
    with running_service(tmp_path) as h:
        assert h.svc.http is not None
        _tls_hello(h.svc.http.port)
        _tls_hello(h.svc.http.port)
        # the count is made before the answer is written, which the client has read
        assert h.sample("otel_eval_receiver_connections_closed_total", listener="http",
                        reason="tls_client") == 2
    said = [r for r in caplog.records if "TLS client" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG], said
    assert "http://" in said[0].getMessage()
