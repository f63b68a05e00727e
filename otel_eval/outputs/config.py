"""Configuration of the result exporters (evaluation events, pass-through forwarding).

Both exporters share the delivery settings below: one bounded queue each (counted in items:
log records for events, spans for forwarding), one worker thread each, batches of at most
``max_batch_items``, retried with exponential backoff on retryable gRPC codes.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_eval.base.configcheck import validate


@dataclass(frozen=True)
class ExportConfig:
    # OTLP/gRPC endpoint (HOST:PORT) receiving gen_ai.evaluation.result events; empty = off.
    events_endpoint: str = ""
    # OTLP/gRPC endpoint receiving the evaluated spans, stamped with otel_eval.* attributes.
    forward_endpoint: str = ""
    # Plaintext gRPC (no TLS) to both endpoints. Default true (a collector next to us).
    insecure: bool = True
    # Items (spans or log records) waiting to be sent, per exporter. When full, the oldest
    # queued batch is dropped (reason `queue_full`), so fresh results win. Default 100000.
    max_queue_items: int = 100_000
    # Items per export request (a trace is never split). Default 2048.
    max_batch_items: int = 2048
    # Deadline of one export call, seconds. Default 10.
    timeout_s: float = 10.0
    # First retry delay after UNAVAILABLE / RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED, seconds;
    # doubled per attempt (with jitter) up to `max_backoff_s`. Default 0.5.
    initial_backoff_s: float = 0.5
    # Largest retry delay, seconds. Default 5.
    max_backoff_s: float = 5.0
    # A batch still failing after this long is dropped (reason `retries_exhausted`), seconds.
    # Default 60.
    max_retry_s: float = 60.0

    def __post_init__(self) -> None:
        validate(self, minimum={"max_queue_items": 1, "max_batch_items": 1, "max_retry_s": 0},
                 above={"timeout_s": 0, "initial_backoff_s": 0, "max_backoff_s": 0},
                 endpoints=("events_endpoint", "forward_endpoint"))
