"""Stage: decode (logs). OTLP log requests (protobuf or OTLP/JSON) -> ``model.LogEvent``.

Only GenAI content events tied to a span are kept (``is_genai_event``; read by
``evaluate.conventions.events``):
instrumentations send prompts and completions as log records when content is not put on
spans. Every other record is *ignored* and counted with a reason; a record that claims to be
a GenAI event but has invalid ids or a time past int64 nanoseconds is *rejected* with a
reason. The event name is the record's ``event_name`` field, else its ``event.name``
attribute (SDKs before the field existed).

Two ways out: ``decode_logs`` gives ``LogEvent`` values (offline runs, tests); ``hold_logs``
gives ``HeldRecord`` values, what the engine keeps: the ids, name and time read, the rest the
record's own protobuf bytes until its trace is released (``HeldRecord.decode``). Decoded
attributes and bodies are Python objects several times the size of their bytes, and a record
may wait ``idle_timeout_s`` for spans that never come.

``hold_logs(req, every=True)`` is the publishing front end's (``serve --kafka-publish``): it
stands where the collector's kafka exporter would, so every record it acknowledges goes on,
GenAI event or not (none is ignored; a GenAI event with invalid ids is still rejected, as the
answer says), each held with its ``ResourceLogs`` and ``ScopeLogs`` (``HeldRecord.origin``),
which ``encode_logs`` writes it back under.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1 import logs_pb2

from otel_eval.base.model import LogEvent
from otel_eval.base.service_name import service_name
from otel_eval.decode.body import loads_bounded
from otel_eval.decode.encode import dict_to_attributes, header, python_to_anyvalue
from otel_eval.decode.otlp import (
    MAX_TIME_NS,
    anyvalue_to_python,
    attributes_to_dict,
    parse_salvaged,
    without_legacy,
)
from otel_eval.decode.otlp_json import legacy_items, message_from_dict, without_lone_surrogates

__all__ = [
    "IGNORE_REASONS",
    "REJECT_REASONS",
    "HeldLogs",
    "HeldRecord",
    "LogsDecodeResult",
    "decode_logs",
    "encode_logs",
    "hold",
    "hold_logs",
    "logs_request_from_json",
    "parse_logs_json",
    "parse_logs_request",
]

# Closed sets of reasons: ignored (not for us, not an error) and rejected (an error).
IGNORE_REASONS = ("not_genai_event", "no_span_context", "kafka_publish_mode")
REJECT_REASONS = ("invalid_trace_id", "invalid_span_id", "invalid_timestamp", "invalid_utf8",
                  "instrumentation_library_logs")
# A pre-1.0 exporter's ResourceLogs field 1000 (before ScopeLogs replaced it): its entries
# parse as ScopeLogs; its records are counted rejected, never read nor written back.
_LEGACY_LOGS = (logs_pb2.ScopeLogs, "log_records", "instrumentation_library_logs")
_OWN_EVENTS = ("gen_ai.evaluation.result", "otel_eval.verdict")  # our own output, looped back
# The GenAI content events kept (``evaluate.conventions.events`` lays them over their span).
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
MESSAGE_ROLES = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                 "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
CHOICE_EVENT = "gen_ai.choice"


def is_genai_event(name: str) -> bool:
    """Whether a log record's event name is a GenAI content event the trajectory reads."""
    return name in (DETAILS_EVENT, CHOICE_EVENT) or name in MESSAGE_ROLES


@dataclass(frozen=True, slots=True)
class HeldRecord:
    """A kept GenAI record as the engine holds it: what assembly reads (ids, name, time) and
    the record's protobuf bytes (``raw``, an encoded ``LogRecord``), decoded only when its
    trace is released. ``nbytes`` counts in ``assembly.max_pending_log_bytes``."""

    trace_id: str
    span_id: str
    name: str
    time_unix_nano: int
    raw: bytes
    # the ResourceLogs and ScopeLogs it came in, serialized without their records (one pair
    # per scope of a request, shared by its records), kept by ``hold_logs(every=True)``
    origin: tuple[bytes, bytes] | None = None
    # the service.name of its resource ("" when it names none): whose share of the open
    # traces a trace it opens takes (assembly.max_service_share)
    service: str = ""

    @property
    def nbytes(self) -> int:
        return len(self.raw)

    def decode(self) -> LogEvent:
        pb = logs_pb2.LogRecord.FromString(self.raw)
        body = anyvalue_to_python(pb.body) if pb.HasField("body") else None
        return LogEvent(self.trace_id, self.span_id, self.name, self.time_unix_nano,
                        attributes_to_dict(pb.attributes), body, self.service,
                        pb.observed_time_unix_nano)


