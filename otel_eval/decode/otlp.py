"""Stage: decode. OTLP trace requests (protobuf or OTLP/JSON) -> ``model.Span``; and back.

Promises:
- every span is either returned or counted as rejected with a reason from ``REJECT_REASONS``
  (a time past int64 nanoseconds or a span longer than a year: ``invalid_timestamp``);
- only ids, names, times and status are read eagerly; attributes and events are decoded on
  first access (``Span.attributes``), so the receive path stays close to protobuf-decode speed
  and bulky message text stays a raw string;
- a decoded span holds its own copy of its attributes and events, never the request: the
  request's memory is released once decoded, whatever spans of it were accepted or rejected;
- a decoded span keeps the bytes it came in (``Span.wire``, ``Span.origin``): ``encode_spans``
  writes them back as they came, so forwarding and spooling lose no field the model does not
  hold (trace_state, flags, links, dropped counts, schema URLs, scope version, bytes values);
- OTLP/JSON uses hex trace/span ids (not base64) and accepts camelCase and snake_case keys.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_eval.base.model import Origin, Span, SpanEvent
from otel_eval.decode.body import loads_bounded

# Closed set of reasons a span is rejected at decode time.
REJECT_REASONS = ("invalid_trace_id", "invalid_span_id", "invalid_parent_span_id",
                  "invalid_timestamp")
# Span times must fit int64 nanoseconds (until 2262, as every store and backend holds them)...
MAX_TIME_NS = 2**63 - 1
# ...and a span last at most a year: one ending at 2^64-1 ns would add centuries to the
# trace's duration (its histogram, its budget) instead of being refused.
MAX_SPAN_DURATION_NS = 366 * 86400 * 10**9

_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer",
          5: "consumer"}
_STATUS = {0: "unset", 1: "ok", 2: "error"}
_STATUS_CODE = {v: k for k, v in _STATUS.items()}
_KIND_CODE = {v: k for k, v in _KINDS.items()}
_HAS_IS_REMOTE = 0x100  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = 0x200  # SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)


@dataclass
class DecodeResult:
    spans: list[Span] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def rejected(self) -> int:
        return sum(self.reasons.values())

    @property
    def message(self) -> str:
        """The OTLP partial-success error message: empty when nothing was rejected."""
        if not self.reasons:
            return ""
        parts = ", ".join(f"{n} {r}" for r, n in sorted(self.reasons.items()))
        return f"rejected {self.rejected} span(s): {parts}"


def anyvalue_to_python(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [anyvalue_to_python(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: anyvalue_to_python(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode("ascii")
    return getattr(v, which)


def attributes_to_dict(kvs: Iterable[KeyValue]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:  # strings inline: most values are, and a call per value costs ~15 %
        v = kv.value
        # a non-empty string_value is the oneof's value (any other member leaves it ""):
        # no WhichOneof call for it (~13 % of this loop); "" and the rest take the full path
        s = v.string_value
        out[kv.key] = s if s else anyvalue_to_python(v)
    return out


def _materialize(pb: trace_pb2.Span) -> tuple[dict[str, Any], list[SpanEvent]]:
    attrs = attributes_to_dict(pb.attributes)
    events = [SpanEvent(e.name, e.time_unix_nano, attributes_to_dict(e.attributes))
              for e in pb.events] if len(pb.events) else []
    return attrs, events


def _materialize_serialized(data: bytes) -> tuple[dict[str, Any], list[SpanEvent]]:
    return _materialize(trace_pb2.Span.FromString(data))


def _lazy_attrs(pb: trace_pb2.Span) -> tuple[Any, bytes]:
    """(a lazy decoder of attributes and events, the span's bytes): decoded on first access,
    from the span's own bytes, which the span also keeps to be forwarded as received.

    A protobuf sub-message shares its request's arena: holding one span's message keeps the
    whole request alive (one accepted 200-byte span pinned a rejected 4 MB neighbour). The
    span re-serialized (~1 us a span, C) owns its memory, so the request is freed once
    decoded, and the bytes are more compact than the parsed message.
    """
    data = pb.SerializeToString()
    return partial(_materialize_serialized, data), data  # C objects, no closure


def _origin(rs: trace_pb2.ResourceSpans, ss: trace_pb2.ScopeSpans) -> Origin:
    """The resource and scope of ``ss``'s spans as received, without the spans."""
    return Origin(
        trace_pb2.ResourceSpans(resource=rs.resource, schema_url=rs.schema_url)
        .SerializeToString(),
        trace_pb2.ScopeSpans(scope=ss.scope, schema_url=ss.schema_url).SerializeToString())


def _parent_remote(flags: int) -> bool | None:
    """What the OTLP span flags say of the parent: remote, local, or nothing (None)."""
    return bool(flags & _IS_REMOTE) if flags & _HAS_IS_REMOTE else None


def decode_request(req: ExportTraceServiceRequest) -> DecodeResult:
    """Turn a decoded request into spans; invalid spans are counted, never raised."""
    out = DecodeResult()
    spans, reasons = out.spans, out.reasons
    for rs in req.resource_spans:
        resource = attributes_to_dict(rs.resource.attributes)
        for ss in rs.scope_spans:
            scope, origin = ss.scope.name, _origin(rs, ss)
            for pb in ss.spans:
                tid, sid, pid = pb.trace_id, pb.span_id, pb.parent_span_id
                if len(tid) != 16 or tid == _ZERO_TRACE:
                    reasons["invalid_trace_id"] += 1
                    continue
                if len(sid) != 8 or sid == _ZERO_SPAN:
                    reasons["invalid_span_id"] += 1
                    continue
                if pid and len(pid) != 8:
                    reasons["invalid_parent_span_id"] += 1
                    continue
                start, end = pb.start_time_unix_nano, pb.end_time_unix_nano
                if start > MAX_TIME_NS or end > MAX_TIME_NS or (
                        end - start > MAX_SPAN_DURATION_NS):
                    reasons["invalid_timestamp"] += 1
                    continue
                lazy, wire = _lazy_attrs(pb)
                spans.append(Span(
                    tid.hex(), sid.hex(), pid.hex() if pid and pid != _ZERO_SPAN else None,
                    pb.name, start, end,
                    kind=_KINDS.get(pb.kind, "unspecified"),
                    status=_STATUS.get(pb.status.code, "unset"),
                    status_message=pb.status.message,
                    resource=resource, scope=scope, lazy=lazy, nbytes=len(wire),
                    parent_remote=_parent_remote(pb.flags), wire=wire, origin=origin,
                ))
    return out


# --- OTLP/JSON -------------------------------------------------------------------------------

_ID_KEYS = {"traceId": 16, "spanId": 8, "parentSpanId": 8,
            "trace_id": 16, "span_id": 8, "parent_span_id": 8}


def _hex_ids_to_base64(obj: Any) -> Any:
    """OTLP/JSON carries ids as hex; protobuf's JSON parser expects base64 for bytes fields.
    Returns a converted copy.

    Ids that are not hex become one zero byte (a wrong length on purpose), so that the span is
    rejected with a reason by ``decode_request`` instead of failing the whole request.
    """
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in _ID_KEYS and isinstance(v, str):
                try:
                    raw = bytes.fromhex(v)
                except ValueError:
                    raw = b"\x00"
                out[k] = base64.b64encode(raw).decode("ascii")
            else:
                out[k] = _hex_ids_to_base64(v) if isinstance(v, dict | list) else v
        return out
    if isinstance(obj, list):
        return [_hex_ids_to_base64(v) if isinstance(v, dict | list) else v for v in obj]
    return obj


def request_from_json(body: bytes | str) -> ExportTraceServiceRequest:
    """Parse an OTLP/JSON ExportTraceServiceRequest. Raises ValueError with a clear message."""
    return request_from_dict(loads_bounded(body))


def request_from_dict(data: Any) -> ExportTraceServiceRequest:
    return message_from_dict(data, ExportTraceServiceRequest(), "resourceSpans")


_M = TypeVar("_M", bound=Message)


def message_from_dict(data: Any, message: _M, top_key: str) -> _M:
    """OTLP/JSON (hex ids) parsed into ``message`` (a trace or logs Export request).
    Raises ValueError with a clear message, whatever the content."""
    name = type(message).__name__
    if not isinstance(data, dict):
        raise ValueError(f"OTLP/JSON body must be an object with {top_key}")
    try:
        json_format.ParseDict(_hex_ids_to_base64(data), message, ignore_unknown_fields=True)
    except json_format.ParseError as e:
        raise ValueError(f"not an OTLP {name}: {e}") from e
    except (SystemError, OverflowError, UnicodeError, TypeError, RecursionError) as e:
        # what ParseDict raises instead of ParseError for a lone surrogate in a key
        # (SystemError from upb), Infinity in an enum/integer field (OverflowError), ...
        raise ValueError(f"not an OTLP {name}: {type(e).__name__}: {e}") from e
    return message


def request_to_json(req: Message) -> dict[str, Any]:
    """Protobuf (a trace or logs Export request) -> OTLP/JSON dict with hex ids (the inverse
    of ``request_from_dict`` / ``message_from_dict``)."""
    data = json_format.MessageToDict(req)

    def fix(obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k in _ID_KEYS and isinstance(v, str):
                    obj[k] = base64.b64decode(v).hex()
                else:
                    fix(v)
        elif isinstance(obj, list):
            for v in obj:
                fix(v)

    fix(data)
    return data


# --- encoding model.Span -> protobuf ----------------------------------------------------------

def python_to_anyvalue(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, list | tuple):
        return AnyValue(array_value=ArrayValue(values=[python_to_anyvalue(v) for v in value]))
    if isinstance(value, dict):
        return AnyValue(kvlist_value=KeyValueList(values=dict_to_attributes(value)))
    if value is None:
        return AnyValue()
    return AnyValue(string_value=str(value))


def dict_to_attributes(attrs: Any) -> list[KeyValue]:
    return [KeyValue(key=k, value=python_to_anyvalue(v)) for k, v in attrs.items()]


def span_to_proto(span: Span, extra_attributes: dict[str, Any] | None = None) -> trace_pb2.Span:
    attrs = dict(span.attributes)
    if extra_attributes:
        attrs.update(extra_attributes)
    pb = trace_pb2.Span(
        trace_id=bytes.fromhex(span.trace_id), span_id=bytes.fromhex(span.span_id),
        parent_span_id=bytes.fromhex(span.parent_span_id) if span.parent_span_id else b"",
        name=span.name, kind=_KIND_CODE.get(span.kind, 0),  # type: ignore[arg-type]
        start_time_unix_nano=span.start_ns, end_time_unix_nano=span.end_ns,
        attributes=dict_to_attributes(attrs),
        events=[trace_pb2.Span.Event(name=e.name, time_unix_nano=e.time_unix_nano,
                                     attributes=dict_to_attributes(e.attributes))
                for e in span.events],
    )
    if span.parent_remote is not None:
        pb.flags = _HAS_IS_REMOTE | (_IS_REMOTE if span.parent_remote else 0)
    pb.status.code = _STATUS_CODE.get(span.status, 0)  # type: ignore[assignment]
    pb.status.message = span.status_message
    return pb


def encode_spans(spans: Iterable[Span],
                 extra: dict[str, dict[str, Any]] | None = None) -> ExportTraceServiceRequest:
    """Group spans by (resource, scope) into one request; ``extra`` maps span id -> attributes
    to stamp on that span (pass-through mode).

    A decoded span is written back from the bytes it came in (its resource and scope too),
    with only ``extra`` added: every field is as received by construction. A span built here
    (loaders, replays) is encoded from the model."""
    req = ExportTraceServiceRequest()
    resources: dict[Any, trace_pb2.ResourceSpans] = {}
    groups: dict[tuple[Any, Any], trace_pb2.ScopeSpans] = {}
    for span in spans:
        origin = span.origin if span.wire is not None else None
        rkey: Any = origin.resource_spans if origin else id(span.resource)
        skey = (rkey, origin.scope_spans if origin else span.scope)
        rs = resources.get(rkey)
        if rs is None:
            rs = resources[rkey] = req.resource_spans.add()
            if origin:
                rs.ParseFromString(origin.resource_spans)
            else:
                rs.resource.attributes.extend(dict_to_attributes(span.resource))
        ss = groups.get(skey)
        if ss is None:
            ss = groups[skey] = rs.scope_spans.add()
            if origin:
                ss.ParseFromString(origin.scope_spans)
            else:
                ss.scope.name = span.scope
        stamps = (extra or {}).get(span.span_id)
        if span.wire is None:
            ss.spans.append(span_to_proto(span, stamps))
        else:
            _stamp(ss.spans.add(), span.wire, stamps)
    return req


def _stamp(pb: trace_pb2.Span, wire: bytes, attrs: dict[str, Any] | None) -> None:
    """``pb`` = the span as received, with ``attrs`` appended to its attributes (replacing a
    received attribute of the same key: OTLP keys are unique)."""
    pb.ParseFromString(wire)
    if not attrs:
        return
    if any(kv.key in attrs for kv in pb.attributes):
        kept = [kv.SerializeToString() for kv in pb.attributes if kv.key not in attrs]
        del pb.attributes[:]
        for data in kept:
            pb.attributes.add().ParseFromString(data)
    pb.attributes.extend(dict_to_attributes(attrs))


# --- parsing request bytes, salvaging spans around invalid UTF-8 -------------------------------

class MalformedRequest(ValueError):
    """The body is not an ExportTraceServiceRequest at all (nothing can be salvaged)."""


def _lenient_request_class() -> Any:
    """ExportTraceServiceRequest with every string field declared as bytes.

    protobuf refuses a whole message when one string holds invalid UTF-8. Strings and bytes
    share a wire type, so this twin parses such a body; each span is then re-parsed with the
    real schema and only the spans that fail are rejected (reason ``invalid_utf8``).
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.resource.v1 import resource_pb2

    pool = descriptor_pool.DescriptorPool()
    for module in (common_pb2, resource_pb2, trace_pb2, trace_service_pb2):
        fdp = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fdp)
        stack = list(fdp.message_type)
        while stack:
            msg = stack.pop()
            stack.extend(msg.nested_type)
            for f in msg.field:
                if f.type == descriptor_pb2.FieldDescriptorProto.TYPE_STRING:
                    f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
        fdp.ClearField("service")
        pool.Add(fdp)
    desc = pool.FindMessageTypeByName(
        "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest")
    return message_factory.GetMessageClass(desc)


_LENIENT: Any = None


def parse_request(body: bytes) -> tuple[ExportTraceServiceRequest, Counter[str]]:
    """Bytes -> request. Spans with invalid UTF-8 are dropped from it and counted."""
    from google.protobuf.message import DecodeError

    try:
        return ExportTraceServiceRequest.FromString(body), Counter()
    except DecodeError as first:
        global _LENIENT
        if _LENIENT is None:
            _LENIENT = _lenient_request_class()
        try:
            lenient = _LENIENT.FromString(body)
        except DecodeError:
            raise MalformedRequest(f"not a valid ExportTraceServiceRequest: {first}") from None
    return _salvage(lenient)


def _salvage(lenient: Any) -> tuple[ExportTraceServiceRequest, Counter[str]]:
    from google.protobuf.message import DecodeError

    req, bad = ExportTraceServiceRequest(), Counter[str]()
    for lrs in lenient.resource_spans:
        n_spans = sum(len(ss.spans) for ss in lrs.scope_spans)
        rs = req.resource_spans.add()
        try:
            rs.resource.ParseFromString(lrs.resource.SerializeToString())
            rs.schema_url = lrs.schema_url.decode("utf-8")
        except (DecodeError, UnicodeDecodeError):
            bad["invalid_utf8"] += n_spans
            del req.resource_spans[-1]
            continue
        for lss in lrs.scope_spans:
            ss = rs.scope_spans.add()
            try:
                ss.scope.ParseFromString(lss.scope.SerializeToString())
            except DecodeError:
                bad["invalid_utf8"] += len(lss.spans)
                continue
            for lspan in lss.spans:
                try:
                    ss.spans.add().ParseFromString(lspan.SerializeToString())
                except DecodeError:
                    del ss.spans[-1]
                    bad["invalid_utf8"] += 1
    return req, bad
