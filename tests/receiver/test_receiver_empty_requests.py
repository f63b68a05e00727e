"""An empty trace request (none sent, or every span rejected) is a success whatever the
engine's state, as a logs request already was: OTLP says "If the server receives an empty
request ... the server SHOULD respond with success"; a store that failed, or a stop, made it
a 429 / RESOURCE_EXHAUSTED that the exporter retried."""

from __future__ import annotations

import http.client
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
from support.harness import Harness, running_service

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


def _post(h: Harness, path: str, body: bytes, ctype: str) -> tuple[int, bytes]:
    assert h.svc.http is not None
    conn = http.client.HTTPConnection("127.0.0.1", h.svc.http.port, timeout=10)
    try:
        conn.request("POST", path, body, {"Content-Type": ctype})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize(("body", "ctype"), [(b"", "application/x-protobuf"),
                                             (b"{}", "application/json")],
                         ids=["protobuf", "json"])
def test_empty_trace_request_is_success_while_store_fails_as_logs_is(
        tmp_path: Path, body: bytes, ctype: str) -> None:
    with running_service(tmp_path) as h:
        h.svc.engine.store_health.failed("store_unavailable", "disk full")
        assert _post(h, "/v1/logs", body, ctype)[0] == 200
        assert _post(h, "/v1/traces", body, ctype)[0] == 200


def test_empty_trace_request_over_grpc_is_success_while_store_fails(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        h.svc.engine.store_health.failed("store_unavailable", "disk full")
        with grpc.insecure_channel(h.grpc_target) as ch:
            assert ch.unary_unary(LOGS_EXPORT)(b"", timeout=10) == b""
            resp = ch.unary_unary(EXPORT, response_deserializer=ts.ExportTraceServiceResponse
                                  .FromString)(b"", timeout=10)
            assert not resp.HasField("partial_success")


def test_a_request_whose_every_span_is_rejected_is_a_partial_success(tmp_path: Path) -> None:
    """Every span refused (a span id of 3 bytes): 200 with the rejection, not a 429 to retry
    for ever what will be refused again."""
    req = ts.ExportTraceServiceRequest()
    span = req.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = bytes.fromhex("ab" * 16), b"abc", "s"
    with running_service(tmp_path) as h:
        h.svc.engine.store_health.failed("store_unavailable", "disk full")
        status, body = _post(h, "/v1/traces", req.SerializeToString(),
                             "application/x-protobuf")
        assert status == 200
        assert ts.ExportTraceServiceResponse.FromString(body).partial_success.rejected_spans == 1
