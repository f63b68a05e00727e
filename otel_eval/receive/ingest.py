"""The protocol-independent half of a receiver: bytes in, an OTLP answer out. The one door
for every source: the OTLP/gRPC and OTLP/HTTP receivers and the Kafka consumer.

    body -> decode_traces (otlp.parse_request, decode_request) -> Decoded -> admit:
        Engine.submit(spans, request, on_stored) -> accounting -> result
    body -> decode_logs (otlp_logs.parse_logs_request, hold_logs) -> Decoded -> admit:
        Engine.submit(signal="logs") -> accounting -> result

A receiver calls ``handle_*`` (decode and admit at once, accounted under its protocol). The
Kafka consumer decodes a record once (``decode_traces`` / ``decode_logs``) and ``admit``s it,
again after a throttle, with its own accounting (``IngestAccounting``: the Kafka metrics,
which account spans and log records under protocol ``kafka``) and an ``on_stored`` callback
that lets it commit the record's offset once its traces are stored.

``request`` is what the engine writes to its spool before answering (the body as received for
protobuf, the parsed request re-encoded for OTLP/JSON - only when a spool asks for it), for
log requests as for trace requests. Log records are handed on as their bytes
(``otlp_logs.HeldRecord``), decoded when their trace is released.

Every span of a request ends up in exactly one of: accepted (acknowledged, will be
evaluated), rejected with a reason (reported as OTLP partial success, not retried; among
them ``service_share``: the traces a service past its share would open, in a request holding
other services too), or the whole request throttled (a retryable error; nothing was taken,
the exporter sends it again).
Log records likewise, plus *ignored* (not a GenAI event of a span: acknowledged, counted,
not kept).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

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
from otel_eval.decode import otlp, otlp_json, otlp_logs
from otel_eval.decode.otlp_logs import HeldRecord
from otel_eval.receive.decoding import DecodeBudget
from otel_eval.telemetry.ingest import IngestMetrics
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

# What a metrics exporter is told (and serve's log says once).
UNSUPPORTED_METRICS = ("otel-eval takes traces and logs, not metrics: set "
                       "OTEL_METRICS_EXPORTER=none in the app, or send its metrics to your "
                       "collector")


class Submitter(Protocol):
    """``assemble.engine.Engine`` (assemble and evaluate) or ``kafka.frontend.PublishingEngine``:
    spans (``signal="traces"``) or GenAI event records (``"logs"``), one door."""

    def submit(self, items: Sequence[Span] | Sequence[LogEvent] | Sequence[HeldRecord],
               source: str = ..., on_stored: Callable[[], None] | None = ..., *,
               signal: str = ..., request: bytes | Callable[[], bytes] | None = ...,
               sender: str = ...) -> Admission: ...


class IngestAccounting(Protocol):
    """Where one door's accounting goes: received = accepted + rejected (spans), + ignored
    (log records), each with a reason; a throttled request counted once per attempt."""

    def spans_ingested(self, accepted: int, rejected: Mapping[str, int]) -> None: ...
    def log_records_ingested(self, accepted: int, ignored: Mapping[str, int],
                             rejected: Mapping[str, int]) -> None: ...
    def throttled(self, reason: str) -> None: ...


class _ByProtocol:
    """``IngestAccounting`` of a receiver: the receiver metrics labelled by protocol."""

    def __init__(self, metrics: IngestMetrics, protocol: str, throttle_label: str) -> None:
        self.metrics, self.protocol, self.throttle_label = metrics, protocol, throttle_label

    def spans_ingested(self, accepted: int, rejected: Mapping[str, int]) -> None:
        self.metrics.spans_ingested(self.protocol, accepted, rejected)

    def log_records_ingested(self, accepted: int, ignored: Mapping[str, int],
                             rejected: Mapping[str, int]) -> None:
        self.metrics.log_records(self.protocol, accepted, dict(ignored), dict(rejected))

    def throttled(self, reason: str) -> None:
        self.metrics.request_throttled(self.throttle_label, reason)


@dataclass(slots=True)
class Decoded:
    """One request (or Kafka record) decoded, before the engine saw it: its spans or GenAI
    event records, and the items dropped while decoding, by reason."""

    signal: Literal["traces", "logs"]
    items: list[Span] | list[HeldRecord]
    rejected: Counter[str]
    ignored: Counter[str] = field(default_factory=Counter)

    @property
    def trace_ids(self) -> frozenset[str]:
        return frozenset(x.trace_id for x in self.items)


def decode_traces(body: bytes, encoding: str = "otlp_proto") -> Decoded:
    """An ExportTraceServiceRequest (protobuf, or ``otlp_json``) decoded as every door
    decodes it: spans with invalid UTF-8 salvaged and counted, invalid ids counted. Raises
    ValueError (``otlp.MalformedRequest``) when it is no such request at all."""
    if encoding == "otlp_json":
        req, rejected = otlp_json.parse_request(body)
    else:
        req, rejected = otlp.parse_request(body)
    decoded = otlp.decode_request(req)
    return Decoded("traces", decoded.spans, rejected + decoded.reasons)


def decode_logs(body: bytes, encoding: str = "otlp_proto") -> Decoded:
    """An ExportLogsServiceRequest decoded as every door decodes it: the GenAI event records
    held as bytes, the others ignored or rejected with a reason. Raises ValueError."""
    if encoding == "otlp_json":
        req, rejected = otlp_logs.parse_logs_json(body)
    else:
        req, rejected = otlp_logs.parse_logs_request(body)
    return _held(req, rejected)


def _held(req: ExportLogsServiceRequest, rejected: Counter[str], every: bool = False
          ) -> Decoded:
    held = otlp_logs.hold_logs(req, every)
    return Decoded("logs", held.records, rejected + held.rejected, held.ignored)


@dataclass
class IngestResult:
    outcome: Literal["ok", "invalid", "throttled", "too_large"]
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    message: str = ""

    signal: Literal["traces", "logs"] = "traces"
    reason: str = ""  # why it was throttled (``Admission.throttled``)

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
    """``metrics``: the receivers' (``handle_*``); the Kafka consumer, which ``admit``s with
    its own accounting, passes none. ``every_log_record``: the engine is the publishing front
    end (``serve --kafka-publish``), which writes every log record it is given to the logs
    topic under its resource and scope, as the collector's kafka exporter would
    (``otlp_logs.hold_logs(every=True)``): none is ignored."""

    def __init__(self, engine: Submitter, metrics: Metrics | None = None, *,
                 every_log_record: bool = False,
                 decoding: DecodeBudget | None = None) -> None:
        self.engine = engine
        self.decoding = decoding
        self._metrics = metrics
        self.every_log_record = every_log_record
        self._metrics_told = threading.Event()  # the metrics export warning was logged

    @property
    def metrics(self) -> Metrics:
        if self._metrics is None:
            raise RuntimeError("Ingest without receiver metrics: admit() only")
        return self._metrics

    def unsupported_signal(self, protocol: str) -> str:
        """An OTLP metrics export (``opentelemetry-instrument`` sends them by default): no
        pipeline here takes them, and the Collector's OTLP receiver answers a signal without
        one the same (no service: gRPC UNIMPLEMENTED, HTTP 404), so it is refused, never
        acknowledged; counted (``requests_refused{protocol, unsupported_signal}``) and said
        once as a warning naming the fix (debug for the exporter's next ones, every export
        interval). The answer's message."""
        self.metrics.ingest.request_refused(protocol, "unsupported_signal")
        level = logging.DEBUG if self._metrics_told.is_set() else logging.WARNING
        self._metrics_told.set()
        log.log(level, "an OTLP metrics export reached the OTLP/%s receiver: %s",
                "gRPC" if protocol == "grpc" else "HTTP", UNSUPPORTED_METRICS)
        return UNSUPPORTED_METRICS

    def _refused(self, refused: str, protocol: str, label: str, logs: bool) -> IngestResult:
        """A request the decoding budget did not take: too large for it whole (refused), or
        not with the requests being decoded (throttled, retryable)."""
        signal: Literal["traces", "logs"] = "logs" if logs else "traces"
        if refused == "decoding":
            self.metrics.ingest.request_throttled(label, "decoding")
            return IngestResult("throttled", message="otel-eval is at capacity (requests "
                                "being decoded); retry later", signal=signal,
                                reason="decoding")
        if logs:
            self.metrics.ingest.log_records(protocol, 0, {}, {"too_large": 0})
        else:
            self.metrics.ingest.spans_rejected(protocol, "too_large", 0)
        self.metrics.ingest.request_refused(protocol, "too_large")
        assert self.decoding is not None
        return IngestResult("too_large", message="decoding this request would hold more than "
                            f"receiver.max_decoding_bytes ({self.decoding.max_bytes} bytes): "
                            "send fewer spans per request", signal=signal)

    def handle_bytes(self, body: bytes, protocol: str, sender: str = "") -> IngestResult:
        """``sender``: the authenticated client's token name ("" when auth is off)."""
        if self.decoding is None:
            return self._handle_bytes(body, protocol, sender)
        with self.decoding.charged(body) as refused:
            if refused:
                return self._refused(refused, protocol, protocol, logs=False)
            return self._handle_bytes(body, protocol, sender)

    def _handle_bytes(self, body: bytes, protocol: str, sender: str) -> IngestResult:
        try:
            req, rejected = otlp.parse_request(body)
        except otlp.MalformedRequest as e:
            self.metrics.ingest.spans_rejected(protocol, "malformed_request", 0)
            self.metrics.ingest.request_refused(protocol, "malformed_request")
            return IngestResult("invalid", message=str(e))
        return self.handle_request(req, protocol, rejected, body, sender)

    def handle_json(self, body: bytes, protocol: str, sender: str = "") -> IngestResult:
        if self.decoding is None:
            return self._handle_json(body, protocol, sender)
        with self.decoding.charged(body, json=True) as refused:
            if refused:
                return self._refused(refused, protocol, protocol, logs=False)
            return self._handle_json(body, protocol, sender)

    def _handle_json(self, body: bytes, protocol: str, sender: str) -> IngestResult:
        try:
            req, rejected = otlp_json.parse_request(body)
        except ValueError as e:
            self.metrics.ingest.spans_rejected(protocol, "malformed_request", 0)
            self.metrics.ingest.request_refused(protocol, "malformed_request")
            return IngestResult("invalid", message=str(e))
        return self.handle_request(req, protocol, rejected, req.SerializeToString, sender)

    def handle_request(self, req: ExportTraceServiceRequest, protocol: str,
                       rejected: Counter[str],
                       request: bytes | Callable[[], bytes] | None = None,
                       sender: str = "") -> IngestResult:
        started = time.perf_counter()
        decoded = otlp.decode_request(req)
        res = self.admit(Decoded("traces", decoded.spans, rejected + decoded.reasons),
                         _ByProtocol(self.metrics.ingest, protocol, protocol), request=request,
                         sender=sender)
        if res.outcome == "ok":
            self.metrics.ingest.export_duration(protocol, time.perf_counter() - started)
        return res

    def admit(self, decoded: Decoded, account: IngestAccounting, *, source: str = "otlp",
              request: bytes | Callable[[], bytes] | None = None, sender: str = "",
              on_stored: Callable[[], None] | None = None) -> IngestResult:
        """Hand ``decoded`` to the engine: all taken (some perhaps rejected, with reasons) or
        all throttled (nothing taken: the sender, or the Kafka consumer, tries again)."""
        logs = decoded.signal == "logs"
        # only what this door has: a Kafka record is not spooled (Kafka is the log) and has no
        # authenticated sender; a receiver's request is not committed anywhere
        kw: dict[str, Any] = {"signal": decoded.signal}
        if request is not None:
            kw["request"] = request
        if sender:
            kw["sender"] = sender
        if on_stored is not None:
            kw["on_stored"] = on_stored
        if decoded.items:
            adm = self.engine.submit(decoded.items, source, **kw)
        else:  # nothing to take (none sent, or every one rejected): a success whatever the
            # engine's state, for spans as for records (OTLP: an empty request SHOULD be
            # answered with success; a 429 made the exporter retry it)
            adm = Admission()
            if on_stored is not None:
                on_stored()  # nothing to wait for (a Kafka record's offset is done)
        if adm.throttled is not None:
            account.throttled(adm.throttled)
            return IngestResult("throttled", message=f"otel-eval is at capacity "
                                f"({adm.throttled}); retry later", signal=decoded.signal,
                                reason=adm.throttled)
        rejected = decoded.rejected + adm.rejected
        if logs:
            account.log_records_ingested(adm.accepted, decoded.ignored + adm.ignored, rejected)
        else:
            account.spans_ingested(adm.accepted, rejected)
        return IngestResult("ok", adm.accepted, rejected,
                            _message(rejected, "log record(s)" if logs else "span(s)"),
                            signal=decoded.signal)

    # --- logs ------------------------------------------------------------------------------

    def handle_logs_bytes(self, body: bytes, protocol: str, sender: str = "") -> IngestResult:
        if self.decoding is None:
            return self._handle_logs_bytes(body, protocol, sender)
        with self.decoding.charged(body) as refused:
            if refused:
                return self._refused(refused, protocol, f"{protocol}_logs", logs=True)
            return self._handle_logs_bytes(body, protocol, sender)

    def _handle_logs_bytes(self, body: bytes, protocol: str, sender: str) -> IngestResult:
        try:
            req, rejected = otlp_logs.parse_logs_request(body)
        except otlp.MalformedRequest as e:
            self.metrics.ingest.log_records(protocol, 0, {}, {"malformed_request": 0})
            self.metrics.ingest.request_refused(protocol, "malformed_request")
            return IngestResult("invalid", message=str(e), signal="logs")
        return self.handle_logs_request(req, protocol, sender, body, rejected)

    def handle_logs_json(self, body: bytes, protocol: str, sender: str = "") -> IngestResult:
        if self.decoding is None:
            return self._handle_logs_json(body, protocol, sender)
        with self.decoding.charged(body, json=True) as refused:
            if refused:
                return self._refused(refused, protocol, f"{protocol}_logs", logs=True)
            return self._handle_logs_json(body, protocol, sender)

    def _handle_logs_json(self, body: bytes, protocol: str, sender: str) -> IngestResult:
        try:
            req, rejected = otlp_logs.parse_logs_json(body)
        except ValueError as e:
            self.metrics.ingest.log_records(protocol, 0, {}, {"malformed_request": 0})
            self.metrics.ingest.request_refused(protocol, "malformed_request")
            return IngestResult("invalid", message=str(e), signal="logs")
        return self.handle_logs_request(req, protocol, sender, req.SerializeToString,
                                        rejected)

    def handle_logs_request(self, req: ExportLogsServiceRequest, protocol: str,
                            sender: str = "",
                            request: bytes | Callable[[], bytes] | None = None,
                            rejected: Counter[str] | None = None) -> IngestResult:
        """``rejected``: the records the parse dropped (invalid UTF-8, a pre-1.0 exporter's
        ``instrumentation_library_logs``), counted with the rest."""
        started = time.perf_counter()
        label = f"{protocol}_logs"  # a logs request's, on requests_throttled and the duration
        res = self.admit(_held(req, rejected or Counter(), self.every_log_record),
                         _ByProtocol(self.metrics.ingest, protocol, label),
                         request=request, sender=sender)
        if res.outcome == "ok":
            self.metrics.ingest.export_duration(label, time.perf_counter() - started)
        return res
