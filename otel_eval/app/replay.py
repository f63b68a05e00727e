"""Replay: re-emit traces (offline files, usually) as OTLP spans through the official
OpenTelemetry SDK exporters, for backfill and load generation.

    traces -> sdk ReadableSpan (original trace/span/parent ids, times, kind, status,
              attributes, events, resource, scope) -> OTLPSpanExporter (gRPC or HTTP)
           -> their GenAI event log records (``Trace.logs``: the content instrumentations
              send as logs) -> sdk ReadableLogRecord -> OTLPLogExporter (the same protocol)

Spans are exported in batches straight to the exporter: no tracer, no sampler, no id
generator, so nothing is re-timed or re-identified and a receiver sees what the file holds.
A trace's log records are sent before the batch holding its spans (a receiver joins them
whichever comes first; records after a released run would re-open it).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, cast

from opentelemetry._logs import LogRecord
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)

from otel_eval.base.configcheck import parse_endpoint
from otel_eval.base.model import LogEvent, Span, Trace

__all__ = ["Rejections", "ReplayError", "Sent", "make_exporter", "make_log_exporter", "replay",
           "to_readable_log", "to_readable_span"]

Protocol = Literal["grpc", "http"]
# Spans per Export call: the SDK BatchSpanProcessor's default max_export_batch_size.
BATCH_SPANS = 512
# Estimated request size per Export call, bytes. Agent spans carry whole conversations, and
# gRPC servers (the collector included) refuse messages over 4 MiB by default.
BATCH_BYTES = 3 * 1024 * 1024
_KINDS = {"internal": SpanKind.INTERNAL, "server": SpanKind.SERVER, "client": SpanKind.CLIENT,
          "producer": SpanKind.PRODUCER, "consumer": SpanKind.CONSUMER}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class ReplayError(RuntimeError):
    """The exporter gave up on a batch (after its own retries)."""


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    """Attributes the SDK encoder accepts: None values dropped (OTLP has no null)."""
    if all(v is not None for v in attrs.values()):
        return attrs
    return {k: v for k, v in attrs.items() if v is not None}


def _context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=False,
                       trace_flags=_SAMPLED)


def to_readable_span(span: Span, resource: Resource) -> ReadableSpan:
    """One ``model.Span`` as the SDK's ``ReadableSpan``, ids and times unchanged.
    Raises ValueError for ids that are not hex."""
    status = Status(StatusCode.UNSET)
    if span.status == "error":
        status = Status(StatusCode.ERROR, span.status_message or None)
    elif span.status == "ok":
        status = Status(StatusCode.OK)
    return ReadableSpan(
        name=span.name,
        context=_context(span.trace_id, span.span_id),
        parent=_context(span.trace_id, span.parent_span_id) if span.parent_span_id else None,
        resource=resource,
        attributes=_clean(span.attributes),
        events=[Event(e.name, _clean(e.attributes), e.time_unix_nano) for e in span.events],
        kind=_KINDS.get(span.kind, SpanKind.INTERNAL),
        status=status,
        start_time=span.start_ns,
        end_time=span.end_ns or None,
        instrumentation_scope=InstrumentationScope(span.scope),
    )


class Rejections:
    """What the receiver said it rejected (OTLP partial success), summed over the batches:
    the SDK exporters count a batch with rejected spans as a success and drop the answer."""

    def __init__(self) -> None:
        self.spans = 0
        self.log_records = 0
        self.messages: Counter[str] = Counter()  # the receiver's error_message -> batches

    def add(self, answer: ExportTraceServiceResponse | ExportLogsServiceResponse) -> None:
        if isinstance(answer, ExportLogsServiceResponse):
            rejected = answer.partial_success.rejected_log_records
            self.log_records += rejected
        else:
            rejected = answer.partial_success.rejected_spans
            self.spans += rejected
        if rejected:
            self.messages[answer.partial_success.error_message or "no reason given"] += 1

    def summary(self) -> str:
        return "; ".join(f"{m} (x{n})" if n > 1 else m for m, n in self.messages.items())


class _WatchedStub:
    def __init__(self, stub: Any, rejections: Rejections) -> None:
        self.stub, self.rejections = stub, rejections

    def Export(self, *args: Any, **kwargs: Any) -> Any:  # the gRPC method
        answer = self.stub.Export(*args, **kwargs)
        self.rejections.add(answer)
        return answer


def _authority(endpoint: str) -> str:
    """``HOST:PORT`` checked, an IPv6 address in brackets (``[::1]:4317``: what gRPC targets
    and URLs take; ``::1:4317`` is neither)."""
    host, port = parse_endpoint(endpoint.removeprefix("http://"))
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _grpc(exporter: type[Any], endpoint: str, timeout_s: float,
          rejections: Rejections | None) -> Any:
    """A gRPC exporter of class ``exporter`` whose stub adds the receiver's partial-success
    answers to ``rejections``."""

    class Watched(exporter):
        # the exporter sets _client in __init__ and again when it reconnects
        @property
        def _client(self) -> Any:
            return self.__dict__.get("_watched")

        @_client.setter
        def _client(self, stub: Any) -> None:
            self.__dict__["_watched"] = stub if stub is None or rejections is None \
                else _WatchedStub(stub, rejections)

    return Watched(endpoint=_authority(endpoint), insecure=True, timeout=timeout_s)


def _http_url(endpoint: str, path: str) -> str:
    """The URL an HTTP exporter posts to: ``endpoint`` as a URL (``/v1/traces`` given for
    the spans names the receiver: the records go to its ``/v1/logs``), else ``path``."""
    url = endpoint if "://" in endpoint else f"http://{_authority(endpoint)}"
    if path != "/v1/traces":
        url = url.removesuffix("/v1/traces")
    return url + path if url.count("/") < 3 else url


def make_exporter(endpoint: str, protocol: Protocol = "grpc", timeout_s: float = 10.0,
                  rejections: Rejections | None = None) -> SpanExporter:
    """The SDK exporter for ``endpoint`` (``HOST:PORT``, or a URL for HTTP), plaintext; with
    ``rejections``, the receiver's partial-success answers are added to it."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )
        return cast(SpanExporter, _grpc(GrpcExporter, endpoint, timeout_s, rejections))
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )
        exporter = HttpExporter(endpoint=_http_url(endpoint, "/v1/traces"), timeout=timeout_s)
        if rejections is not None:
            _watch_http(exporter, rejections, ExportTraceServiceResponse)
        return exporter
    raise ValueError(f"protocol must be grpc or http, got {protocol!r}")


