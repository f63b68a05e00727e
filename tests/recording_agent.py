"""The agent side of the end-to-end tests: a conformance recording (tests/conformance/recordings,
what a real instrumentation stack exported) sent again through the official OpenTelemetry SDK
exporters over OTLP/gRPC, traces and logs.

    recording -> one export batch per recorded request, in recorded order:
        spans       -> sdk ReadableSpan        -> OTLPSpanExporter
        log records -> sdk ReadableLogRecord   -> OTLPLogExporter

Each span keeps its recorded ids, times, kind, status, attributes (maps and bytes too), events,
links, resource and scope; each log record its ids, times, severity, body, attributes and event
name. No tracer, sampler or id generator runs, so the receiver sees what the stack exported,
encoded by the SDK. One thing the Python SDK cannot leave unsaid: whether a parent is remote
(``flags`` bits 0x100/0x200; the JS SDK often writes neither). Where a recording did not say,
the agent states what the Python SDK would for the same run: remote for the scripted remote
parent of the remote_parent scenario, local for any other (a parent the recording lacks is a
span of the agent's own that never ended, as in non_terminating).

``retraced`` gives the same requests under other trace ids (many traces from one recording),
``interleaved`` mixes the requests of many traces into shared batches.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from conformance.scenarios import REMOTE_SPAN_ID
from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as PbResource
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope as SdkScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

_ID_KEYS = ("traceId", "spanId", "parentSpanId")
_REQUESTS: dict[str, type[Message]] = {"traces": ExportTraceServiceRequest,
                                       "logs": ExportLogsServiceRequest}
_IS_REMOTE = trace_pb2.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_HAS_IS_REMOTE = trace_pb2.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_REMOTE_PARENT = bytes.fromhex(REMOTE_SPAN_ID)


def _base64_ids(obj: Any) -> Any:
    """OTLP/JSON (hex ids) -> protobuf JSON (base64 bytes)."""
    if isinstance(obj, dict):
        return {k: base64.b64encode(bytes.fromhex(v)).decode()
                if k in _ID_KEYS and isinstance(v, str) else _base64_ids(v)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_base64_ids(v) for v in obj]
    return obj


def requests(recording: dict[str, Any]) -> list[tuple[str, Message]]:
    """The recorded requests as protobuf, ``(signal, request)`` in recorded order."""
    out = []
    for item in recording["requests"]:
        msg = _REQUESTS[item["signal"]]()
        json_format.ParseDict(_base64_ids(item["body"]), msg)
        out.append((item["signal"], msg))
    return out


def trace_ids(reqs: Iterable[tuple[str, Message]]) -> set[str]:
    """Hex trace ids of every span and every log record that has one."""
    out: set[str] = set()
    for signal, req in reqs:
        if signal == "traces":
            out.update(s.trace_id.hex() for rs in req.resource_spans
                       for ss in rs.scope_spans for s in ss.spans)
        else:
            out.update(r.trace_id.hex() for rl in req.resource_logs
                       for sl in rl.scope_logs for r in sl.log_records if r.trace_id)
    return out


def retraced(reqs: list[tuple[str, Message]], ids: dict[str, str]) -> list[tuple[str, Message]]:
    """Copies of ``reqs`` with every trace id in ``ids`` (hex -> hex) replaced, in spans, span
    links and log records; span ids stay (they are unique within a trace)."""
    new = {bytes.fromhex(k): bytes.fromhex(v) for k, v in ids.items()}
    out = []
    for signal, req in reqs:
        copy = type(req)()
        copy.CopyFrom(req)
        if signal == "traces":
            for rs in copy.resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        s.trace_id = new.get(s.trace_id, s.trace_id)
                        for link in s.links:
                            link.trace_id = new.get(link.trace_id, link.trace_id)
        else:
            for rl in copy.resource_logs:
                for sl in rl.scope_logs:
                    for r in sl.log_records:
                        r.trace_id = new.get(r.trace_id, r.trace_id)
        out.append((signal, copy))
    return out


# --- protobuf -> SDK objects ------------------------------------------------------------------

def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def _attrs(kvs: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def _resource(pb: PbResource, schema_url: str) -> Resource:
    return Resource(_attrs(pb.attributes), schema_url or None)


def _scope(pb: InstrumentationScope, schema_url: str) -> SdkScope:
    return SdkScope(pb.name, pb.version or None, schema_url or None, _attrs(pb.attributes))


def _context(trace_id: bytes, span_id: bytes, flags: int = 1, is_remote: bool = False,
             trace_state: str = "") -> SpanContext:
    return SpanContext(int.from_bytes(trace_id, "big"), int.from_bytes(span_id, "big"),
                       is_remote=is_remote, trace_flags=TraceFlags(flags & 0xFF),
                       trace_state=TraceState.from_header([trace_state]) if trace_state
                       else None)


def parent_is_remote(s: trace_pb2.Span) -> bool:
    """As the recording says, else as the module docstring says."""
    if s.flags & _HAS_IS_REMOTE:
        return bool(s.flags & _IS_REMOTE)
    return s.parent_span_id == _REMOTE_PARENT


def _span(s: trace_pb2.Span, resource: Resource, scope: SdkScope) -> ReadableSpan:
    code = StatusCode(s.status.code)
    remote = parent_is_remote(s)
    parent = (_context(s.trace_id, s.parent_span_id, s.flags, remote)
              if s.parent_span_id else None)
    return ReadableSpan(
        name=s.name,
        context=_context(s.trace_id, s.span_id, s.flags, trace_state=s.trace_state),
        parent=parent,
        resource=resource,
        attributes=_attrs(s.attributes),
        events=[Event(e.name, _attrs(e.attributes), e.time_unix_nano) for e in s.events],
        links=[Link(_context(lk.trace_id, lk.span_id, lk.flags, trace_state=lk.trace_state),
                    _attrs(lk.attributes)) for lk in s.links],
        kind=SpanKind(max(s.kind - 1, 0)),  # OTLP counts UNSPECIFIED as 0
        status=Status(code, s.status.message if code is StatusCode.ERROR else None),
        start_time=s.start_time_unix_nano,
        end_time=s.end_time_unix_nano,
        instrumentation_scope=scope,
    )


def _log(r: Any, resource: Resource, scope: SdkScope) -> ReadableLogRecord:
    record = LogRecord(
        timestamp=r.time_unix_nano, observed_timestamp=r.observed_time_unix_nano,
        trace_id=int.from_bytes(r.trace_id, "big"), span_id=int.from_bytes(r.span_id, "big"),
        trace_flags=TraceFlags(r.flags & 0xFF), severity_text=r.severity_text or None,
        severity_number=SeverityNumber(r.severity_number) if r.severity_number else None,
        body=_value(r.body), attributes=_attrs(r.attributes), event_name=r.event_name or None)
    return ReadableLogRecord(record, resource=resource, instrumentation_scope=scope)


def sdk_batch(signal: str, req: Any) -> list[Any]:
    """One recorded request as the SDK objects its exporter takes."""
    if signal == "traces":
        return [_span(s, _resource(rs.resource, rs.schema_url), _scope(ss.scope, ss.schema_url))
                for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    return [_log(r, _resource(rl.resource, rl.schema_url), _scope(sl.scope, sl.schema_url))
            for rl in req.resource_logs for sl in rl.scope_logs for r in sl.log_records]


def interleaved(traces: list[list[tuple[str, Message]]], per_batch: int, chunk: int
                ) -> Iterator[tuple[str, list[Any]]]:
    """The requests of many traces as shared export batches. Each trace's requests are cut
    into pieces of at most ``chunk`` spans or log records (in order); piece j of each of
    ``per_batch`` traces goes out in one batch per signal. So a batch carries spans or records
    of many traces, and a trace's spans and records are spread over several batches."""
    for start in range(0, len(traces), per_batch):
        pieces = [[(signal, items[i:i + chunk]) for signal, req in t
                   for items in [sdk_batch(signal, req)]
                   for i in range(0, len(items), chunk)]
                  for t in traces[start:start + per_batch]]
        for j in range(max(len(p) for p in pieces)):
            merged: dict[str, list[Any]] = {"traces": [], "logs": []}
            for p in pieces:
                if j < len(p):
                    merged[p[j][0]].extend(p[j][1])
            for signal, batch in merged.items():
                if batch:
                    yield signal, batch


