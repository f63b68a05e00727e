"""Self-metrics of the Kafka stages, as verbs (the service maps them onto Prometheus).

``KafkaMetrics`` is what the consumer and publishers call; ``KafkaStats`` is a plain
in-memory implementation (used by tests, and a default so the stages never need a registry).
Label values are bounded: partition numbers, topic kinds (``TOPIC_KINDS`` for the consumed
topics), and reasons from ``POISON_REASONS``, ``METADATA_IGNORED_REASONS`` and
``PUBLISH_DROP_REASONS``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Protocol

# Closed set of reasons a record is skipped as poison (a record batch skipped whole, past
# ``max_batch_bytes`` decompressed or not decompressing, is counted once by its reason;
# ``too_large``: decoding it alone would pass ``receiver.max_decoding_bytes``).
POISON_REASONS = ("empty", "not_otlp", "batch_too_large", "batch_corrupt", "too_large")
# Closed set of reasons committed offset metadata is read as absent (its replay then starts
# at the committed position): ``too_large``, past what otel-eval writes (``offsets``).
METADATA_IGNORED_REASONS = ("too_large",)
# Closed set of reasons a published record is dropped (``publish_dropped``): larger than a
# record may be (never fits: not retried), refused or undelivered by the producer, the
# results queue full, the publisher not started, a stop.
RECORD_TOO_LARGE = "record_too_large"
PUBLISH_DROP_REASONS = (RECORD_TOO_LARGE, "send_failed", "queue_full", "not_started",
                        "shutdown")
# The consumed topics, by kind: ``kafka.topic`` (trace requests) and ``kafka.logs_topic``.
TOPIC_KINDS = ("spans", "logs")


class KafkaMetrics(Protocol):
    def record_consumed(self, n_spans: int) -> None: ...
    def record_poison(self, reason: str) -> None: ...
    # spans of records, as the receivers account them: accepted, or rejected with a reason
    def spans_ingested(self, accepted: int, rejected: Mapping[str, int]) -> None: ...
    # log records of logs-topic records, as the logs receivers account them
    def log_records_ingested(self, accepted: int, ignored: Mapping[str, int],
                             rejected: Mapping[str, int]) -> None: ...
    def throttled(self, reason: str) -> None: ...
    def paused(self, paused: bool) -> None: ...
    def lag(self, partition: int, records: int, topic: str = "spans") -> None: ...
    def committed(self, partition: int, offset: int, topic: str = "spans") -> None: ...
    def released(self, partition: int, topic: str = "spans") -> None:
        """The partition is no longer this consumer's: its lag and offset gauges go (left,
        the last values stayed, and a panel summing owners counted a partition twice)."""
    def commit_failed(self, reason: str) -> None: ...
    def metadata_ignored(self, reason: str) -> None:
        """A partition's committed metadata was read as absent, at its assignment."""
    def published(self, topic_kind: str, n_records: int) -> None: ...
    def publish_dropped(self, topic_kind: str, reason: str, n: int) -> None: ...


class KafkaStats:
    """In-memory ``KafkaMetrics``: counters and last gauge values."""

    def __init__(self) -> None:
        self.records = 0
        self.spans = 0
        self.poison: Counter[str] = Counter()
        self.accepted = 0  # spans the engine took
        self.rejected: Counter[str] = Counter()  # spans rejected, by reason
        self.throttles: Counter[str] = Counter()
        self.is_paused = False
        self.pauses = 0
        self.log_records: Counter[str] = Counter()  # accepted, ignored:R, rejected:R
        self.lags: dict[int, int] = {}  # spans topic
        self.commits: dict[int, int] = {}
        self.logs_lags: dict[int, int] = {}  # logs topic
        self.logs_commits: dict[int, int] = {}
        self.commit_failures: Counter[str] = Counter()
        self.metadata_ignores: Counter[str] = Counter()
        self.published_records: Counter[str] = Counter()
        self.dropped: Counter[tuple[str, str]] = Counter()

    def record_consumed(self, n_spans: int) -> None:
        self.records += 1
        self.spans += n_spans

    def record_poison(self, reason: str) -> None:
        self.poison[reason] += 1

    def spans_ingested(self, accepted: int, rejected: Mapping[str, int]) -> None:
        self.accepted += accepted
        self.rejected.update(rejected)

    def log_records_ingested(self, accepted: int, ignored: Mapping[str, int],
                             rejected: Mapping[str, int]) -> None:
        self.log_records["accepted"] += accepted
        self.log_records.update({f"ignored:{r}": n for r, n in ignored.items()})
        self.log_records.update({f"rejected:{r}": n for r, n in rejected.items()})

    def throttled(self, reason: str) -> None:
        self.throttles[reason] += 1

    def paused(self, paused: bool) -> None:
        self.pauses += paused
        self.is_paused = paused

    def lag(self, partition: int, records: int, topic: str = "spans") -> None:
        (self.logs_lags if topic == "logs" else self.lags)[partition] = records

    def committed(self, partition: int, offset: int, topic: str = "spans") -> None:
        (self.logs_commits if topic == "logs" else self.commits)[partition] = offset

    def released(self, partition: int, topic: str = "spans") -> None:
        (self.logs_lags if topic == "logs" else self.lags).pop(partition, None)
        (self.logs_commits if topic == "logs" else self.commits).pop(partition, None)

    def commit_failed(self, reason: str) -> None:
        self.commit_failures[reason] += 1

    def metadata_ignored(self, reason: str) -> None:
        self.metadata_ignores[reason] += 1

    def published(self, topic_kind: str, n_records: int) -> None:
        self.published_records[topic_kind] += n_records

    def publish_dropped(self, topic_kind: str, reason: str, n: int) -> None:
        self.dropped[(topic_kind, reason)] += n
