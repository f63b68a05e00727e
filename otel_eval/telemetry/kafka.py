"""The Kafka stages' self-metrics (``otel_eval_kafka_*``): spans consumed, poison records,
throttling, lag and commits per partition, records published and dropped. Spans taken from
records are counted as the receivers' are (``ingest``, protocol ``kafka``). The metric list
and its invariants: ``telemetry.metrics``."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from otel_eval.telemetry.declare import Declarer
from otel_eval.telemetry.ingest import IngestMetrics


class KafkaMetrics:
    """The Kafka stages' ``KafkaMetrics`` protocol (otel_eval.base.kafka.stats) over Prometheus."""

    def __init__(self, d: Declarer, ingest: IngestMetrics) -> None:
        c, g = d.counter, d.gauge
        self._ingest = ingest  # spans from records are accounted as the receivers' are (kafka)
        self.c_consumed = c("kafka_spans_consumed", "Spans taken from Kafka records.")
        self.c_poison = c("kafka_records_poison", "Records skipped as not OTLP, by reason.",
                          ["reason"])
        self.c_throttled = c("kafka_throttled", "Records the engine refused (retried until "
                             "taken; each counted once, by its first refusal's reason).",
                             ["reason"])
        self.g_paused = g("kafka_paused", "1 while the consumer pauses for backpressure.")
        self.g_lag = g("kafka_lag_records", "Consumer lag per partition, records.",
                       ["topic", "partition"])
        self.g_committed = g("kafka_committed_offset", "Last committed offset per partition.",
                             ["topic", "partition"])
        self.c_commit_failed = c("kafka_commit_failures", "Offset commits that failed.",
                                 ["reason"])
        self.c_metadata_ignored = c(
            "kafka_commit_metadata_ignored",
            "Committed offset metadata read as absent at a partition's assignment (past what "
            "otel-eval writes: its done records are replayed), by reason.", ["reason"])
        self.c_published = c("kafka_records_published", "Records written, by topic kind.",
                             ["topic"])
        self.c_publish_dropped = c("kafka_publish_dropped", "Records not written, by reason.",
                                   ["topic", "reason"])

    def record_consumed(self, n_spans: int) -> None:
        self.c_consumed.inc(n_spans)

    def record_poison(self, reason: str) -> None:
        self.c_poison.labels(reason).inc()

    def spans_ingested(self, accepted: int, rejected: Mapping[str, int]) -> None:
        self._ingest.spans_ingested("kafka", accepted, rejected)

    def log_records_ingested(self, accepted: int, ignored: Mapping[str, int],
                             rejected: Mapping[str, int]) -> None:
        self._ingest.log_records("kafka", accepted, dict(ignored), dict(rejected))

    def throttled(self, reason: str) -> None:
        self.c_throttled.labels(reason).inc()

    def paused(self, paused: bool) -> None:
        self.g_paused.set(1 if paused else 0)

    def lag(self, partition: int, records: int, topic: str = "spans") -> None:
        self.g_lag.labels(topic, str(partition)).set(records)

    def committed(self, partition: int, offset: int, topic: str = "spans") -> None:
        self.g_committed.labels(topic, str(partition)).set(offset)

    def released(self, partition: int, topic: str = "spans") -> None:
        for gauge in (self.g_lag, self.g_committed):
            with contextlib.suppress(KeyError):  # never set for it
                gauge.remove(topic, str(partition))

    def commit_failed(self, reason: str) -> None:
        self.c_commit_failed.labels(reason).inc()

    def metadata_ignored(self, reason: str) -> None:
        self.c_metadata_ignored.labels(reason).inc()

    def published(self, topic_kind: str, n_records: int) -> None:
        self.c_published.labels(topic_kind).inc(n_records)

    def publish_dropped(self, topic_kind: str, reason: str, n: int) -> None:
        self.c_publish_dropped.labels(topic_kind, reason).inc(n)
