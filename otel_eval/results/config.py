"""Configuration of the result exporters (evaluation events, pass-through forwarding)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExportConfig:
    # OTLP/gRPC endpoint (HOST:PORT) receiving gen_ai.evaluation.result events; empty = off.
    events_endpoint: str = ""
    # OTLP/gRPC endpoint receiving the evaluated spans, stamped with otel_eval.* attributes.
    forward_endpoint: str = ""
