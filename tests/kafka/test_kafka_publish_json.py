"""What ``serve --kafka-publish`` writes as OTLP/JSON is OTLP/JSON as the spec and the
collector's kafka exporter write it: enum fields as integers (OTLP/JSON prohibits enum value
names, specification PR 2758), ids as hex, and it reads back equal. Before, protobuf's JSON
printer's default wrote ``"kind": "SPAN_KIND_CLIENT"`` and ``"code": "STATUS_CODE_ERROR"``
(and severity names for log records), which a consumer following the spec refuses."""

from __future__ import annotations

import json

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_eval.decode.otlp_logs import HeldRecord
from otel_eval.receive.ingest import decode_traces
from otel_eval.receive.kafka.publisher import encode, encode_logs_by_trace, split_by_trace

TRACE, SPAN = bytes(range(1, 17)), bytes(range(1, 9))


def test_published_otlp_json_spans_carry_enums_as_integers() -> None:
    span = trace_pb2.Span(
        trace_id=TRACE, span_id=SPAN, name="chat", kind=trace_pb2.Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=1, end_time_unix_nano=2,
        status=trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_ERROR, message="boom"))
    req = ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
        scope_spans=[trace_pb2.ScopeSpans(spans=[span])])])
    [(_, sub)] = split_by_trace(req)
    value = encode(sub, "otlp_json")
    [out] = json.loads(value)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert (out["kind"], out["status"]["code"]) == (3, 2)
    assert (out["traceId"], out["spanId"]) == (TRACE.hex(), SPAN.hex())
    [back] = decode_traces(value, "otlp_json").items
    assert back.wire == span.SerializeToString()


def test_published_otlp_json_log_records_carry_severity_as_an_integer() -> None:
    record = logs_pb2.LogRecord(
        time_unix_nano=5, severity_number=logs_pb2.SEVERITY_NUMBER_WARN, severity_text="WARN",
        event_name="gen_ai.choice", trace_id=TRACE, span_id=SPAN)
    held = HeldRecord(TRACE.hex(), SPAN.hex(), "gen_ai.choice", 5, record.SerializeToString())
    [(_, value)] = encode_logs_by_trace([held], "otlp_json")
    [out] = json.loads(value)["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    assert out["severityNumber"] == 13