@dataclass
class LogsDecodeResult:
    records: list[LogEvent] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)


@dataclass
class HeldLogs:
    records: list[HeldRecord] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)


def parse_logs_request(body: bytes) -> tuple[ExportLogsServiceRequest, Counter[str]]:
    """Bytes -> request. Records with invalid UTF-8 are dropped from it and counted
    (``invalid_utf8``), as spans are, and so are those of a pre-1.0 exporter's
    ``instrumentation_library_logs`` (field 1000: ``instrumentation_library_logs``), as
    ``otlp`` counts its spans; raises ``MalformedRequest`` for no request at all."""
    req, bad = parse_salvaged(body, ExportLogsServiceRequest)
    for rl in req.resource_logs:
        without_legacy(rl, _LEGACY_LOGS, bad)
    return req, bad


def parse_logs_json(body: bytes) -> tuple[ExportLogsServiceRequest, Counter[str]]:
    """``logs_request_from_json``, and the records it leaves out, by reason: those of a
    pre-1.0 exporter's ``instrumentationLibraryLogs``, a key the parser ignores as unknown
    (``instrumentation_library_logs``), as ``parse_logs_request`` counts them; and those
    holding a lone surrogate (``invalid_utf8``, ``otlp_json.without_lone_surrogates``)."""
    data = loads_bounded(body)
    rejected = legacy_items(data, "resourceLogs", "instrumentationLibraryLogs", "logRecords",
                            "instrumentation_library_logs")
    rejected += without_lone_surrogates(body, data, "resourceLogs", "scopeLogs", "logRecords")
    return message_from_dict(data, ExportLogsServiceRequest(), "resourceLogs"), rejected


def logs_request_from_json(body: bytes) -> ExportLogsServiceRequest:
    """OTLP/JSON (hex ids) -> request, with the bounds of the traces path (nesting depth,
    non-finite numbers). Raises ValueError with a clear message."""
    return message_from_dict(loads_bounded(body), ExportLogsServiceRequest(), "resourceLogs")


def _event_name(record: Any) -> str:
    if record.event_name:
        return str(record.event_name)
    for kv in record.attributes:
        if kv.key == "event.name":
            return str(kv.value.string_value)
    return ""


def _verdict(record: Any, name: str) -> tuple[str, str]:
    """("", "") for a GenAI event of a span, else ("ignored" | "rejected", reason)."""
    if not is_genai_event(name) or name in _OWN_EVENTS:
        return "ignored", "not_genai_event"
    tid, sid = record.trace_id, record.span_id
    if not tid and not sid:
        return "ignored", "no_span_context"
    if len(tid) != 16 or tid == bytes(16):
        return "rejected", "invalid_trace_id"
    if len(sid) != 8 or sid == bytes(8):
        return "rejected", "invalid_span_id"
    if record.time_unix_nano > MAX_TIME_NS or record.observed_time_unix_nano > MAX_TIME_NS:
        # as for spans: a time no store or backend holds orders nothing
        return "rejected", "invalid_timestamp"
    return "", ""


def _kept(req: ExportLogsServiceRequest, ignored: Counter[str], rejected: Counter[str],
          every: bool = False, traces: Collection[str] | None = None
          ) -> Iterator[tuple[Any, str, str, str, int, Any]]:
    """(record, trace id, span id, name, time, where: (resource index, its entry, scope index,
    its entry)) of each kept record; every other record counted in ``ignored`` or
    ``rejected`` (never raises on content). ``every``: the records otherwise ignored are kept
    too. ``traces``: only the records of these trace ids are read (the others are neither
    kept nor counted)."""
    for ri, rl in enumerate(req.resource_logs):
        for si, sl in enumerate(rl.scope_logs):
            for record in sl.log_records:
                if traces is not None and record.trace_id.hex() not in traces:
                    continue
                name = _event_name(record)
                kind, reason = _verdict(record, name)
                if kind == "rejected" or (kind == "ignored" and not every):
                    (rejected if kind == "rejected" else ignored)[reason] += 1
                    continue
                t = record.time_unix_nano or record.observed_time_unix_nano
                yield (record, record.trace_id.hex(), record.span_id.hex(), name, t,
                       (ri, rl, si, sl))


