"""``localhost`` listens on both loopback families on every listener (issue 30).

Before, the OTLP/HTTP and admin listeners bound 127.0.0.1 only while gRPC (C-core) also bound
::1, so a client that resolves ``localhost`` to ::1 first (as many systems do) reached gRPC
and failed on HTTP. Now the shared HTTP server binds 127.0.0.1 and ::1 on one port for
``localhost``. Real servers on port 0; each listener is asked on each address.
"""

from __future__ import annotations

import socket
import threading
import urllib.request
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
from support.harness import running_service

from otel_eval.receive.config import HttpLimits
from otel_eval.receive.httpmessage import Request, Response
from otel_eval.receive.httpserver import HttpServer

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _ipv6_loopback(), reason="this host has no ::1")
HOSTS = ("127.0.0.1", "[::1]")


def test_every_listener_on_localhost_answers_on_both_families(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"receiver.grpc_endpoint": "localhost:0",
                                      "receiver.http_endpoint": "localhost:0",
                                      "admin.endpoint": "localhost:0"}) as h:
        assert h.svc.http is not None and h.svc.grpc is not None
        for host in HOSTS:
            with urllib.request.urlopen(f"http://{host}:{h.svc.admin.port}/healthz",
                                        timeout=10) as r:
                assert r.status == 200, host
            req = urllib.request.Request(
                f"http://{host}:{h.svc.http.port}/v1/traces", data=b"", method="POST",
                headers={"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200, host
            with grpc.insecure_channel(f"{host}:{h.svc.grpc.port}") as ch:
                call = ch.unary_unary(EXPORT, request_serializer=None,
                                      response_deserializer=ts.ExportTraceServiceResponse.FromString)
                assert call(b"", timeout=10) is not None, host


def _ok(request: Request) -> Response:
    return Response(200, b"ok", "text/plain")


def test_one_set_of_slots_for_both_addresses() -> None:
    """The connection limits hold for the endpoint, not per address: a connection held on
    ::1 counts against the one limit on 127.0.0.1."""
    server = HttpServer("localhost:0", _ok, name="test",
                        limits=HttpLimits(max_connections=1, reserved_connections=0))
    server.start()
    try:
        with socket.create_connection(("::1", server.port), timeout=10) as held:
            held.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert held.recv(1024).startswith(b"HTTP/1.1 200")  # kept alive: holds the slot
            assert server.connections == 1
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as second:
                second.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                assert second.recv(1024).startswith(b"HTTP/1.1 503"), "a second limit"
    finally:
        server.shutdown(5)


def test_an_explicit_address_binds_only_itself() -> None:
    server = HttpServer("127.0.0.1:0", _ok, name="test")
    server.start()
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("::1", server.port), timeout=10).close()
    finally:
        server.shutdown(5)


def test_a_stop_ends_every_accept_loop_at_once_even_one_not_yet_running() -> None:
    """``shutdown`` wakes the accept loops of both addresses together (socketserver's loop
    polled for its stop every 0.5 s, one address after the other) and closes the listeners
    only once the loops are gone: a stop right after the start (a failed start-up) closed a
    listener under a loop that had not registered it yet (a thread's ValueError)."""
    for _ in range(30):
        server = HttpServer("localhost:0", _ok, name="test-stop")
        server.start()
        server.shutdown(0.0)
        for host in ("127.0.0.1", "::1"):
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((host, server.port), timeout=10).close()
        assert not [t for t in threading.enumerate() if t.name == "test-stop"]
