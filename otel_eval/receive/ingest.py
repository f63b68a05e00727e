"""The protocol-independent half of a receiver: bytes in, an OTLP answer out.

    body -> otlp.parse_request -> otlp.decode_request -> Engine.submit(spans, request) -> result
    body -> otlp_logs.parse_logs_request -> hold_logs -> Engine.submit(signal="logs") -> result

``request`` is what the engine writes to its spool before answering (the body as received for
protobuf, the parsed request re-encoded for OTLP/JSON - only when a spool asks for it), for
log requests as for trace requests. Log records are handed on as their bytes
(``otlp_logs.HeldRecord``), decoded when their trace is released.

Every span of a request ends up in exactly one of: accepted (acknowledged, will be
evaluated), rejected with a reason (reported as OTLP partial success, not retried), or the
whole request throttled (a retryable error; nothing was taken, the exporter sends it again).
Log records likewise, plus *ignored* (not a GenAI event of a span: acknowledged, counted,
not kept).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from otel_eval.assemble.engine import Admission
from otel_eval.base.model import LogEvent, Span
from otel_eval.decode import otlp, otlp_logs
from otel_eval.decode.otlp_logs import HeldRecord
from otel_eval.telemetry.metrics import Metrics


class Submitter(Protocol):
    """``assemble.engine.Engine`` (assemble and evaluate) or ``kafka.frontend.PublishingEngine``:
    spans (``signal="traces"``) or GenAI event records (``"logs"``), one door."""

    def submit(self, items: Sequence[Span] | Sequence[LogEvent] | Sequence[HeldRecord],
               source: str = ..., *,
               signal: str = ..., request: bytes | Callable[[], bytes] | None = ...,
               sender: str = ...) -> Admission: ...


@dataclass
class IngestResult:
    outcome: Literal["ok", "invalid", "throttled"]
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    message: str = ""

    signal: Literal["traces", "logs"] = "traces"

    def response(self) -> ExportTraceServiceResponse | ExportLogsServiceResponse:
        n = sum(self.rejected.values())
        if self.signal == "logs":
            logs = ExportLogsServiceResponse()
            if n:
                logs.partial_success.CopyFrom(ExportLogsPartialSuccess(
                    rejected_log_records=n, error_message=self.message))
            return logs
        resp = ExportTraceServiceResponse()
        if n:
            resp.partial_success.CopyFrom(ExportTracePartialSuccess(
                rejected_spans=n, error_message=self.message))
        return resp


def _message(rejected: Counter[str], what: str = "span(s)") -> str:
    if not rejected:
        return ""
    parts = ", ".join(f"{n} {r}" for r, n in sorted(rejected.items()))
    return f"rejected {sum(rejected.values())} {what}: {parts}"


class Ingest:
    def __init__(self, engine: Submitter, metrics: Metrics) -> None:
        self.engine = engine
        self.metrics = metrics

    def handle_bytes(self, body: bytes, protocol: str, sender: str = "") -> IngestResult:
        """``sender``: the authenticated client's token name ("" when auth is off)."""
        try:
            req, rejected = otlp.parse_request(body)
        except otlp.MalformedRequest as e:
            self.metrics.ingest.spans_rejected(protocol, "malformed_request", 0)
            return IngestResult("invalid", message=str(e))
        return self.handle_request(req, protocol, rejected, body, sender)

    def handle_json(self, body: bytes, protocol: str, sender: str = "") -> IngestResult:
        try:
            req = otlp.request_from_json(body)
        except ValueError as e:
            self.metrics.ingest.spans_rejected(protocol, "malformed_request", 0)
            return IngestResult("invalid", message=str(e))
        return self.handle_request(req, protocol, Counter(), req.SerializeToString, sender)

    def handle_request(self, req: ExportTraceServiceRequest, protocol: str,
                       rejected: Counter[str],
                       request: bytes | Callable[[], bytes] | None = None,
                       sender: str = "") -> IngestResult:
        started = time.perf_counter()
        decoded = otlp.decode_request(req)
        adm = self.engine.submit(decoded.spans, "otlp", request=request, sender=sender)
        if adm.throttled is not None:
            self.metrics.ingest.request_throttled(protocol, adm.throttled)
            return IngestResult("throttled", message=f"otel-eval is at capacity "
                                f"({adm.throttled}); retry later")
        rejected = rejected + decoded.reasons + adm.rejected
        self.metrics.ingest.spans_ingested(protocol, adm.accepted, rejected)
        self.metrics.ingest.export_duration(protocol, time.perf_counter() - started)
        return IngestResult("ok", adm.accepted, rejected, _message(rejected))

    # --- logs ------------------------------------------------------------------------------

    def handle_logs_bytes(self, body: bytes, protocol: str, sender: str = "") -> IngestResult:
        try:
            req = otlp_logs.parse_logs_request(body)
        except otlp.MalformedRequest as e:
            self.metrics.ingest.log_records(protocol, 0, {}, {"malformed_request": 0})
            return IngestResult("invalid", message=str(e), signal="logs")
        return self.handle_logs_request(req, protocol, sender, body)

    def handle_logs_json(self, body: bytes, protocol: str, sender: str = "") -> IngestResult:
        try:
            req = otlp_logs.logs_request_from_json(body)
        except ValueError as e:
            self.metrics.ingest.log_records(protocol, 0, {}, {"malformed_request": 0})
            return IngestResult("invalid", message=str(e), signal="logs")
        return self.handle_logs_request(req, protocol, sender, req.SerializeToString)

    def handle_logs_request(self, req: ExportLogsServiceRequest, protocol: str,
                            sender: str = "",
                            request: bytes | Callable[[], bytes] | None = None) -> IngestResult:
        decoded = otlp_logs.hold_logs(req)
        adm = self.engine.submit(decoded.records, "otlp", signal="logs", sender=sender,
                                 request=request) if decoded.records else Admission()
        if adm.throttled is not None:
            self.metrics.ingest.request_throttled(f"{protocol}_logs", adm.throttled)
            return IngestResult("throttled", message=f"otel-eval is at capacity "
                                f"({adm.throttled}); retry later", signal="logs")
        rejected = decoded.rejected + adm.rejected
        ignored = decoded.ignored + adm.ignored
        self.metrics.ingest.log_records(protocol, adm.accepted, ignored, rejected)
        return IngestResult("ok", adm.accepted, rejected, _message(rejected, "log record(s)"),
                            signal="logs")
