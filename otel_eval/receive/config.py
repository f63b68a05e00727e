"""Configuration of the OTLP receivers (stage: receive), the ``receiver:`` section, and the
connection limits of every HTTP listener (``HttpLimits``: ``receiver.http_limits``,
``admin.limits``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from otel_eval.base.configcheck import validate
from otel_eval.receive.security import (
    Listeners,
    TlsServerConfig,
    exposed_insecurely,
    exposure_problems,
    token_problems,
)

# receiver.max_decoding_bytes per byte of receiver.max_message_bytes, at least: a floor
# against a budget that refuses most requests the size limit takes, not a guarantee (a request
# is charged by its content, ``receive.decoding``: ~10x its bytes for an LLM agent's spans)
DECODING_PER_MESSAGE_BYTE = 4


@dataclass(frozen=True)
class HttpLimits:
    # Time for the TLS handshake, request line and headers, from accept (or from the first
    # byte of a keep-alive request), seconds (Go's ReadHeaderTimeout).
    read_header_timeout_s: float = 10.0
    # Time for the whole request, headers and body, seconds (Go's ReadTimeout).
    read_timeout_s: float = 60.0
    # Time for the client to take the answer, seconds (Go's WriteTimeout).
    write_timeout_s: float = 60.0
    # Time a keep-alive connection may wait for its next request, seconds.
    idle_timeout_s: float = 120.0
    # Largest request line plus headers, bytes (431 past it).
    max_header_bytes: int = 64 * 1024
    # Connections served at once (a thread each); more are answered 503 and closed.
    max_connections: int = 1024
    # Connections at once from one client address.
    max_connections_per_peer: int = 128
    # Slots beyond max_connections that serve only /healthz, /readyz and /metrics, one
    # request each (the admin listener), so probes and scrapes get in during a flood.
    reserved_connections: int = 0

    def __post_init__(self) -> None:
        validate(self, minimum={
            "read_header_timeout_s": 0.001, "read_timeout_s": 0.001, "write_timeout_s": 0.001,
            "idle_timeout_s": 0.001, "max_header_bytes": 1024, "max_connections": 1,
            "max_connections_per_peer": 1, "reserved_connections": 0})


@dataclass(frozen=True)
class ReceiverConfig:
    # OTLP/gRPC TraceService endpoint (HOST:PORT); empty string disables it.
    grpc_endpoint: str = "localhost:4317"
    # OTLP/HTTP endpoint serving POST /v1/traces (protobuf or JSON, optionally gzip): where
    # exporters with OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf go. Every listener on
    # `localhost` listens on 127.0.0.1 and ::1 alike.
    http_endpoint: str = "localhost:4318"
    # Largest request accepted, bytes (after gzip decompression for HTTP). Agent traces with
    # message content routinely pass gRPC's 4 MiB default. A request must also fit
    # max_decoding_bytes alone, charged by its content (LLM agent spans ~10.5x their bytes):
    # the defaults take such a request as large as this (24 MiB x 10.5 < 256 MiB); raise
    # the two together, or larger requests are refused too_large. Default 24 MiB.
    max_message_bytes: int = 24 * 1024 * 1024
    # Request bodies (decompressed) the OTLP/HTTP receiver holds at once over all its
    # connections, bytes (at least max_message_bytes); a request whose body would pass it is
    # answered 429 with Retry-After (throttle reason `bodies_in_flight`). Without it, 1,024
    # connections could each hold max_message_bytes. One address holds at most half of it
    # (at least max_message_bytes; past it throttle reason `sender_share`). Default 256 MiB.
    max_body_bytes_in_flight: int = 256 * 1024 * 1024
    # What decoding the protobuf requests in hand holds at once, over both OTLP receivers
    # and the Kafka consumer's records (each held until the engine took it), bytes: each is
    # charged 3 bytes per byte received, 192 per nested message (attribute, event, link...)
    # and 1 KiB per span or log record (a request of minimal spans holds ~19x its bytes once
    # decoded, one of empty attributes ~25x). A request that would pass it is answered 429 /
    # RESOURCE_EXHAUSTED with RetryInfo (throttle reason `decoding`), a Kafka record waits
    # (its partition paused); one past it alone 413 / RESOURCE_EXHAUSTED (refused reason
    # `too_large`), a Kafka record skipped as poison (`too_large`). At least
    # 4 x max_message_bytes (checked at start), yet that does not make every request the
    # size limit takes fit: the charge is by content. An LLM agent's spans (~2.4 KB each,
    # the conformance recordings) are charged ~10x their bytes, spans of ~90 bytes with one
    # attribute ~34x: a protobuf request of such spans larger than a tenth (a 34th) of this
    # is refused too_large whatever max_message_bytes allows. An OTLP/JSON request is
    # charged 16 bytes per byte, 1 KiB per `{` and 256 bytes per `[` (what parsing it holds
    # at worst, whatever its content), so a JSON body over a sixteenth of it is refused:
    # send larger batches as protobuf. Default 256 MiB.
    max_decoding_bytes: int = 256 * 1024 * 1024
    # Threads serving gRPC calls. Decoding is CPU bound (GIL), so more threads only add
    # queueing; a handful keeps slow clients from blocking fast ones.
    grpc_workers: int = 8
    # gRPC calls taken at once (running or queued for a worker thread); more are refused
    # with RESOURCE_EXHAUSTED at once instead of queueing without bound. grpc refuses them
    # itself: no RetryInfo (exporters following OTLP do not retry them) and no metric of
    # ours (grpcio has no public hook for it): keep it above the calls exporters keep in flight.
    # grpc reads up to ~8 MiB of the message of each call waiting for a thread (the worst
    # case counts it, app/memory.py).
    grpc_max_concurrent_rpcs: int = 64
    # Time a gRPC call has to deliver its request message once it began, seconds; a call
    # that sends headers and then nothing is cancelled (it holds a worker thread meanwhile).
    grpc_receive_timeout_s: float = 30.0
    # gRPC calls of one sender (its address, and with tokens its token's name) waiting for
    # their request message at once. Past it a call has 1 s for its message (then it is
    # cancelled), and once one of the sender's calls has waited 1 s more are refused
    # RESOURCE_EXHAUSTED with RetryInfo (throttle reason `sender_share`). Each waiting call
    # holds a worker thread: below grpc_workers, one sender sending headers and no message
    # cannot take them all. An exporter's message follows its headers at once, so honest
    # calls barely wait, however many one sender has in flight. Default 4.
    grpc_max_waiting_rpcs_per_sender: int = 4
    # Retry hint sent with throttling responses (gRPC RetryInfo, HTTP Retry-After), seconds.
    retry_after_s: float = 1.0
    # TLS on both OTLP listeners (cert_file, key_file; client_ca_file requires client
    # certificates, mTLS). Files are re-read when they change. Empty: plain text.
    tls: TlsServerConfig = field(default_factory=TlsServerConfig)
    # Bearer tokens accepted on both OTLP listeners, name -> token: clients send
    # `Authorization: Bearer <token>` (OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer ..."),
    # refused with gRPC UNAUTHENTICATED / HTTP 401. The name identifies the sender in logs
    # and for re-opening traces. Use ${ENV} substitution for the tokens (printable ASCII, no
    # space). Empty: no auth.
    bearer_tokens: dict[str, str] = field(default_factory=dict, repr=False)
    # Start even though an endpoint is reachable beyond this host (not loopback) without
    # both TLS and bearer tokens. Off: such a configuration is refused at startup.
    allow_insecure_non_loopback: bool = False
    # OTLP/HTTP connections: deadlines for headers, the whole request, the answer and idle
    # keep-alive, seconds; connections at once, in total and per client address.
    http_limits: HttpLimits = field(default_factory=HttpLimits)

    def __post_init__(self) -> None:
        validate(self, minimum={"max_message_bytes": 1, "max_body_bytes_in_flight": 1,
                                "max_decoding_bytes": 1,
                                "grpc_workers": 1, "retry_after_s": 0,
                                "grpc_max_concurrent_rpcs": 1,
                                "grpc_max_waiting_rpcs_per_sender": 1,
                                "grpc_receive_timeout_s": 0.001},
                 endpoints=("grpc_endpoint", "http_endpoint"),
                 problems={**token_problems("bearer_tokens", self.bearer_tokens),
                           **self._decoding_problem()})

    def _decoding_problem(self) -> dict[str, str]:
        """A decoding budget smaller than what a request of ``max_message_bytes`` may hold:
        such requests, taken before, would be refused ``too_large`` (never retried)."""
        need = DECODING_PER_MESSAGE_BYTE * self.max_message_bytes
        if isinstance(self.max_decoding_bytes, int) and isinstance(self.max_message_bytes, int) \
                and 0 < self.max_decoding_bytes < need:
            return {"max_decoding_bytes": f"must be at least {DECODING_PER_MESSAGE_BYTE} x "
                    f"max_message_bytes ({need}): a request that large would be refused"}
        return {}

    def _listeners(self) -> Listeners:
        return [("receiver.grpc_endpoint", self.grpc_endpoint),
                ("receiver.http_endpoint", self.http_endpoint)]

    def exposure_problems(self) -> list[str]:
        """Why serve must not listen as configured (an endpoint beyond this host without TLS
        and bearer tokens, unless ``allow_insecure_non_loopback``), each with its path."""
        return exposure_problems(self._listeners(), self.tls, bool(self.bearer_tokens),
                                 self.allow_insecure_non_loopback)

    def exposed_insecurely(self) -> bool:
        return exposed_insecurely(self._listeners(), self.tls, bool(self.bearer_tokens),
                                  self.allow_insecure_non_loopback)
