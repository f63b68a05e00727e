"""Hypothesis strategies for hostile OTLP/HTTP requests (``test_otlp_hostile_input.py``):
traces and GenAI-event logs requests whose every field may be what no SDK writes, encoded as
protobuf or OTLP/JSON, then perhaps damaged on the wire or in the JSON, compressed or not, and
sent with any method, path and content type."""

from __future__ import annotations

import functools
import gzip
import json
import zlib
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

PROTOBUF, JSON = "application/x-protobuf", "application/json"
U64 = 2**64 - 1

# --- the messages --------------------------------------------------------------------------------

TEXT = st.one_of(st.text(max_size=12), st.sampled_from([
    "gen_ai.operation.name", "invoke_agent", "chat", "execute_tool", "gen_ai.tool.name",
    "gen_ai.input.messages", "gen_ai.output.messages", "llm.input_messages.0.message.content",
    "openinference.span.kind", "LLM", "TOOL", "AGENT", "session.id", "service.name", "",
    "gen_ai.client.inference.operation.details", "gen_ai.conversation.id",
    '[{"role": "assistant", "parts": 1}]', '{"a": NaN}', "[" * 300, "\x00", "\ufeff"]),
    st.builds(lambda piece, n: piece * n, st.sampled_from(["a", "é", "\U0001f600", "{"]),
              st.integers(1_000, 20_000)))
SCALARS = st.one_of(
    TEXT.map(lambda s: AnyValue(string_value=s)), st.booleans().map(
        lambda b: AnyValue(bool_value=b)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: AnyValue(int_value=i)),
    st.floats().map(lambda f: AnyValue(double_value=f)),
    st.binary(max_size=40).map(lambda b: AnyValue(bytes_value=b)), st.just(AnyValue()))


def _array(values: list[AnyValue]) -> AnyValue:
    out = AnyValue()
    out.array_value.values.extend(values)
    return out


def _kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
    out = AnyValue()
    out.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in pairs)
    return out


@functools.cache
def _nested(depth: int) -> AnyValue:  # as deep as protobuf builds (upb: 100 levels); shared:
    # never changed, only copied into the messages that hold it
    value = AnyValue(string_value="deep")
    for k in range(depth):
        value = _array([value]) if k % 2 else _kvlist([("k", value)])
    return value


_TREES = st.recursive(
    SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4).map(_array), st.lists(
        st.tuples(TEXT, inner), max_size=4).map(_kvlist)), max_leaves=10)
VALUES = st.one_of(_TREES, _TREES, _TREES, st.sampled_from([10, 28]).map(_nested))


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    n, size = len(payload), b""
    while True:
        size += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return bytes([number << 3 | 2]) + size + payload


def deep_request(depth: int) -> bytes:
    """A traces request, written by hand, whose one span has an attribute ``depth`` levels
    of arrays deep: deeper than protobuf builds or parses (upb stops at 100)."""
    value = _field(1, b"deep")  # AnyValue.string_value
    for _ in range(depth):
        value = _field(5, _field(1, value))  # AnyValue.array_value -> ArrayValue.values
    span = _field(1, b"\x01" * 16) + _field(2, b"\x02" * 8) + _field(5, b"deep") + _field(
        9, _field(1, b"k") + _field(2, value))  # Span.attributes -> KeyValue
    return _field(1, _field(2, _field(2, span)))  # resource_spans.scope_spans.spans


def deep_json(depth: int) -> bytes:
    """The same as OTLP/JSON."""
    value = '{"stringValue": "deep"}'
    for _ in range(depth):
        value = '{"arrayValue": {"values": [' + value + ']}}'
    span = ('{"traceId": "' + "01" * 16 + '", "spanId": "' + "02" * 8 + '", "name": "deep", '
            '"attributes": [{"key": "k", "value": ' + value + '}]}')
    return ('{"resourceSpans": [{"scopeSpans": [{"spans": [' + span + ']}]}]}').encode()
ATTRIBUTES = st.lists(st.tuples(TEXT, VALUES), max_size=6).map(
    lambda pairs: [KeyValue(key=k, value=v) for k, v in pairs])
# What makes a span an agent's (so the run is evaluated, not passed over as no run).
MARKERS = st.sampled_from([
    {}, {}, {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "hostile"},
    {"gen_ai.operation.name": "chat"}, {"gen_ai.operation.name": "execute_tool",
                                        "gen_ai.tool.name": "search"},
    {"openinference.span.kind": "AGENT"}, {"openinference.span.kind": "LLM"},
    {"openinference.span.kind": "TOOL", "tool.name": "search"}]).map(
    lambda marks: [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in marks.items()])