def make_log_exporter(endpoint: str, protocol: Protocol = "grpc", timeout_s: float = 10.0,
                      rejections: Rejections | None = None) -> LogRecordExporter:
    """The SDK log exporter for ``endpoint``, as ``make_exporter`` makes the span one: the
    records go where the spans go (``/v1/logs`` over HTTP)."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
            OTLPLogExporter as GrpcLogExporter,
        )
        return cast(LogRecordExporter, _grpc(GrpcLogExporter, endpoint, timeout_s, rejections))
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http._log_exporter import (
            OTLPLogExporter as HttpLogExporter,
        )
        exporter = HttpLogExporter(endpoint=_http_url(endpoint, "/v1/logs"), timeout=timeout_s)
        if rejections is not None:
            _watch_http(exporter, rejections, ExportLogsServiceResponse)
        return exporter
    raise ValueError(f"protocol must be grpc or http, got {protocol!r}")


def _watch_http(exporter: Any, rejections: Rejections, answer: Any) -> None:
    client = exporter._client
    submit = client._submit

    def watched(data: bytes, timeout: float) -> Any:
        result = submit(data, timeout)
        if result.status_code is not None and 200 <= result.status_code < 300:
            with contextlib.suppress(Exception):  # an answer that is not OTLP: no reasons
                rejections.add(answer.FromString(result.content()))
        return result

    client._submit = watched


def to_readable_log(record: LogEvent, resource: Resource) -> ReadableLogRecord:
    """One GenAI event log record as the SDK's ``ReadableLogRecord``, ids, time, observed
    time (what orders a span's records stamped alike: sent again as read, else the SDK's
    now), event name, attributes and body unchanged. Raises ValueError for ids that are
    not hex."""
    context = set_span_in_context(NonRecordingSpan(_context(record.trace_id,
                                                            record.span_id or "0")))
    return ReadableLogRecord(LogRecord(
        timestamp=record.time_unix_nano or None,
        observed_timestamp=record.observed_time_unix_nano or None, context=context,
        body=record.body, attributes=_clean(record.attributes),
        event_name=record.name or None), resource)


def _readable(traces: Iterable[Trace]) -> Iterator[tuple[list[ReadableLogRecord],
                                                          list[ReadableSpan]]]:
    """Per trace, its log records and its spans as the SDK's (a record under the resource of
    the trace's first span: the file's own record resource is not kept, and a receiver
    joins a record to its spans by the ids)."""
    for trace in traces:
        # one SDK Resource per resource dict of the trace; per trace, because an id() is only
        # unique while its object lives (the SDK encoder groups equal Resources anyway)
        resources: dict[int, Resource] = {}
        spans = []
        for span in trace.spans:
            resource = resources.get(id(span.resource))
            if resource is None:
                resource = Resource(_clean(dict(span.resource)))
                resources[id(span.resource)] = resource
            spans.append(to_readable_span(span, resource))
        first = spans[0].resource if spans else Resource({})
        yield [to_readable_log(r, first) for r in trace.logs], spans


def _size(span: ReadableSpan) -> int:
    """A cheap over-estimate of the span's encoded size (the text dominates)."""
    size = 128 + len(span.name)
    for key, value in (span.attributes or {}).items():
        size += 16 + len(key) + (len(value) if isinstance(value, str | bytes) else 16)
    for event in span.events:
        size += 64 + sum(len(str(v)) for v in (event.attributes or {}).values())
    return size


