"""What the protobuf door takes, the Kafka publisher's OTLP/JSON reads back: the deepest
attribute protobuf decodes (nested kvlists until upb's depth limit refuses) goes through
``publisher.encode(..., "otlp_json")`` and the consumer's decode unchanged. Before, the JSON
depth bound (100) was below what protobuf takes (134 JSON levels): an acknowledged span became
a poison record."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_eval.decode.otlp import MalformedRequest
from otel_eval.receive.ingest import decode_traces
from otel_eval.receive.kafka.publisher import encode, split_by_trace


def _request(levels: int) -> ExportTraceServiceRequest:
    value = AnyValue(string_value="leaf")
    for _ in range(levels):
        value = AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k", value=value)]))
    span = trace_pb2.Span(trace_id=bytes(range(1, 17)), span_id=b"\x01" * 8, name="s",
                          start_time_unix_nano=1, end_time_unix_nano=2,
                          attributes=[KeyValue(key="a", value=value)])
    return ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
        scope_spans=[trace_pb2.ScopeSpans(spans=[span])])])


def _deepest_taken() -> ExportTraceServiceRequest:
    levels = 1
    while True:
        try:
            decode_traces(_request(levels + 1).SerializeToString(), "otlp_proto")
        except MalformedRequest:
            return _request(levels)
        levels += 1


def test_the_deepest_span_protobuf_takes_reads_back_from_kafka_as_otlp_json() -> None:
    req = _deepest_taken()
    [(_, part)] = split_by_trace(req)
    back = decode_traces(encode(part, "otlp_json"), "otlp_json")
    taken = decode_traces(req.SerializeToString(), "otlp_proto")
    assert [s.attributes for s in back.items] == [s.attributes for s in taken.items]
    assert back.rejected == taken.rejected