# Mostly ids a span may have (its run is then built and evaluated), some of them shared
# between examples (duplicates, late spans of a run), some of any length or zero.
_ID16 = st.integers(1, 2**128 - 1).map(lambda i: i.to_bytes(16, "big"))
_ID8 = st.integers(1, 2**64 - 1).map(lambda i: i.to_bytes(8, "big"))
TRACE_IDS = st.one_of(_ID16, _ID16, st.sampled_from([b"\x01" * 16, b"\x02" * 16]),
                      st.just(bytes(16)), st.binary(max_size=20))
SPAN_IDS = st.one_of(_ID8, _ID8, _ID8, st.sampled_from([b"\x01" * 8, b"\x02" * 8]),
                     st.just(bytes(8)), st.binary(max_size=12))
TIMES = st.one_of(st.integers(1_700_000_000 * 10**9, 1_700_000_100 * 10**9),
                  st.integers(1_700_000_000 * 10**9, 1_700_000_100 * 10**9),
                  st.integers(0, U64), st.just(0))
OPEN_ENUM = st.one_of(st.integers(0, 6), st.integers(-(2**31), 2**31 - 1))


@st.composite
def spans(draw: st.DrawFn) -> dict[str, Any]:
    """One span as the keyword arguments of ``trace_pb2.Span``."""
    return {
        "trace_id": draw(TRACE_IDS), "span_id": draw(SPAN_IDS), "parent_span_id": draw(
            st.one_of(st.just(b""), SPAN_IDS)), "name": draw(TEXT),
        "trace_state": draw(st.one_of(st.just(""), TEXT)), "kind": draw(OPEN_ENUM),
        "flags": draw(st.integers(0, 2**32 - 1)),
        "start_time_unix_nano": draw(TIMES), "end_time_unix_nano": draw(TIMES),
        "attributes": draw(MARKERS) + draw(ATTRIBUTES),
        "dropped_attributes_count": draw(st.integers(0, 9)),
        "events": [{"name": name, "time_unix_nano": t, "attributes": a} for name, t, a in draw(
            st.lists(st.tuples(TEXT, TIMES, ATTRIBUTES), max_size=2))],
        "links": [{"trace_id": t, "span_id": s, "attributes": a} for t, s, a in draw(
            st.lists(st.tuples(TRACE_IDS, SPAN_IDS, ATTRIBUTES), max_size=1))],
        "status": {"code": draw(OPEN_ENUM), "message": draw(TEXT)},
    }


@st.composite
def trace_requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(0, 3) | st.just(1))):
        rs = req.resource_spans.add()
        rs.resource.attributes.extend(draw(ATTRIBUTES))
        rs.schema_url = draw(st.one_of(st.just(""), TEXT))
        for _ in range(draw(st.integers(0, 2) | st.just(1))):
            ss = rs.scope_spans.add()
            ss.scope.name, ss.scope.version = draw(TEXT), draw(TEXT)
            ss.scope.attributes.extend(draw(ATTRIBUTES))
            for span in draw(st.lists(spans(), min_size=1, max_size=5)):
                ss.spans.add(**span)
    return req


@st.composite
def logs_requests(draw: st.DrawFn) -> ExportLogsServiceRequest:
    req = ExportLogsServiceRequest()
    for _ in range(draw(st.integers(0, 2))):
        rl = req.resource_logs.add()
        rl.resource.attributes.extend(draw(ATTRIBUTES))
        sl = rl.scope_logs.add()
        sl.scope.name = draw(TEXT)
        for _ in range(draw(st.integers(0, 5))):
            sl.log_records.add(
                time_unix_nano=draw(TIMES), observed_time_unix_nano=draw(TIMES),
                severity_number=draw(OPEN_ENUM), severity_text=draw(TEXT),
                event_name=draw(st.one_of(TEXT, st.sampled_from([
                    "gen_ai.user.message", "gen_ai.choice", "gen_ai.tool.message",
                    "gen_ai.client.inference.operation.details"]))),
                body=draw(VALUES), attributes=draw(ATTRIBUTES),
                trace_id=draw(TRACE_IDS), span_id=draw(SPAN_IDS),
                flags=draw(st.integers(0, 2**32 - 1)))
    return req


# --- the bytes on the wire -----------------------------------------------------------------------

