"""An exporter sent to the other OTLP port (issue 30).

- OTLP/gRPC (HTTP/2) at the OTLP/HTTP port: the HTTP server reads the HTTP/2 connection
  preface as a request line of version 2.0; it counts it
  (``receiver_connections_closed_total{listener="http", reason="http2_client"}``) and logs one
  warning naming the fix, then only debug lines for the same exporter's retries.
- OTLP/HTTP (HTTP/1.1) at the OTLP/gRPC port: grpcio's C-core server answers with its HTTP/2
  SETTINGS frame and closes; the mismatch ("Connect string mismatch") shows only in C-core's
  own trace log (GRPC_TRACE=http, debug verbosity), and grpcio gives Python no hook below the
  RPC (interceptors and handlers see RPCs; an accepted socket cannot be handed to it), so
  otel-eval cannot count or log it without relaying every gRPC byte through Python. The test
  pins what the client sees, so a grpcio that changes it is noticed.
- OTLP/HTTP at the admin port: a 404 whose error names the OTLP receivers, logged once.
"""

from __future__ import annotations

import http.client
import logging
import socket
import urllib.request
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
from support.harness import running_service

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def test_a_grpc_exporter_at_the_http_port_is_counted_and_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="otel_eval.receive.httpserver")
    with running_service(tmp_path) as h:
        assert h.svc.http is not None
        with grpc.insecure_channel(f"127.0.0.1:{h.svc.http.port}") as ch:
            call = ch.unary_unary(EXPORT, request_serializer=None,
                                  response_deserializer=ts.ExportTraceServiceResponse.FromString)
            with pytest.raises(grpc.RpcError):
                call(b"", timeout=10)
        # its retry, by hand (grpc's own retry may stay in its connection back-off): the
        # preface, then the answer read to the close, which the server writes after counting
        with socket.create_connection(("127.0.0.1", h.svc.http.port), timeout=10) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
        assert b"505" in answer  # (http.server writes no status line to a 2.0 request line)
        assert h.sample("otel_eval_receiver_connections_closed_total", listener="http",
                        reason="http2_client") == 2
    said = [r for r in caplog.records if "HTTP/2 client" in r.getMessage()]
    assert [r.levelno for r in said][:1] == [logging.WARNING]
    assert sum(r.levelno == logging.WARNING for r in said) == 1, said
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in said[0].getMessage()


def test_an_http_exporter_at_the_grpc_port_gets_no_http_answer(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        assert h.svc.grpc is not None
        with socket.create_connection(("127.0.0.1", h.svc.grpc.port), timeout=10) as s:
            s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n")
            first = s.recv(9)
        # an HTTP/2 frame header (a SETTINGS frame, type 4), not "HTTP/1.1 ..."
        assert len(first) == 9 and first[3] == 4 and not first.startswith(b"HTTP/")
        req = urllib.request.Request(f"http://127.0.0.1:{h.svc.grpc.port}/v1/traces", data=b"",
                                     headers={"Content-Type": "application/x-protobuf"})
        with pytest.raises((OSError, http.client.HTTPException)):  # BadStatusLine
            urllib.request.urlopen(req, timeout=10).close()


def test_an_http_exporter_at_the_admin_port_is_told_where_otlp_goes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """OTLP/HTTP sent to the admin port (8888, the other port the README names): a 404 whose
    error names the OTLP receivers, and one warning in serve's log saying the same, then only
    debug lines for the exporter's retries (a 404 "unknown path" named no fix)."""
    caplog.set_level(logging.DEBUG, logger="otel_eval.app.admin")
    request = ts.ExportTraceServiceRequest().SerializeToString()
    with running_service(tmp_path) as h:
        for path in ("/v1/traces", "/v1/logs", "/v1/traces"):
            conn = http.client.HTTPConnection("127.0.0.1", h.svc.admin.port, timeout=10)
            try:
                conn.request("POST", path, request,
                             {"Content-Type": "application/x-protobuf"})
                resp = conn.getresponse()
                status, body = resp.status, resp.read()
            finally:
                conn.close()
            assert status == 404
            assert "receiver.http_endpoint" in body.decode() and "4318" in body.decode()
    said = [r for r in caplog.records if "admin port" in r.getMessage()]
    assert len(said) == 3 and sum(r.levelno == logging.WARNING for r in said) <= 1, said
    assert "receiver.http_endpoint" in said[0].getMessage()