def decode_logs(req: ExportLogsServiceRequest) -> LogsDecodeResult:
    """Keep the GenAI events of spans, decoded; count everything else (never raises on
    content)."""
    out = LogsDecodeResult()
    for record, tid, sid, name, t, _ in _kept(req, out.ignored, out.rejected):
        body = anyvalue_to_python(record.body) if record.HasField("body") else None
        out.records.append(LogEvent(tid, sid, name, t, attributes_to_dict(record.attributes),
                                    body, observed_time_unix_nano=record.observed_time_unix_nano))
    return out


def hold_logs(req: ExportLogsServiceRequest, every: bool = False,
              traces: Collection[str] | None = None) -> HeldLogs:
    """As ``decode_logs``, each kept record held as its bytes (``HeldRecord``). ``every``
    (the publishing front end): every record not rejected is held, with its resource and
    scope entries (``HeldRecord.origin``; see the module docstring). ``traces``: only the
    records of these trace ids, kept, ignored or rejected (the spool's replay)."""
    out = HeldLogs()
    origins: dict[tuple[int, int], tuple[bytes, bytes]] = {}  # (ri, si) -> its origin
    heads: dict[int, bytes] = {}  # ri -> the resource entry's header
    services: dict[int, str] = {}  # ri -> its service.name
    for record, tid, sid, name, t, (ri, rl, si, sl) in _kept(req, out.ignored, out.rejected,
                                                              every, traces):
        origin = None
        if every:
            origin = origins.get((ri, si))
            if origin is None:
                head = heads.get(ri)
                if head is None:
                    head = heads[ri] = header(rl, "scope_logs").SerializeToString()
                origin = origins[(ri, si)] = (head,
                                              header(sl, "log_records").SerializeToString())
        service = services.get(ri)
        if service is None:
            named = service_name(attributes_to_dict(rl.resource.attributes))
            service = services[ri] = named if isinstance(named, str) else ""
        out.records.append(HeldRecord(tid, sid, name, t, record.SerializeToString(), origin,
                                      service))
    return out


def _record_pb(r: LogEvent) -> logs_pb2.LogRecord:
    pb = logs_pb2.LogRecord(
        time_unix_nano=r.time_unix_nano, observed_time_unix_nano=r.observed_time_unix_nano,
        event_name=r.name,
        trace_id=bytes.fromhex(r.trace_id), span_id=bytes.fromhex(r.span_id),
        attributes=dict_to_attributes(r.attributes))
    if r.body is not None:
        pb.body.CopyFrom(python_to_anyvalue(r.body))
    return pb


def hold(record: LogEvent | HeldRecord) -> HeldRecord:
    """A record as the engine holds it (one given decoded is encoded)."""
    if isinstance(record, HeldRecord):
        return record
    return HeldRecord(record.trace_id, record.span_id, record.name, record.time_unix_nano,
                      _record_pb(record).SerializeToString(), service=record.service)


def encode_logs(records: Iterable[LogEvent | HeldRecord]) -> ExportLogsServiceRequest:
    """Records -> one request that ``decode_logs`` turns back into the same records, in the
    order given (the spool re-encodes what a re-opened trace holds; a held record is written
    as received). A record held with its ``origin`` is written under its resource and scope
    as received; the others (decoding keeps none) under empty ones. Consecutive records of
    one origin share its entries; a resource or scope that comes back after another is
    written again there, never merged into its first place: that would move its later
    records before the other's (what is published must be the user's records in their
    order: a span's records stamped alike are read in the order received)."""
    req = ExportLogsServiceRequest()
    rl: logs_pb2.ResourceLogs | None = None
    sl: logs_pb2.ScopeLogs | None = None
    last: tuple[bytes, bytes] | None = None  # the origin ``sl`` was written under
    for r in records:
        origin = r.origin if isinstance(r, HeldRecord) else None
        if sl is None or origin != last:
            if rl is None or (origin and origin[0]) != (last and last[0]):
                rl = req.resource_logs.add()
                if origin:
                    rl.ParseFromString(origin[0])
            sl = rl.scope_logs.add()
            if origin:
                sl.ParseFromString(origin[1])
            last = origin
        if isinstance(r, HeldRecord):
            sl.log_records.add().MergeFromString(r.raw)
        else:
            sl.log_records.append(_record_pb(r))
    return req
