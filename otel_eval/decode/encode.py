"""Stage: decode (the way back). ``model.Span`` -> OTLP protobuf, for forwarding, the spool
and the Kafka publisher; and Python values -> OTLP ``AnyValue``/attributes (traces and logs).

Promises:
- a decoded span (``Span.wire``, ``Span.origin``) is written back from the bytes it came in,
  under its resource and scope as received, so forwarding and spooling lose no field the model
  does not hold (trace_state, flags, links, dropped counts, schema URLs, scope version, bytes
  values); only the attributes stamped on it are added, replacing any of the same key;
- a span built here (loaders, replays) is encoded from the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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

from otel_eval.base.model import Span
from otel_eval.decode.otlp import HAS_IS_REMOTE, IS_REMOTE, SPAN_KINDS, SPAN_STATUSES

_STATUS_CODE = {v: k for k, v in SPAN_STATUSES.items()}
_KIND_CODE = {v: k for k, v in SPAN_KINDS.items()}


def header(message: Any, repeated: str) -> Any:
    """A copy of a resource or scope entry (``ResourceSpans``, ``ScopeLogs``...) without its
    repeated field ``repeated``: every other field as received, unknown ones (a newer
    OTLP's) included. Copying costs the entry's size: take one per entry, not per item."""
    head = type(message)()
    head.CopyFrom(message)
    head.ClearField(repeated)
    return head


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
        pb.flags = HAS_IS_REMOTE | (IS_REMOTE if span.parent_remote else 0)
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
