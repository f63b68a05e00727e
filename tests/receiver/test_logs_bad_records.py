"""A logs request with invalid UTF-8 in some records keeps the others, as a traces request
keeps its other spans: those records are dropped and counted (``invalid_utf8``), the request
is a partial success. Before, protobuf's refusal of the whole body made it a 400 and every
GenAI event in it was lost, over HTTP and gRPC alike."""

from __future__ import annotations

import http.client
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as ls
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from support.harness import Harness, running_service

from otel_eval.decode.otlp_logs import decode_logs, parse_logs_request
from otel_eval.receive.ingest import decode_logs as ingest_decode_logs

TID, SID = bytes(range(1, 17)), bytes(range(1, 9))
LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


def _record(text: str) -> logs_pb2.LogRecord:
    return logs_pb2.LogRecord(trace_id=TID, span_id=SID, time_unix_nano=5,
                              event_name="gen_ai.user.message",
                              body=AnyValue(string_value=text))


def _request() -> ls.ExportLogsServiceRequest:
    return ls.ExportLogsServiceRequest(resource_logs=[logs_pb2.ResourceLogs(
        resource=Resource(attributes=[KeyValue(key="service.name",
                                               value=AnyValue(string_value="svc"))]),
        schema_url="https://opentelemetry.io/schemas/1.36.0",
        scope_logs=[logs_pb2.ScopeLogs(scope=InstrumentationScope(name="openai-v2"),
                                       schema_url="https://opentelemetry.io/schemas/1.37.0",
                                       log_records=[_record("kept one"), _record("BADX"),
                                                    _record("kept two")])])])


def _bad_body() -> bytes:
    return _request().SerializeToString().replace(b"BADX", b"BA\xff\xfe")


def test_the_records_left_keep_their_resource_and_scope_as_received() -> None:
    req, bad = parse_logs_request(_bad_body())
    assert bad == {"invalid_utf8": 1}
    want = _request()
    del want.resource_logs[0].scope_logs[0].log_records[1]
    assert req == want
    assert [r.body for r in decode_logs(req).records] == ["kept one", "kept two"]


def test_a_body_that_is_no_logs_request_is_still_refused() -> None:
    with pytest.raises(ValueError, match="ExportLogsServiceRequest"):
        parse_logs_request(b"\xff\xff\xff")


def test_ingest_counts_the_dropped_record_with_the_others() -> None:
    decoded = ingest_decode_logs(_bad_body())
    assert len(decoded.items) == 2
    assert decoded.rejected == {"invalid_utf8": 1}


def _post(h: Harness, body: bytes) -> tuple[int, bytes]:
    assert h.svc.http is not None
    conn = http.client.HTTPConnection("127.0.0.1", h.svc.http.port, timeout=10)
    try:
        conn.request("POST", "/v1/logs", body, {"Content-Type": "application/x-protobuf"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_request_with_one_bad_record_is_a_partial_success(tmp_path: Path,
                                                           protocol: str) -> None:
    with running_service(tmp_path) as h:
        if protocol == "http":
            status, raw = _post(h, _bad_body())
            assert status == 200, raw
        else:
            with grpc.insecure_channel(h.grpc_target) as ch:
                raw = ch.unary_unary(LOGS_EXPORT)(_bad_body(), timeout=10)
        resp = ls.ExportLogsServiceResponse.FromString(raw)
        assert resp.partial_success.rejected_log_records == 1
        assert "invalid_utf8" in resp.partial_success.error_message
        assert h.sample("otel_eval_receiver_log_records_accepted_total", protocol=protocol) == 2
        assert h.sample("otel_eval_receiver_log_records_rejected_total", protocol=protocol,
                        reason="invalid_utf8") == 1
        assert h.sample("otel_eval_assembly_pending_log_records") == 2