@dataclass(frozen=True)
class Body:
    path: str  # /v1/traces or /v1/logs
    content_type: str
    data: bytes  # as sent (perhaps compressed)
    encoding: str  # the Content-Encoding header ("" for none)
    spans: int | None  # spans or log records in it when it is an undamaged request


def _json_of(message: Any) -> bytes:
    return json.dumps(json_format.MessageToDict(message)).encode()  # C encoder: no indent


_SIZES = st.sampled_from([40, 5_000, 200_000])  # a field's characters, past an error's bound
JSON_DAMAGE = st.one_of(  # an OTLP/JSON document with fields of the wrong kind or size
    st.just({"resourceSpans": "x"}), st.just({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "zz", "spanId": 7}]}]}]}),
    st.builds(lambda n, field: {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "00" * 16, "spanId": "01" * 8, field: "9" * n}]}]}]},
        _SIZES, st.sampled_from(["startTimeUnixNano", "kind", "flags",
                                                   "droppedEventsCount", "name"])),
    st.builds(lambda n: {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "00" * 16, "spanId": "01" * 8, "attributes": [{"key": "a", "value": {
            "intValue": "1" * n}}]}]}]}]}, _SIZES),
    st.builds(lambda n: {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "00" * 16, "spanId": "01" * 8, "status": {"code": "E" * n}}]}]}]},
        _SIZES),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=9),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                     st.sampled_from(["resourceSpans", "scopeSpans", "spans", "traceId",
                                      "attributes", "value", "resourceLogs", "logRecords"]),
                     inner, max_size=3), max_leaves=10),
).map(lambda doc: json.dumps(doc).encode())


@st.composite
def damaged(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` truncated, with bytes flipped, or with bytes inserted."""
    if not data:
        return draw(st.binary(max_size=64))
    at = draw(st.integers(0, len(data) - 1))
    how = draw(st.sampled_from(["truncate", "flip", "insert"]))
    if how == "truncate":
        return data[:at]
    if how == "flip":
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
    return data[:at] + draw(st.binary(min_size=1, max_size=16)) + data[at:]


@st.composite
def bodies(draw: st.DrawFn, grpc: bool = False) -> Body:
    """An export body; ``grpc``: as gRPC carries one (protobuf, no HTTP compression)."""
    logs = draw(st.booleans())
    message = draw(logs_requests() if logs else trace_requests())
    count = sum(len(s.log_records) for r in message.resource_logs for s in r.scope_logs) \
        if logs else sum(len(s.spans) for r in message.resource_spans for s in r.scope_spans)
    ctype = PROTOBUF if grpc else draw(st.sampled_from([PROTOBUF, JSON]))
    data = message.SerializeToString() if ctype == PROTOBUF else _json_of(message)
    shape = draw(st.sampled_from(["as_is", "as_is", "damaged", "random", "deep"] + (
        [] if grpc else ["json_damage"])))
    if shape == "deep":
        depth = draw(st.integers(90, 5_000))
        data = deep_request(depth) if ctype == PROTOBUF else deep_json(depth)
        logs, count = False, 1
    elif shape == "damaged":
        data, count = draw(damaged(data)), None
    elif shape == "json_damage":
        data, count, ctype = draw(JSON_DAMAGE), None, JSON
    elif shape == "random":
        data, count = draw(st.binary(max_size=200)), None
    path = "/v1/logs" if logs else "/v1/traces"
    if grpc:
        return Body(path, ctype, data, "", count)
    encoding = draw(st.sampled_from(["", "", "gzip", "deflate", "gzip-truncated", "identity"]))
    if encoding == "gzip":
        data = gzip.compress(data)
    elif encoding == "deflate":
        data = zlib.compress(data)
    elif encoding == "gzip-truncated":
        data, encoding, count = gzip.compress(data)[:-5], "gzip", None
    parameters = draw(st.sampled_from(["", "; charset=utf-8", "; charset=latin-1", ";;"]))
    return Body(path, ctype + parameters, data, encoding, count)


ODD_CONTENT_TYPES = st.sampled_from([
    "", "text/plain", "application/protobuf", "application/x-protobuf+gzip", "*/*",
    "APPLICATION/JSON", "application/json\x00", "multipart/form-data; boundary=x"])
METHODS = st.sampled_from(["POST", "POST", "GET", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH",
                           "post", "BREW"])
PATHS = st.sampled_from(["/v1/traces", "/v1/logs", "/v1/traces/", "/v1/metrics", "/",
                         "/v1/traces?x=1", "//v1/traces", "/v1/TRACES", "/v1/logs%00"])
