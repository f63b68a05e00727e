"""Fields of a newer OTLP pass through (``decode.otlp``): a ResourceSpans or ScopeSpans field
this protobuf does not know is kept in the span's origin and written back as it came, on the
plain path and on the UTF-8 salvage path. Before, the headers were rebuilt from the known
fields only, and a newer sender's fields at those levels were dropped from every forwarded
span. The spans of a pre-1.0 exporter's ``instrumentation_library_spans`` (field 1000) are
counted as rejected, never copied into each scope's header."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2
from support.harness import running_service

from otel_eval.decode.encode import encode_spans
from otel_eval.decode.otlp import decode_request, parse_request
from otel_eval.receive.kafka.publisher import split_by_trace

TID = bytes(range(1, 17))
# field 40 as a string, 41 a varint, 42 fixed64, 43 fixed32 (tag bytes: number << 3 | wire type)
NEWER = (b"\xc2\x02\x05newer" + b"\xc8\x02\x96\x01" + b"\xd1\x02" + bytes(range(8))
         + b"\xdd\x02" + b"\x01\x02\x03\x04")
OLD_SPANS = 1000  # ResourceSpans.instrumentation_library_spans before OTLP 0.19


def _span(sid: int, name: str) -> trace_pb2.Span:
    return trace_pb2.Span(trace_id=TID, span_id=bytes([sid]) * 8, name=name,
                          start_time_unix_nano=1, end_time_unix_nano=2)


def _unknown(msg: Any) -> list[tuple[int, int, Any]]:
    fields = UnknownFieldSet(msg)
    return [(fields[i].field_number, fields[i].wire_type, fields[i].data)
            for i in range(len(fields))]


def _body(*names: str, old: bytes = b"") -> bytes:
    """One resource with two scopes, each header followed by NEWER's fields."""
    scopes = b""
    for i, name in enumerate(names):
        ss = trace_pb2.ScopeSpans(scope=InstrumentationScope(name=f"scope{i}"),
                                  schema_url="https://example.com/s",
                                  spans=[_span(i + 1, name)]).SerializeToString() + NEWER
        scopes += b"\x12" + _len(len(ss)) + ss  # ResourceSpans.scope_spans (2)
    rs = trace_pb2.ResourceSpans(
        resource=Resource(attributes=[KeyValue(key="service.name",
                                               value=AnyValue(string_value="svc"))]),
        schema_url="https://opentelemetry.io/schemas/1.37.0").SerializeToString()
    rs += scopes + NEWER + old
    return b"\x0a" + _len(len(rs)) + rs  # ExportTraceServiceRequest.resource_spans (1)


def _len(n: int) -> bytes:
    assert n < 1 << 14
    return bytes([n & 0x7F | 0x80, n >> 7]) if n > 0x7F else bytes([n])


def _forwarded(body: bytes) -> tuple[ExportTraceServiceRequest, dict[str, int]]:
    req, bad = parse_request(body)
    decoded = decode_request(req)
    return encode_spans(decoded.spans), {**bad, **decoded.reasons}


def test_newer_fields_of_resource_and_scope_are_forwarded_as_received() -> None:
    sent = ExportTraceServiceRequest.FromString(_body("a", "b"))
    out, rejected = _forwarded(_body("a", "b"))
    assert rejected == {}
    assert _unknown(sent.resource_spans[0]) and _unknown(sent.resource_spans[0].scope_spans[0])
    [rs] = out.resource_spans
    assert _unknown(rs) == _unknown(sent.resource_spans[0])
    assert [_unknown(ss) for ss in rs.scope_spans] == [
        _unknown(ss) for ss in sent.resource_spans[0].scope_spans]
    assert out == sent  # and every known field as it came


