"""Stage: decode. OTLP trace requests (protobuf) -> ``model.Span``.

``parse_request`` turns the bytes into a request, ``decode_request`` the request into spans
(an OTLP/JSON body becomes the same request through ``otlp_json``; ``encode`` goes back).

Promises:
- every span is either returned or counted as rejected with a reason from ``REJECT_REASONS``
  (a time past int64 nanoseconds, the span's or an event's: ``invalid_timestamp``; a link
  whose ids are not 16 and 8 bytes: ``invalid_link_id``; spans in the field OTLP 0.x had
  before ``scope_spans``: ``instrumentation_library_spans``);
- a span longer than a year (or with no start) is returned marked ``Span.unevaluable =
  "invalid_timestamp"``: its times are the user's data, which otel-eval cannot evaluate;
  assembly refuses it with that reason, or with pass-through takes it only to pass on
  (``DecodeResult.evaluable`` drops and counts it where there is no assembly);
- only ids, names, times and status are read eagerly; attributes and events are decoded on
  first access (``Span.attributes``), so the receive path stays close to protobuf-decode speed
  and bulky message text stays a raw string;
- a decoded span holds its own copy of its attributes and events, never the request: the
  request's memory is released once decoded, whatever spans of it were accepted or rejected;
- a decoded span keeps the bytes it came in (``Span.wire``, ``Span.origin``), for
  ``encode.encode_spans`` to write back as they came;
- a body with invalid UTF-8 in some spans is not refused whole: ``parse_request`` drops those
  spans and counts them (``invalid_utf8``); a body that is no request at all is a
  ``MalformedRequest``.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_eval.base.model import Origin, Span, SpanEvent

# Closed set of reasons a span is rejected at decode time.
REJECT_REASONS = ("invalid_trace_id", "invalid_span_id", "invalid_parent_span_id",
                  "invalid_link_id", "invalid_timestamp", "instrumentation_library_spans",
                  "invalid_utf8")
# ResourceSpans' field before ScopeSpans replaced it (ResourceLogs' before ScopeLogs too)
_INSTRUMENTATION_LIBRARY_SPANS = 1000
# Span times must fit int64 nanoseconds (until 2262, as every store and backend holds them)...
MAX_TIME_NS = 2**63 - 1
# ...and a span last at most a year: one ending at 2^64-1 ns would add centuries to the
# trace's duration (its histogram, its budget) instead of being refused.
MAX_SPAN_DURATION_NS = 366 * 86400 * 10**9

# OTLP span kind and status codes -> the model's names (``encode`` maps them back).
SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer",
              5: "consumer"}
SPAN_STATUSES = {0: "unset", 1: "ok", 2: "error"}
HAS_IS_REMOTE = 0x100  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
IS_REMOTE = 0x200  # SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
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

    def evaluable(self) -> DecodeResult:
        """The spans without those marked ``unevaluable``, which are counted as rejected with
        their reason: for a reader with no assembly and nothing to pass on (files)."""
        out = DecodeResult(reasons=Counter(self.reasons))
        for s in self.spans:
            if s.unevaluable:
                out.reasons[s.unevaluable] += 1
            else:
                out.spans.append(s)
        return out


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


def _resource_header(rs: trace_pb2.ResourceSpans, reasons: Counter[str]) -> bytes:
    """``rs`` as received without its scopes. The spans of a pre-1.0 exporter's
    ``instrumentation_library_spans`` (field 1000, removed from OTLP in 2022) are neither read
    nor forwarded: they are counted as rejected."""
    known = trace_pb2.ResourceSpans(resource=rs.resource, schema_url=rs.schema_url)
    return known.SerializeToString() + _unknown(rs, reasons)


def _scope_header(ss: trace_pb2.ScopeSpans) -> bytes:
    """``ss`` as received without its spans."""
    known = trace_pb2.ScopeSpans(scope=ss.scope, schema_url=ss.schema_url)
    return known.SerializeToString() + _unknown(ss, None)


# (the message its legacy entries parse as, its list of items, the reason they are counted
# under): ResourceSpans' and ResourceLogs' field 1000 hold the same layout as their scopes
_LEGACY_SPANS = (trace_pb2.ScopeSpans, "spans", "instrumentation_library_spans")


def _unknown(msg: Any, reasons: Counter[str] | None,
             legacy: tuple[Any, str, str] = _LEGACY_SPANS) -> bytes:
    """The fields of ``msg`` this OTLP version does not know (a newer one's), encoded as they
    came, so a header written back loses none of them. Empty in the usual case. With
    ``reasons``, the entries of field 1000 (a pre-1.0 exporter's instrumentation library
    list, ``legacy``) are left out and their items counted there."""
    fields = UnknownFieldSet(msg)
    if not len(fields):
        return b""
    out = bytearray()
    for i in range(len(fields)):
        f = fields[i]
        number, wire_type, data = f.field_number, f.wire_type, f.data
        if reasons is not None and number == _INSTRUMENTATION_LIBRARY_SPANS and wire_type == 2:
            scope_cls, items, reason = legacy
            try:
                reasons[reason] += len(getattr(scope_cls.FromString(data), items))
            except DecodeError:
                reasons[reason] += 1
            continue
        if wire_type == 0:
            out += _varint(number << 3) + _varint(data)
        elif wire_type == 2:
            out += _varint(number << 3 | 2) + _varint(len(data)) + data
        elif wire_type in (1, 5):
            out += _varint(number << 3 | wire_type) + data.to_bytes(
                8 if wire_type == 1 else 4, "little")
        # 3: a proto2 group, which no OTLP message declares
    return bytes(out)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _parent_remote(flags: int) -> bool | None:
    """What the OTLP span flags say of the parent: remote, local, or nothing (None)."""
    return bool(flags & IS_REMOTE) if flags & HAS_IS_REMOTE else None


def decode_request(req: ExportTraceServiceRequest) -> DecodeResult:
    """Turn a decoded request into spans; invalid spans are counted, never raised."""
    out = DecodeResult()
    spans, reasons = out.spans, out.reasons
    for rs in req.resource_spans:
        resource = attributes_to_dict(rs.resource.attributes)
        resource_header = _resource_header(rs, reasons)
        for ss in rs.scope_spans:
            scope, origin = ss.scope.name, Origin(resource_header, _scope_header(ss))
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
                if pb.links and not all(len(link.trace_id) == 16 and len(link.span_id) == 8
                                        for link in pb.links):
                    # what would be forwarded is not the link sent (OTLP/JSON: a non-hex id)
                    reasons["invalid_link_id"] += 1
                    continue
                start, end = pb.start_time_unix_nano, pb.end_time_unix_nano
                past = start > MAX_TIME_NS or end > MAX_TIME_NS
                if pb.events and not past:  # an event's too (OTLP/JSON's time that is no
                    for e in pb.events:  # uint64 becomes one): forwarded, the event would
                        if e.time_unix_nano > MAX_TIME_NS:  # carry a time never sent
                            past = True  # (a loop, not a call: decode's cost per span)
                            break
                if past:
                    reasons["invalid_timestamp"] += 1
                    continue
                # longer than a year (or no start): the user's data all the same, which
                # otel-eval cannot evaluate; assembly refuses it, or pass-through passes it on
                unevaluable = ("invalid_timestamp" if end - start > MAX_SPAN_DURATION_NS
                               else None)
                lazy, wire = _lazy_attrs(pb)
                spans.append(Span(
                    tid.hex(), sid.hex(), pid.hex() if pid and pid != _ZERO_SPAN else None,
                    pb.name, start, end,
                    kind=SPAN_KINDS.get(pb.kind, "unspecified"),
                    status=SPAN_STATUSES.get(pb.status.code, "unset"),
                    status_message=pb.status.message,
                    resource=resource, scope=scope, lazy=lazy, nbytes=len(wire),
                    parent_remote=_parent_remote(pb.flags), wire=wire, origin=origin,
                    unevaluable=unevaluable,
                ))
    return out


# --- parsing request bytes, salvaging spans and records around invalid UTF-8 --------------------

class MalformedRequest(ValueError):
    """The body is not an ExportTraceServiceRequest at all (nothing can be salvaged)."""


# What the salvage walks in each request: (resource entries, scope entries, items)
_LEVELS = {"ExportTraceServiceRequest": ("resource_spans", "scope_spans", "spans"),
           "ExportLogsServiceRequest": ("resource_logs", "scope_logs", "log_records")}
_LENIENT: dict[str, Any] = {}


def _lenient_class(cls: Any) -> Any:
    """``cls`` (a request message) with every string field declared as bytes.

    protobuf refuses a whole message when one string holds invalid UTF-8. Strings and bytes
    share a wire type, so this twin parses such a body; each item (span, log record) is then
    re-parsed with the real schema and only the items that fail are rejected (reason
    ``invalid_utf8``).
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    name = cls.DESCRIPTOR.full_name
    if name in _LENIENT:
        return _LENIENT[name]
    pool, added = descriptor_pool.DescriptorPool(), set[str]()

    def add(file: Any) -> None:  # dependencies first, as the pool requires
        if file.name in added:
            return
        for dep in file.dependencies:
            add(dep)
        fdp = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(fdp)
        stack = list(fdp.message_type)
        while stack:
            msg = stack.pop()
            stack.extend(msg.nested_type)
            for f in msg.field:
                if f.type == descriptor_pb2.FieldDescriptorProto.TYPE_STRING:
                    f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
        fdp.ClearField("service")
        pool.Add(fdp)
        added.add(file.name)

    add(cls.DESCRIPTOR.file)
    _LENIENT[name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    return _LENIENT[name]


def parse_as_received(body: bytes, cls: Any) -> Any:
    """Bytes -> a request of ``cls``'s fields whose strings are bytes: every value as
    received, invalid UTF-8 included, its bytes the same when written back (to copy items
    whole, never to read them). Raises ``DecodeError`` when the body is no such request."""
    return _lenient_class(cls).FromString(body)


def parse_salvaged(body: bytes, cls: Any) -> tuple[Any, Counter[str]]:
    """Bytes -> a ``cls`` request (traces or logs). Items with invalid UTF-8 (or whose
    resource or scope has it) are dropped from it and counted (``invalid_utf8``); the rest
    keep their resource and scope whole. Raises ``MalformedRequest`` when the body is no
    such request at all."""
    try:
        return cls.FromString(body), Counter()
    except DecodeError as first:
        try:
            lenient = _lenient_class(cls).FromString(body)
        except DecodeError:
            raise MalformedRequest(
                f"not a valid {cls.DESCRIPTOR.name}: {first}") from None
    return _salvage(lenient, cls(), *_LEVELS[cls.DESCRIPTOR.name])


def parse_request(body: bytes) -> tuple[ExportTraceServiceRequest, Counter[str]]:
    """Bytes -> request. Spans with invalid UTF-8 are dropped from it and counted."""
    req, bad = parse_salvaged(body, ExportTraceServiceRequest)
    return req, bad


def without_legacy(entry: Any, legacy: tuple[Any, str, str], reasons: Counter[str]) -> None:
    """``entry`` (a resource entry of a request) without its field 1000, a pre-1.0
    exporter's instrumentation library list (``legacy``: what each of its entries parses as,
    its list of items, the reason): its items counted in ``reasons``, never read nor written
    back; the other unknown fields (a newer OTLP's) kept."""
    fields = UnknownFieldSet(entry)
    if not any(fields[i].field_number == _INSTRUMENTATION_LIBRARY_SPANS
               for i in range(len(fields))):
        return  # the usual case
    kept = _unknown(entry, reasons, legacy)
    head = type(entry)(**{f.name: getattr(entry, f.name) for f, _ in entry.ListFields()})
    head.MergeFromString(kept)
    entry.CopyFrom(head)


def _header(entry: Any, items: str) -> bytes:
    """A resource or scope entry without its list, as its bytes (a newer OTLP's fields kept:
    the lenient class knows the same fields as the real one, so they are unknown to both)."""
    fields = [f.name for f, _ in entry.ListFields() if f.name != items]
    head = type(entry)(**{name: getattr(entry, name) for name in fields})
    return head.SerializeToString() + _unknown(entry, None)


def _salvage(lenient: Any, req: Any, resources: str, scopes: str,
             items: str) -> tuple[Any, Counter[str]]:
    bad = Counter[str]()
    for lrs in getattr(lenient, resources):
        n_items = sum(len(getattr(ss, items)) for ss in getattr(lrs, scopes))
        rs = getattr(req, resources).add()
        try:  # the header re-parsed with the real schema (its unknown fields kept)
            rs.ParseFromString(_header(lrs, scopes))
        except DecodeError:
            bad["invalid_utf8"] += n_items
            del getattr(req, resources)[-1]
            continue
        for lss in getattr(lrs, scopes):
            ss = getattr(rs, scopes).add()
            try:
                ss.ParseFromString(_header(lss, items))
            except DecodeError:
                bad["invalid_utf8"] += len(getattr(lss, items))
                del getattr(rs, scopes)[-1]
                continue
            for litem in getattr(lss, items):
                try:
                    getattr(ss, items).add().ParseFromString(litem.SerializeToString())
                except DecodeError:
                    del getattr(ss, items)[-1]
                    bad["invalid_utf8"] += 1
    return req, bad
