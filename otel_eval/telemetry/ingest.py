"""Self-metrics of the way in: the receivers (spans and GenAI log records received, accepted,
rejected, throttled, refused; connections closed) and assembly (open traces, pending spans
and records, traces released and re-opened). The metric list: ``telemetry.metrics``."""

from __future__ import annotations

from collections.abc import Mapping

from otel_eval.telemetry.declare import Declarer
from otel_eval.telemetry.labels import UNKNOWN

_EXPORT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class IngestMetrics:
    def __init__(self, d: Declarer) -> None:
        c, g = d.counter, d.gauge
        self.c_received = c("receiver_spans_received", "Spans received.", ["protocol"])
        self.c_accepted = c("receiver_spans_accepted", "Spans acknowledged.", ["protocol"])
        self.c_rejected = c("receiver_spans_rejected", "Spans rejected, by reason.",
                            ["protocol", "reason"])
        self.c_throttled = c("receiver_requests_throttled",
                             "Export requests refused with a retryable error, by reason and "
                             "protocol (grpc, http: trace requests; grpc_logs, http_logs: "
                             "logs requests).", ["protocol", "reason"])
        self.c_refused = c("receiver_requests_refused",
                           "Requests refused whole, by reason: before reading them "
                           "(unauthenticated, forbidden, unsupported_content_type, "
                           "unsupported_content_encoding: brotli, zstd, "
                           "unsupported_transfer_encoding: not chunked, or in HTTP/1.0, "
                           "length_required: neither a length nor chunked, "
                           "unsupported_signal: an OTLP metrics export), or "
                           "unread or undecodable (too_large, malformed_request: their "
                           "spans cannot be counted), or receive_timeout, or not HTTP/1.x "
                           "(bad_request_line, header_too_large, unsupported_http_version: "
                           "HTTP/2, a gRPC exporter; tls_client: https:// at a plain-text "
                           "port).",
                           ["protocol", "reason"])
        self.c_conn_closed = c("receiver_connections_closed",
                               "HTTP connections closed before an answer (limits, deadlines, "
                               "failed TLS handshakes) or by the client mid-request, by "
                               "reason.", ["listener", "reason"])
        self.h_export = d.histogram("receiver_export_duration_seconds",
                                        "Time to handle one Export request, by protocol "
                                        "(grpc, http: trace requests; grpc_logs, http_logs: "
                                        "logs requests).", ["protocol"],
                                        _EXPORT_BUCKETS)
        self.g_open = g("assembly_open_traces", "Traces being assembled.")
        self.g_pending = g("assembly_pending_spans", "Spans accepted and not yet evaluated.")
        self.c_released = c("assembly_traces_released", "Traces released for evaluation.",
                            ["status", "reason"])
        self.c_released_spans = c("assembly_spans_released", "Spans in released traces.")
        self.c_reopened = c("assembly_traces_reopened", "Released traces re-opened by late spans.")
        self.c_late = c("assembly_late_spans", "Late spans that re-opened a released trace.")
        self.c_carried = c("assembly_spans_reopened", "Spans of released traces taken back "
                           "into assembly by a re-open (released again with the trace).")
        self.c_handed_over = c("assembly_spans_handed_over",
                               "Spans of runs in flight forgotten unjudged when their Kafka "
                               "partition was revoked (its next owner replays them).")
        self.c_logs_received = c("receiver_log_records_received", "Log records received.",
                                 ["protocol"])
        self.c_logs_accepted = c("receiver_log_records_accepted",
                                 "GenAI event log records held for their span.", ["protocol"])
        self.c_logs_ignored = c("receiver_log_records_ignored",
                                "Log records that are not GenAI events of a span, by reason.",
                                ["protocol", "reason"])
        self.c_logs_rejected = c("receiver_log_records_rejected",
                                 "Log records rejected, by reason.", ["protocol", "reason"])
        self.g_pending_logs = g("assembly_pending_log_records",
                                "GenAI event log records held and not yet evaluated.")
        self.c_logs_dropped = c("assembly_log_records_dropped",
                                "Held log records dropped, by reason.", ["reason"])

    def spans_received(self, protocol: str, n: int) -> None:
        self.c_received.labels(protocol).inc(n)

    def spans_accepted(self, protocol: str, n: int) -> None:
        self.c_accepted.labels(protocol).inc(n)

    def spans_rejected(self, protocol: str, reason: str, n: int) -> None:
        self.c_rejected.labels(protocol, reason).inc(n)

    def spans_ingested(self, protocol: str, accepted: int, rejected: Mapping[str, int]) -> None:
        """The one ingest accounting, for every source (grpc, http, kafka): spans offered =
        accepted + rejected with a reason (decode, UTF-8 salvage, assembly)."""
        self.spans_received(protocol, accepted + sum(rejected.values()))
        self.spans_accepted(protocol, accepted)
        for reason, n in rejected.items():
            self.spans_rejected(protocol, reason, n)

    def request_throttled(self, protocol: str, reason: str) -> None:
        self.c_throttled.labels(protocol, reason).inc()

    def request_refused(self, protocol: str, reason: str) -> None:
        """``protocol``: grpc | http | admin; ``reason``: unauthenticated | forbidden |
        receive_timeout (gRPC: no message within grpc_receive_timeout_s) |
        unsupported_content_type | unsupported_content_encoding (one not decoded here: br,
        zstd) | unsupported_transfer_encoding (one not chunked: 501; any in HTTP/1.0: 400) |
        length_required (neither Content-Length nor chunked: 411) | unsupported_signal (an
        OTLP metrics export) | too_large |
        malformed_request (an export whose spans cannot be counted: each counts here, or a
        sender whose every export is refused shows nowhere); refused by the HTTP server
        before a handler (``httpserver.REFUSE_REASONS``): bad_request_line |
        header_too_large | unsupported_http_version | tls_client."""
        self.c_refused.labels(protocol, reason).inc()

    def connection_closed(self, listener: str, reason: str) -> None:
        """``listener``: http | admin; ``reason``: one of ``httpserver.CLOSE_REASONS``."""
        self.c_conn_closed.labels(listener, reason).inc()

    def export_duration(self, protocol: str, seconds: float) -> None:
        self.h_export.labels(protocol).observe(seconds)

    def log_records(self, protocol: str, accepted: int, ignored: dict[str, int],
                    rejected: dict[str, int]) -> None:
        """One logs Export request's accounting (received = accepted + ignored + rejected)."""
        total = accepted + sum(ignored.values()) + sum(rejected.values())
        self.c_logs_received.labels(protocol).inc(total)
        self.c_logs_accepted.labels(protocol).inc(accepted)
        for reason, n in ignored.items():
            self.c_logs_ignored.labels(protocol, reason).inc(n)
        for reason, n in rejected.items():
            self.c_logs_rejected.labels(protocol, reason).inc(n)

    def pending_log_records(self, n: int) -> None:
        self.g_pending_logs.set(n)

    def log_records_dropped(self, reason: str, n: int) -> None:
        self.c_logs_dropped.labels(reason).inc(n)

    def open_traces(self, n: int) -> None:
        self.g_open.set(n)

    def pending_spans(self, n: int) -> None:
        self.g_pending.set(n)

    def trace_released(self, status: str, reason: str, n_spans: int) -> None:
        self.c_released.labels(status, reason or UNKNOWN).inc()
        self.c_released_spans.inc(n_spans)

    def trace_reopened(self, n_traces: int, n_late_spans: int, n_carried: int = 0) -> None:
        """``n_carried``: the spans the re-opened traces already held (pending again)."""
        self.c_reopened.inc(n_traces)
        self.c_late.inc(n_late_spans)
        self.c_carried.inc(n_carried)

    def spans_handed_over(self, n: int) -> None:
        """Spans of open traces forgotten unjudged (a revoked Kafka partition's runs)."""
        self.c_handed_over.inc(n)
