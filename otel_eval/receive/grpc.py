"""OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` and
``opentelemetry.proto.collector.logs.v1.LogsService/Export`` (GenAI events sent as logs).

A synchronous ``grpc.server`` on a thread pool: decoding holds the GIL either way, sync and
``grpc.aio`` are even within noise on decode-heavy load (bench/grpc_server.py, figures in
bench/README.md), and a sync handler can simply block on engine admission or a Kafka ack.
The request arrives as raw bytes (no generated deserializer) so that a malformed body becomes
INVALID_ARGUMENT with a counted reason instead of grpc's opaque INTERNAL, and so spans with
invalid UTF-8 can be salvaged one by one.

Security (``receiver.security``): TLS server credentials that follow the certificate files,
and an interceptor refusing calls without a known bearer token (UNAUTHENTICATED) for every
method registered on this server.

Throttling follows the OTLP spec: RESOURCE_EXHAUSTED with a ``google.rpc.RetryInfo`` detail in
``grpc-status-details-bin`` (and, for the Python SDK exporter, in ``google.rpc.retryinfo-bin``),
which OTLP exporters honour before retrying.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from otel_eval.receive.config import ReceiverConfig
from otel_eval.receive.ingest import Ingest, IngestResult
from otel_eval.receive.security import BearerAuth, TlsFiles, metadata_authorization
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"


class _AuthInterceptor(grpc.ServerInterceptor):
    """Refuses every method (traces, logs, ...) without a known bearer token: the request
    body is never deserialized. Auth off: passes everything through."""

    def __init__(self, auth: BearerAuth, metrics: Metrics) -> None:
        self.auth = auth
        self.metrics = metrics

        def refuse(_request: object, context: grpc.ServicerContext) -> None:
            self.metrics.request_refused("grpc", "unauthenticated")
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or unknown bearer token")

        self._refusal = grpc.unary_unary_rpc_method_handler(
            refuse, request_deserializer=lambda _raw: b"")  # never parsed

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if not self.auth.enabled or self.auth.identify(
                metadata_authorization(details.invocation_metadata)) is not None:
            return continuation(details)
        return self._refusal


class GrpcReceiver:
    def __init__(self, config: ReceiverConfig, ingest: Ingest) -> None:
        self.config = config
        self.ingest = ingest
        self._server: grpc.Server | None = None
        self._pool = futures.ThreadPoolExecutor(config.grpc_workers,
                                                thread_name_prefix="otlp-grpc")
        self.port = 0
        self.auth = BearerAuth(config.bearer_tokens)
        self.tls: TlsFiles | None = None

    def start(self) -> None:
        cfg = self.config
        self._server = grpc.server(
            self._pool, interceptors=[_AuthInterceptor(self.auth, self.ingest.metrics)],
            options=[("grpc.max_receive_message_length", cfg.max_message_bytes),
                     ("grpc.max_send_message_length", 4 * 1024 * 1024)])
        def unary(fn: Callable[[bytes, grpc.ServicerContext], object]) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=None,
                response_serializer=lambda r: r.SerializeToString())

        self._server.add_generic_rpc_handlers((
            grpc.method_handlers_generic_handler(SERVICE, {"Export": unary(self._export)}),
            grpc.method_handlers_generic_handler(LOGS_SERVICE,
                                                 {"Export": unary(self._export_logs)})))
        if cfg.tls.enabled:
            self.tls = TlsFiles(cfg.tls, "otlp-grpc")
            self.port = self._server.add_secure_port(cfg.grpc_endpoint,
                                                     self.tls.grpc_credentials())
        else:
            self.port = self._server.add_insecure_port(cfg.grpc_endpoint)
        if not self.port:
            raise OSError(f"cannot listen for OTLP/gRPC on {cfg.grpc_endpoint}")
        self._server.start()
        log.info("OTLP/gRPC receiver listening on %s (port %d)", cfg.grpc_endpoint, self.port)

    def _export(self, body: bytes, context: grpc.ServicerContext) -> object:
        return self._answer(self.ingest.handle_bytes(body, "grpc", self._sender(context)),
                            context)

    def _export_logs(self, body: bytes, context: grpc.ServicerContext) -> object:
        return self._answer(
            self.ingest.handle_logs_bytes(body, "grpc", self._sender(context)), context)

    def _sender(self, context: grpc.ServicerContext) -> str:
        # authenticated by the interceptor already; read again for the sender's name
        return self.auth.identify(metadata_authorization(context.invocation_metadata())) or ""

    def _answer(self, res: IngestResult, context: grpc.ServicerContext) -> object:
        if res.outcome == "invalid":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, res.message)
        if res.outcome == "throttled":
            self._abort_retryable(context, res.message)
        return res.response()

    def _abort_retryable(self, context: grpc.ServicerContext, message: str) -> None:
        delay = self.config.retry_after_s
        info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(
            seconds=int(delay), nanos=int((delay % 1) * 1e9)))
        status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message)
        status.details.add().Pack(info)
        # Go exporters read RetryInfo from the status details; the Python SDK exporter only
        # from a `google.rpc.retryinfo-bin` trailer (without it, it backs off 1, 2, 4, 8 s
        # and gives up at its 10 s timeout). Send both.
        context.set_trailing_metadata((
            ("grpc-status-details-bin", status.SerializeToString()),
            ("google.rpc.retryinfo-bin", info.SerializeToString())))
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message)

    def shutdown(self, deadline_s: float) -> None:
        """Stop accepting; in-flight calls get up to a third of the deadline (at most 5 s):
        the engine's drain needs the rest."""
        self.stop(grace_s=min(5.0, deadline_s / 3))

    def stop(self, grace_s: float) -> None:
        """Stop accepting calls; in-flight calls get ``grace_s`` to finish."""
        if self._server is not None:
            self._server.stop(grace_s).wait(grace_s + 1)
        self._pool.shutdown(wait=False)
