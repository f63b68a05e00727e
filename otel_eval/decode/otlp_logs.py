"""Stage: decode (logs). OTLP log requests (protobuf or OTLP/JSON) -> ``model.LogEvent``.

Only GenAI content events tied to a span are kept (``is_genai_event``; read by
``evaluate.conventions.events``):
instrumentations send prompts and completions as log records when content is not put on
spans. Every other record is *ignored* and counted with a reason; a record that claims to be
a GenAI event but has invalid ids is *rejected* with a reason. The event name is the record's
``event_name`` field, else its ``event.name`` attribute (SDKs before the field existed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1 import logs_pb2

from otel_eval.base.model import LogEvent
from otel_eval.decode.body import loads_bounded
from otel_eval.decode.otlp import (
    MalformedRequest,
    anyvalue_to_python,
    attributes_to_dict,
    dict_to_attributes,
    message_from_dict,
    python_to_anyvalue,
)

__all__ = ["IGNORE_REASONS", "REJECT_REASONS", "LogsDecodeResult", "decode_logs",
           "encode_logs", "logs_request_from_json", "parse_logs_request"]

# Closed sets of reasons: ignored (not for us, not an error) and rejected (an error).
IGNORE_REASONS = ("not_genai_event", "no_span_context", "kafka_publish_mode")
REJECT_REASONS = ("invalid_trace_id", "invalid_span_id")
_OWN_EVENTS = ("gen_ai.evaluation.result", "otel_eval.verdict")  # our own output, looped back
# The GenAI content events kept (``evaluate.conventions.events`` lays them over their span).
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
MESSAGE_ROLES = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                 "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
CHOICE_EVENT = "gen_ai.choice"


def is_genai_event(name: str) -> bool:
    """Whether a log record's event name is a GenAI content event the trajectory reads."""
    return name in (DETAILS_EVENT, CHOICE_EVENT) or name in MESSAGE_ROLES


@dataclass
class LogsDecodeResult:
    records: list[LogEvent] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)


def parse_logs_request(body: bytes) -> ExportLogsServiceRequest:
    try:
        return ExportLogsServiceRequest.FromString(body)
    except DecodeError as e:
        raise MalformedRequest(f"not a valid ExportLogsServiceRequest: {e}") from None


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


def decode_logs(req: ExportLogsServiceRequest) -> LogsDecodeResult:
    """Keep the GenAI events of spans; count everything else (never raises on content)."""
    out = LogsDecodeResult()
    for rl in req.resource_logs:
        for sl in rl.scope_logs:
            for record in sl.log_records:
                name = _event_name(record)
                if not is_genai_event(name) or name in _OWN_EVENTS:
                    out.ignored["not_genai_event"] += 1
                    continue
                tid, sid = record.trace_id, record.span_id
                if not tid and not sid:
                    out.ignored["no_span_context"] += 1
                elif len(tid) != 16 or tid == bytes(16):
                    out.rejected["invalid_trace_id"] += 1
                elif len(sid) != 8 or sid == bytes(8):
                    out.rejected["invalid_span_id"] += 1
                else:
                    body = anyvalue_to_python(record.body) if record.HasField("body") else None
                    out.records.append(LogEvent(
                        tid.hex(), sid.hex(), name, record.time_unix_nano
                        or record.observed_time_unix_nano,
                        attributes_to_dict(record.attributes), body))
    return out


def encode_logs(records: Iterable[LogEvent]) -> ExportLogsServiceRequest:
    """Records -> one request that ``decode_logs`` turns back into the same records (the
    spool re-encodes what a re-opened trace holds). Resource and scope are not kept by
    decoding, so none are written."""
    req = ExportLogsServiceRequest()
    out = req.resource_logs.add().scope_logs.add().log_records
    for r in records:
        pb = logs_pb2.LogRecord(
            time_unix_nano=r.time_unix_nano, event_name=r.name,
            trace_id=bytes.fromhex(r.trace_id), span_id=bytes.fromhex(r.span_id),
            attributes=dict_to_attributes(r.attributes))
        if r.body is not None:
            pb.body.CopyFrom(python_to_anyvalue(r.body))
        out.append(pb)
    return req
