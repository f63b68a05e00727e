"""Configuration of the OTLP receivers (stage: receive), the ``receiver:`` section."""

from __future__ import annotations

from dataclasses import dataclass, field

from otel_eval.base.configcheck import validate
from otel_eval.receive.security import TlsServerConfig


@dataclass(frozen=True)
class ReceiverConfig:
    # OTLP/gRPC TraceService endpoint (HOST:PORT); empty string disables it.
    grpc_endpoint: str = "localhost:4317"
    # OTLP/HTTP endpoint serving POST /v1/traces (protobuf or JSON, optionally gzip).
    http_endpoint: str = "localhost:4318"
    # Largest request accepted, bytes (after gzip decompression for HTTP). Agent traces with
    # message content routinely pass gRPC's 4 MiB default.
    max_message_bytes: int = 64 * 1024 * 1024
    # Threads serving gRPC calls. Decoding is CPU bound (GIL), so more threads only add
    # queueing; a handful keeps slow clients from blocking fast ones.
    grpc_workers: int = 8
    # Retry hint sent with throttling responses (gRPC RetryInfo, HTTP Retry-After), seconds.
    retry_after_s: float = 1.0
    # TLS on both OTLP listeners (cert_file, key_file; client_ca_file requires client
    # certificates, mTLS). Files are re-read when they change. Empty: plain text.
    tls: TlsServerConfig = field(default_factory=TlsServerConfig)
    # Bearer tokens accepted on both OTLP listeners, name -> token: clients send
    # `Authorization: Bearer <token>` (OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer ..."),
    # refused with gRPC UNAUTHENTICATED / HTTP 401. The name identifies the sender in logs
    # and for re-opening traces. Use ${ENV} substitution for the tokens. Empty: no auth.
    bearer_tokens: dict[str, str] = field(default_factory=dict, repr=False)
    # Start even though an endpoint is reachable beyond this host (not loopback) without
    # both TLS and bearer tokens. Off: such a configuration is refused at startup.
    allow_insecure_non_loopback: bool = False

    def __post_init__(self) -> None:
        validate(self, minimum={"max_message_bytes": 1, "grpc_workers": 1, "retry_after_s": 0},
                 endpoints=("grpc_endpoint", "http_endpoint"))
