"""Bad spans dropped with a reason, the rest kept as received (``decode.otlp``).

Invalid UTF-8 in some spans: ``parse_request`` drops those (``invalid_utf8``) and keeps the
rest with their resource and scope whole (``schema_url`` of both levels included: the salvage
dropped the scope's, so a forwarded span lost it). A link id that is not hex in OTLP/JSON:
its span is rejected (``invalid_link_id``), not forwarded with the id changed. A time that is
no uint64 in OTLP/JSON: its span or log record is rejected (``invalid_timestamp``), the rest
of the request kept."""

from __future__ import annotations

import json

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_eval.decode.otlp import decode_request, parse_request
from otel_eval.decode.otlp_json import request_from_json
from otel_eval.decode.otlp_logs import decode_logs, logs_request_from_json

TID = bytes(range(1, 17))


def _span(sid: int, name: str) -> trace_pb2.Span:
    return trace_pb2.Span(trace_id=TID, span_id=bytes([sid]) * 8, name=name,
                          start_time_unix_nano=1, end_time_unix_nano=2)


def _request(scope_url: str = "https://opentelemetry.io/schemas/1.37.0"
             ) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
        resource=Resource(attributes=[KeyValue(key="service.name",
                                               value=AnyValue(string_value="svc"))]),
        schema_url="https://opentelemetry.io/schemas/1.36.0",
        scope_spans=[
            trace_pb2.ScopeSpans(scope=InstrumentationScope(name="a", version="1"),
                                 schema_url=scope_url, spans=[_span(1, "good"), _span(2, "BADX")]),
            trace_pb2.ScopeSpans(scope=InstrumentationScope(name="b"),
                                 schema_url="https://example.com/s", spans=[_span(3, "ok")])])])


def test_the_spans_left_keep_their_resource_and_scope_as_received() -> None:
    body = _request().SerializeToString().replace(b"BADX", b"BA\xff\xfe")
    req, bad = parse_request(body)
    assert bad == {"invalid_utf8": 1}
    want = _request()
    del want.resource_spans[0].scope_spans[0].spans[1]
    assert req == want


def test_a_scope_whose_schema_url_is_not_utf8_drops_its_spans_only() -> None:
    body = _request("https://x/SCOPEURL").SerializeToString()
    body = body.replace(b"SCOPEURL", b"SC\xff\xfeEURL")  # the same length: the framing holds
    req, bad = parse_request(body)
    assert bad == {"invalid_utf8": 2}
    [rs] = req.resource_spans
    assert [ss.scope.name for ss in rs.scope_spans] == ["b"]  # no empty scope left behind
    assert [s.name for s in rs.scope_spans[0].spans] == ["ok"]


def test_a_link_whose_id_is_not_hex_rejects_its_span_with_a_reason() -> None:
    """OTLP/JSON: a non-hex id becomes a wrong-length one, so its span is rejected with a
    reason; before, a link's was forwarded as one zero byte and its span accepted."""
    span = {"traceId": TID.hex(), "spanId": "01" * 8, "name": "s", "startTimeUnixNano": "1",
            "endTimeUnixNano": "2"}
    links = [{"traceId": "not-hex-zz", "spanId": "02" * 8, "traceState": "a=1"}]
    good = {**span, "spanId": "03" * 8, "links": [{"traceId": "ab" * 16, "spanId": "02" * 8}]}
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [{**span, "links": links}, good]}]}]}
    decoded = decode_request(request_from_json(json.dumps(body)))
    assert dict(decoded.reasons) == {"invalid_link_id": 1}
    assert [s.span_id for s in decoded.spans] == ["03" * 8]


BAD_TIMES = ["-5", -5, "soon", " 5", 1.5, True, {}, str(2**64), 2**64, "9" * 200_000,
             "1e400"]


@pytest.mark.parametrize("bad", BAD_TIMES, ids=repr)
@pytest.mark.parametrize("key", ["startTimeUnixNano", "endTimeUnixNano", "end_time_unix_nano"])
def test_a_time_that_is_no_uint64_rejects_its_span_not_the_request(key: str, bad: object
                                                                   ) -> None:
    """A negative time failed the whole OTLP/JSON request (HTTP 400) where the protobuf path
    rejects the same value (read as fixed64: past int64) as its own span's
    ``invalid_timestamp``, the request's other spans kept."""
    span = {"traceId": TID.hex(), "name": "s", "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    spans = [{**span, "spanId": "01" * 8, key: bad}, {**span, "spanId": "03" * 8}]
    body = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    decoded = decode_request(request_from_json(json.dumps(body)))
    assert dict(decoded.reasons) == {"invalid_timestamp": 1}
    assert [s.span_id for s in decoded.spans] == ["03" * 8]


@pytest.mark.parametrize("bad", ["-5", "soon", str(2**64)], ids=repr)
def test_an_event_time_that_is_no_uint64_rejects_its_span(bad: str) -> None:
    """An event's time that is no uint64 became 2^64-1 and its span was taken: forwarded
    (pass-through), the event carried a time the sender never wrote."""
    span = {"traceId": TID.hex(), "name": "s", "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    spans = [{**span, "spanId": "01" * 8,
              "events": [{"name": "e", "timeUnixNano": "1"}, {"name": "e", "timeUnixNano": bad}]},
             {**span, "spanId": "03" * 8, "events": [{"name": "e", "timeUnixNano": "2"}]}]
    body = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    decoded = decode_request(request_from_json(json.dumps(body)))
    assert dict(decoded.reasons) == {"invalid_timestamp": 1}
    assert [s.span_id for s in decoded.spans] == ["03" * 8]
    assert [e.time_unix_nano for e in decoded.spans[0].events] == [2]


@pytest.mark.parametrize("key", ["timeUnixNano", "observedTimeUnixNano"])
def test_a_log_record_whose_time_is_negative_is_rejected_alone(key: str) -> None:
    record = {"traceId": TID.hex(), "spanId": "01" * 8, "eventName": "gen_ai.user.message",
              "timeUnixNano": "5", "body": {"stringValue": "hi"}}
    records = [{**record, key: "-5"}, record]
    body = {"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}
    decoded = decode_logs(logs_request_from_json(json.dumps(body).encode()))
    assert dict(decoded.rejected) == {"invalid_timestamp": 1}
    assert [r.time_unix_nano for r in decoded.records] == [5]


@pytest.mark.parametrize("good", ["7", 7, "7.0", "7e0", 7.0, None])
def test_the_spellings_of_a_time_protobuf_takes_are_kept(good: object) -> None:
    span = {"traceId": TID.hex(), "spanId": "01" * 8, "name": "s", "startTimeUnixNano": good,
            "endTimeUnixNano": "9"}
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    [got] = decode_request(request_from_json(json.dumps(body))).spans
    assert got.start_ns == (0 if good is None else 7)