def test_the_utf8_salvage_keeps_them_too() -> None:
    out, rejected = _forwarded(_body("good", "BADX").replace(b"BADX", b"BA\xff\xfe"))
    assert rejected == {"invalid_utf8": 1}
    [rs] = out.resource_spans
    [ss] = rs.scope_spans
    assert [s.name for s in ss.spans] == ["good"]
    sent = ExportTraceServiceRequest.FromString(_body("good", "x"))
    assert _unknown(rs) == _unknown(sent.resource_spans[0])
    assert _unknown(ss) == _unknown(sent.resource_spans[0].scope_spans[0])


def test_spans_in_the_pre_1_0_field_are_counted_not_copied_into_each_header() -> None:
    old = trace_pb2.ScopeSpans(spans=[_span(7, "old"), _span(8, "old")]).SerializeToString()
    entry = b"\xc2\x3e" + bytes([len(old)]) + old  # field 1000, length-delimited
    assert entry[:2] == bytes([(OLD_SPANS << 3 | 2) & 0x7F | 0x80, (OLD_SPANS << 3 | 2) >> 7])
    out, rejected = _forwarded(_body("a", "b", old=entry))
    assert rejected == {"instrumentation_library_spans": 2}
    [rs] = out.resource_spans
    assert [n for n, _, _ in _unknown(rs)] == [40, 41, 42, 43]
    assert [s.name for ss in rs.scope_spans for s in ss.spans] == ["a", "b"]


def test_a_request_split_by_trace_for_kafka_keeps_them() -> None:
    """``--kafka-publish`` writes one record per trace: each part's headers are the
    received ones whole (they were rebuilt from resource, scope and schema URL only, and a
    newer OTLP's fields were lost between the front end and the workers)."""
    sent = ExportTraceServiceRequest.FromString(_body("a", "b"))
    sent.resource_spans[0].scope_spans[1].spans[0].trace_id = bytes(range(2, 18))
    parts = split_by_trace(ExportTraceServiceRequest.FromString(sent.SerializeToString()))
    assert [tid for tid, _ in parts] == [TID.hex(), bytes(range(2, 18)).hex()]
    for (_, part), ss_sent in zip(parts, sent.resource_spans[0].scope_spans, strict=True):
        [rs] = part.resource_spans
        [ss] = rs.scope_spans
        assert _unknown(rs) == _unknown(sent.resource_spans[0]) != []
        assert _unknown(ss) == _unknown(ss_sent) != []
        assert ss == ss_sent and rs.resource == sent.resource_spans[0].resource


def _json_span(sid: int, name: str) -> dict[str, Any]:
    return {"traceId": TID.hex(), "spanId": f"{sid:016x}", "name": name,
            "startTimeUnixNano": "1", "endTimeUnixNano": "2"}


def test_spans_in_the_pre_1_0_json_key_are_counted_as_the_protobuf_ones_are(
        tmp_path: Path) -> None:
    """OTLP/JSON's ``instrumentationLibrarySpans`` (OTLP 0.x) is a key the parser ignores:
    its spans were dropped unseen (received 1, rejected 0, an answer of full success), where
    the same request in protobuf counts them rejected: the span invariant and
    OtelEvalIngestDrops never saw them."""
    body = {"resourceSpans": [{
        "scopeSpans": [{"spans": [_json_span(1, "new")]}],
        "instrumentationLibrarySpans": [{"instrumentationLibrary": {"name": "old"},
                                         "spans": [_json_span(2, "old"),
                                                   _json_span(3, "old")]}]}]}
    with running_service(tmp_path) as h:
        assert h.svc.http is not None
        conn = http.client.HTTPConnection("127.0.0.1", h.svc.http.port, timeout=10)
        try:
            conn.request("POST", "/v1/traces", json.dumps(body),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            answer = json.loads(resp.read())
        finally:
            conn.close()
        assert resp.status == 200
        assert answer["partialSuccess"]["rejectedSpans"] == "2"
        assert h.sample("otel_eval_receiver_spans_received_total", protocol="http") == 3
        assert h.sample("otel_eval_receiver_spans_accepted_total", protocol="http") == 1
        assert h.sample("otel_eval_receiver_spans_rejected_total", protocol="http",
                        reason="instrumentation_library_spans") == 2
