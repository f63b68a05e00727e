"""Configuration of the result exporters (evaluation events, pass-through forwarding).

Both exporters share the settings below, as the collector's OTLP exporter and the OTel SDK's
take them: endpoint, TLS (or plain text), headers, compression, a timeout per call; one
bounded queue each (counted in items: log records for events, spans for forwarding), one
worker thread each, batches of at most ``max_batch_items`` and ``max_batch_bytes`` (the
collector's ``sending_queue.batch.max_size`` with ``sizer: items`` and ``sizer: bytes``),
retried with the shared back-off (``base.backoff``) on retryable gRPC codes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from otel_eval.base.configcheck import validate
from otel_eval.base.tlsfiles import TlsClientConfig

# gRPC metadata keys: lowercase letters, digits, - _ . (not the reserved grpc- prefix)
_HEADER_KEY = re.compile(r"[0-9a-z_.-]+")
# gRPC metadata values (of keys not ending in -bin): printable ASCII; gRPC refuses the call
# (INTERNAL) for any other byte, a secret file's trailing newline too
_HEADER_VALUE = re.compile(r"[\x20-\x7e]*")


@dataclass(frozen=True)
class ExportConfig:
    # OTLP/gRPC endpoint (HOST:PORT) receiving gen_ai.evaluation.result events; empty = off.
    # A run's findings and verdict are sent at least once, as forward_endpoint's spans; so
    # are the judge's grades (kept in the judge's journal until delivered) and a session's
    # verdict (owed in the store's sessions row until delivered; after a stop or a crash,
    # sent once sessions.claim_timeout_s has passed).
    events_endpoint: str = ""
    # OTLP/gRPC endpoint receiving the evaluated spans, stamped with otel_eval.* attributes.
    # At least once: with the spool on, a trace stays in it until its spans are delivered or
    # dropped for a counted reason, so a stop or a crash before then forwards it after the
    # restart (a collector away that long fills the spool: receivers throttle, spool_full).
    forward_endpoint: str = ""
    # Plaintext gRPC (no TLS) to both endpoints. Default true (a collector next to us); set
    # false for TLS (then `tls`).
    insecure: bool = True
    # TLS to both endpoints when `insecure` is false: ca_file (empty = system trust store),
    # cert_file and key_file (client certificate, mTLS), server_name_override.
    tls: TlsClientConfig = field(default_factory=TlsClientConfig)
    # gRPC metadata sent with every export call, name -> value, e.g.
    # {authorization: "Bearer ${OTEL_EVAL_EXPORT_TOKEN}"} (environment substitution keeps the
    # secret out of the file). Names are case-insensitive (sent lowercase); values printable
    # ASCII, as gRPC takes them. Default none.
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    # Request compression: none or gzip. Default none.
    compression: Literal["none", "gzip"] = "none"
    # Items (spans or log records) waiting to be sent, per exporter. When full, the oldest
    # queued batch is dropped (reason `queue_full`), so fresh results win. Default 100000.
    max_queue_items: int = 100_000
    # Serialized bytes waiting to be sent, per exporter, as the collector's sending_queue with
    # sizer: bytes; at least max_batch_bytes. When full, the oldest queued batch is dropped
    # (reason `queue_full`): the items bound alone let 100000 large spans hold gigabytes.
    # Default 268435456 (256 MiB).
    max_queue_bytes: int = 268_435_456
    # Items per export request (a trace is never split by count). Default 2048.
    max_batch_items: int = 2048
    # Serialized bytes per export request (uncompressed, what a receiver's limit counts), as
    # the collector's sending_queue.batch max_size with sizer: bytes; at least 1024. Queued
    # requests are merged only while the result stays within it; one larger alone (a big
    # trace) is split by resource, scope and item, every field kept; a single span or record
    # larger still is sent alone (refused downstream: reason `rejected`, that item only).
    # Default 3670016 (3.5 MiB): under the 4 MiB an OTLP/gRPC receiver takes unless its
    # max_recv_msg_size_mib is raised, with room for a collector in between that adds
    # attributes before exporting under the same limit.
    max_batch_bytes: int = 3_670_016
    # Deadline of one export call, seconds. Default 10.
    timeout_s: float = 10.0
    # First retry delay after a retryable failure (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED,
    # CANCELLED, OUT_OF_RANGE, DATA_LOSS), seconds; doubled per attempt (with jitter) up to
    # `max_backoff_s`; a RetryInfo the endpoint sends with the failure gives the delay
    # instead. RESOURCE_EXHAUSTED is retried only when the endpoint sends RetryInfo, after the
    # delay it gives (the OTLP specification). Default 0.5.
    initial_backoff_s: float = 0.5
    # Largest retry delay, seconds. Default 5.
    max_backoff_s: float = 5.0
    # A batch still failing after this long is dropped (reason `retries_exhausted`), seconds.
    # Default 60.
    max_retry_s: float = 60.0

    def __post_init__(self) -> None:
        problems = {f"headers.{k}": "must be lowercase letters, digits, - _ . (not grpc-)"
                    for k in self.headers
                    if not _HEADER_KEY.fullmatch(k.lower()) or k.lower().startswith("grpc-")}
        problems.update({  # the value itself is a secret: never in the message
            f"headers.{k}": "value must be printable ASCII (no newline: trim a secret file's)"
            for k, v in self.headers.items() if f"headers.{k}" not in problems
            and not _HEADER_VALUE.fullmatch(v)})
        if self.insecure and self.tls.configured:
            problems["tls"] = "is set while insecure is true (plain text): set insecure: false"
        if self.max_queue_bytes < self.max_batch_bytes:
            problems["max_queue_bytes"] = "must be at least max_batch_bytes"
        if self.max_backoff_s < self.initial_backoff_s:
            problems["max_backoff_s"] = "must be at least initial_backoff_s"
        validate(self, minimum={"max_queue_items": 1, "max_batch_items": 1,
                                "max_batch_bytes": 1024, "max_retry_s": 0},
                 above={"timeout_s": 0, "initial_backoff_s": 0, "max_backoff_s": 0},
                 endpoints=("events_endpoint", "forward_endpoint"), problems=problems)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """``headers`` as gRPC call metadata."""
        return tuple((k.lower(), v) for k, v in self.headers.items())