@dataclass
class Sent:
    spans: int = 0
    log_records: int = 0
    batches: dict[str, int] = field(default_factory=lambda: {"traces": 0, "logs": 0})


def send(batches: Iterable[tuple[str, list[Any]]], target: str, timeout_s: float = 30) -> Sent:
    """Export each batch with the SDK's OTLP/gRPC exporters to ``target`` (``HOST:PORT``,
    plaintext); raises when an exporter gives up on a batch (after its own retries)."""
    spans = OTLPSpanExporter(endpoint=target, insecure=True, timeout=timeout_s)
    logs = OTLPLogExporter(endpoint=target, insecure=True, timeout=timeout_s)
    sent = Sent()
    try:
        for signal, batch in batches:
            if signal == "traces":
                ok = spans.export(batch) is SpanExportResult.SUCCESS
                sent.spans += len(batch)
            else:
                ok = logs.export(batch) is LogRecordExportResult.SUCCESS
                sent.log_records += len(batch)
            if not ok:
                raise RuntimeError(f"the SDK exporter failed a {signal} batch of {len(batch)} "
                                   f"after {sent}")
            sent.batches[signal] += 1
    finally:
        spans.shutdown()
        logs.shutdown()
    return sent


def replay(recording: dict[str, Any], target: str) -> Sent:
    """Send one recording, one export batch per recorded request, in order."""
    return send(((signal, sdk_batch(signal, req)) for signal, req in requests(recording)),
                target)
