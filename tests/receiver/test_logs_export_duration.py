"""``receiver_export_duration_seconds`` is "time to handle one Export request": a logs Export
request is one too, observed under ``grpc_logs`` / ``http_logs`` (the protocol values of
``requests_throttled``), apart from the trace requests. Before, only trace requests were
observed: a slow logs path (GenAI events) was invisible on the latency panel."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as ls
from opentelemetry.proto.logs.v1 import logs_pb2
from support.harness import running_service

from otel_eval.base.model import Span
from otel_eval.decode import encode

TID, SID = bytes(range(1, 17)), bytes(range(1, 9))
LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
COUNT = "otel_eval_receiver_export_duration_seconds_count"


def _logs() -> bytes:
    record = logs_pb2.LogRecord(trace_id=TID, span_id=SID, time_unix_nano=5,
                                event_name="gen_ai.user.message")
    return ls.ExportLogsServiceRequest(resource_logs=[logs_pb2.ResourceLogs(
        scope_logs=[logs_pb2.ScopeLogs(log_records=[record])])]).SerializeToString()


def _post(port: int, body: bytes, content_type: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/v1/logs", body, {"Content-Type": content_type})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_logs_export_requests_are_timed_apart_from_trace_requests(tmp_path: Path) -> None:
    json_body = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [{
        "timeUnixNano": "5", "eventName": "gen_ai.user.message", "traceId": TID.hex(),
        "spanId": SID.hex()}]}]}]}).encode()
    spans = encode.encode_spans([Span(TID.hex(), "2" * 16, None, "root", 1, 2)])
    with running_service(tmp_path) as h:
        assert h.svc.http is not None
        with grpc.insecure_channel(h.grpc_target) as ch:
            ch.unary_unary(LOGS_EXPORT)(_logs(), timeout=10)
            ch.unary_unary(EXPORT)(spans.SerializeToString(), timeout=10)
        assert _post(h.svc.http.port, _logs(), "application/x-protobuf") == 200
        assert _post(h.svc.http.port, json_body, "application/json") == 200
        assert [h.sample(COUNT, protocol=p) for p in ("grpc_logs", "http_logs", "grpc", "http")
                ] == [1, 2, 1, 0]
