"""Configuration of the Kafka consumer / publisher."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KafkaConfig:
    # Comma-separated bootstrap brokers; empty disables Kafka.
    brokers: str = ""
    topic: str = "otlp_spans"