@dataclass
class Sent:
    """What ``replay`` exported."""

    spans: int = 0
    log_records: int = 0


def replay(traces: Iterable[Trace], endpoint: str, protocol: Protocol = "grpc", *,
           exporter: SpanExporter | None = None, batch_spans: int = BATCH_SPANS,
           batch_bytes: int = BATCH_BYTES, rejections: Rejections | None = None,
           log_exporter: LogRecordExporter | None = None, sent: Sent | None = None) -> int:
    """Export every span of ``traces``, and every log record they hold (the GenAI events a
    file's log lines carried); returns the number of spans exported (``sent`` counts both).
    Batches hold at most ``batch_spans`` spans and about ``batch_bytes`` bytes (a single
    larger span goes alone); a trace's records go before the batch holding its spans, through
    ``log_exporter``, else one made for ``endpoint`` when the span exporter is made here too
    (a caller that brings its own span exporter and no log exporter sends spans only).
    Raises ReplayError when an exporter fails a batch (earlier batches were delivered)."""
    exp = exporter or make_exporter(endpoint, protocol, rejections=rejections)
    out = sent if sent is not None else Sent()
    logs = _Logs(log_exporter, None if exporter is not None else
                 (endpoint, protocol, rejections), out)
    batch: list[ReadableSpan] = []
    size = 0
    try:
        for records, spans in _readable(traces):
            logs.add(records)
            for span in spans:
                span_size = _size(span)
                if batch and (len(batch) >= batch_spans or size + span_size > batch_bytes):
                    logs.flush()
                    out.spans += _export(exp, batch, out.spans)
                    batch, size = [], 0
                batch.append(span)
                size += span_size
        logs.flush()
        if batch:
            out.spans += _export(exp, batch, out.spans)
    finally:
        if exporter is None:
            exp.shutdown()
        logs.shutdown()
    return out.spans


class _Logs:
    """The records waiting for the next span batch, and the log exporter (made on the first
    record when ``make`` says for where)."""

    def __init__(self, exporter: LogRecordExporter | None,
                 make: tuple[str, Protocol, Rejections | None] | None, sent: Sent) -> None:
        self.exporter, self.make, self.sent = exporter, make, sent
        self.made = False
        self.pending: list[ReadableLogRecord] = []

    def add(self, records: list[ReadableLogRecord]) -> None:
        if records and (self.exporter is not None or self.make is not None):
            self.pending += records

    def flush(self) -> None:
        if not self.pending:
            return
        if self.exporter is None and self.make is not None:
            endpoint, protocol, rejections = self.make
            self.exporter = make_log_exporter(endpoint, protocol, rejections=rejections)
            self.made = True
        pending, self.pending = self.pending, []
        assert self.exporter is not None
        for i in range(0, len(pending), BATCH_SPANS):
            batch = pending[i:i + BATCH_SPANS]
            if self.exporter.export(batch) is not LogRecordExportResult.SUCCESS:
                raise ReplayError(f"exporter failed a batch of {len(batch)} log records "
                                  f"after {self.sent.log_records} log records were delivered")
            self.sent.log_records += len(batch)

    def shutdown(self) -> None:
        if self.made and self.exporter is not None:
            self.exporter.shutdown()


def _export(exporter: SpanExporter, batch: list[ReadableSpan], sent: int) -> int:
    if exporter.export(batch) is not SpanExportResult.SUCCESS:
        raise ReplayError(f"exporter failed a batch of {len(batch)} spans "
                          f"after {sent} spans were delivered")
    return len(batch)
