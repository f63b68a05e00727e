"""Configuration of the Kafka stages: consumer group worker, receiver publisher, results topic.

Records on ``topic`` are what the collector's kafka exporter writes: one OTLP
ExportTraceServiceRequest per record (``otlp_proto`` or ``otlp_json``), keyed by the hex
trace id when the exporter has ``partition_traces_by_id: true`` (needed: a worker must see
every span of a trace, so all of a trace's records must share a partition).

Records on ``logs_topic`` are the exporter's log records (``ExportLogsServiceRequest``): the
GenAI events that carry prompts, completions and tool arguments when an instrumentation does
not put them on spans, keyed by trace id with ``partition_logs_by_trace_id: true``. A worker
joins a trace's records from both topics, so the two topics must be *co-partitioned*: the
same partition count, and the same key and partitioner (the exporter uses one for both).
Workers then own partition p of both topics together (range assignment in ``group`` mode,
the same p % worker_count in ``static`` mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from otel_eval.base.configcheck import validate

Encoding = Literal["otlp_proto", "otlp_json"]

# The least throttle_retry_s, seconds: the consumer's poll timeout is that wait in whole
# milliseconds, and a timeout of 0 (anything under 1 ms) polls without waiting.
MIN_THROTTLE_RETRY_S = 0.01


@dataclass(frozen=True)
class KafkaSecurityConfig:
    # Kafka security.protocol: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL.
    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    # SASL mechanism when protocol is SASL_*.
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    # SASL user name; use ${ENV} substitution in YAML to keep it out of files.
    sasl_username: str = ""
    # SASL password; use ${ENV} substitution (Helm: a Secret mapped to an env var).
    sasl_password: str = field(default="", repr=False)
    # PEM file of the CA that signed the brokers' certificates; empty = system trust store.
    tls_ca_file: str = ""
    # PEM client certificate and key for mutual TLS; both empty = no client certificate.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # Skip broker certificate and host name verification (test clusters only). Default false.
    tls_insecure_skip_verify: bool = False

    def __post_init__(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("security.tls_cert_file and tls_key_file go together")
        if self.protocol.startswith("SASL") and not self.sasl_username:
            raise ValueError(f"security.protocol {self.protocol} needs sasl_username")


@dataclass(frozen=True)
class KafkaConfig:
    # Comma-separated bootstrap brokers (HOST:PORT,...); empty disables Kafka.
    brokers: str = ""
    # Receiver mode (serve --kafka-publish): the gRPC/HTTP receivers write what they receive to
    # `topic` (as the collector's kafka exporter does) instead of evaluating it; workers with
    # publish false consume the topic. Default false.
    publish: bool = False
    # Topic carrying OTLP trace requests (the collector kafka exporter's default topic).
    topic: str = "otlp_spans"
    # Record value encoding: otlp_proto (exporter default) or otlp_json.
    encoding: Encoding = "otlp_proto"
    # Topic carrying OTLP log requests (GenAI events joined to their spans), the collector
    # kafka exporter's default logs topic; it must have as many partitions as `topic`.
    # Empty = log records are not consumed. A topic that does not exist is not read, nor
    # created (a group member reads it once it exists). With `publish`, every log record the
    # receivers take is written to it as the exporter writes it (under its resource and
    # scope, GenAI event or not; workers read the GenAI events and ignore the rest).
    logs_topic: str = "otlp_logs"
    # Encoding of logs_topic records: otlp_proto (exporter default) or otlp_json.
    logs_encoding: Encoding = "otlp_proto"
    # Consumer group id; offsets are committed under it in both assignment modes.
    group_id: str = "otel-eval"
    # Kafka client.id, shown in broker logs and quotas.
    client_id: str = "otel-eval"
    # How partitions are shared between workers: `group` uses the broker's consumer group
    # protocol (rebalances when workers come and go); `static` gives worker `worker_index` of
    # `worker_count` the partitions p with p % worker_count == worker_index, with no group
    # membership (a StatefulSet ordinal maps onto it; offsets still committed under group_id).
    assignment: Literal["group", "static"] = "group"
    # This worker's index for static assignment, 0-based. Default 0.
    worker_index: int = 0
    # Number of workers for static assignment. Default 1 (this worker takes every partition).
    worker_count: int = 1
    # Where a group without committed offsets starts: earliest (no loss) or latest.
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    # Records taken from Kafka whose traces are not yet stored. At this many the consumer pauses
    # its partitions (backpressure instead of unbounded buffering) and resumes at half. Not
    # counted: the spans records of runs still open in assembly (they finish only once the
    # rest of their run is read; assembly's own bounds hold them).
    max_inflight_records: int = 20_000
    # Largest batch returned by one fetch, records.
    max_poll_records: int = 500
    # Most bytes a fetch returns for one partition (aiokafka's max_partition_fetch_bytes,
    # Kafka's max.partition.fetch.bytes; the collector's kafkareceiver calls it
    # max_partition_fetch_size). The consumer keeps one fetched result per assigned partition
    # (both topics) until it is read: partitions x this (a partition's first record batch
    # whole when larger; fetch_max_bytes does not cap it), and a stalled partition's records
    # read behind the stall wait undecoded, one result more: 2 x partitions x this, logged on
    # each assignment. Default 1 MiB.
    max_partition_fetch_bytes: int = 1024 * 1024
    # Most bytes one fetch response from a broker carries, over its partitions (aiokafka's
    # fetch_max_bytes, Kafka's fetch.max.bytes; the kafkareceiver's max_fetch_size, unlimited
    # there by default). One is in flight per broker (the first record batch whole when
    # larger). Default 50 MiB.
    fetch_max_bytes: int = 50 * 1024 * 1024
    # Most bytes one fetched record batch may decompress to (gzip, snappy, lz4, zstd). A
    # batch past it (a decompression bomb) or one that does not decompress is skipped, its
    # records counted as poison (`batch_too_large`, `batch_corrupt`). Default 64 MiB.
    max_batch_bytes: int = 64 * 1024 * 1024
    # How often finished work is committed, seconds. A crash replays at most this much extra.
    commit_interval_s: float = 1.0
    # Wait before retrying a record the engine refused (throttled), seconds; also the
    # longest an idle consumer waits for records before looking at its retries, backpressure
    # and commits again (one poll of Kafka each time). At least 0.01 (10 ms): 0 polled
    # Kafka in a tight loop, a core busy while idle. Default 0.2.
    throttle_retry_s: float = 0.2
    # Group session timeout, seconds: a worker silent this long loses its partitions.
    session_timeout_s: float = 30.0
    # Topic receiving one JSON evaluation per stored trace (key = trace id), published again
    # once its judge is stored and once an outcome (POST /v1/feedback) re-judged its verdict
    # (the last per key is the results API's object; in a fleet, the one with the highest
    # headers otel_eval.revision, .evaluated_at_ns, .row_version: guide.md); empty = off.
    results_topic: str = ""
    # Evaluations waiting to be published before the oldest is dropped (counted).
    results_queue_size: int = 10_000
    # How --kafka-publish picks partitions for keyed records: `fnv1a` matches the collector's
    # kafka exporter (Sarama-compatible FNV-1a hash), `murmur2` matches Java clients.
    # All producers writing a topic must agree, or a trace's spans land on two partitions.
    partitioner: Literal["fnv1a", "murmur2"] = "fnv1a"
    # Producer acknowledgements for --kafka-publish and results: all (no loss) or 1 (leader).
    acks: Literal["all", "1"] = "all"
    # Producer compression for published records (--kafka-publish and results_topic).
    compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "none"
    # Largest request the publisher sends, bytes (brokers default to ~1 MiB per record). With
    # compression, at most max_batch_bytes: a record is written as a batch of its own, which
    # the workers skip past max_batch_bytes decompressed (`batch_too_large`).
    max_request_bytes: int = 1024 * 1024
    security: KafkaSecurityConfig = field(default_factory=KafkaSecurityConfig)

    def __post_init__(self) -> None:
        problems = {}
        if not 0 <= self.worker_index < max(self.worker_count, 1):
            problems["worker_index"] = (f"must be in [0, {self.worker_count}), "
                                        f"got {self.worker_index}")
        if self.logs_topic and self.logs_topic == self.topic:
            problems["logs_topic"] = f"must differ from topic ({self.topic!r})"
        if self.compression != "none" and self.max_request_bytes > self.max_batch_bytes:
            # the publisher's batch of one record decompresses to at most max_request_bytes
            # (aiokafka's estimate); the workers skip one past max_batch_bytes as poison
            problems["max_request_bytes"] = (
                f"must be at most max_batch_bytes ({self.max_batch_bytes}) with compression "
                f"{self.compression}: the workers would skip the publisher's larger records "
                f"(batch_too_large); lower it or raise max_batch_bytes")
        validate(self, minimum={
            "worker_count": 1, "max_inflight_records": 1, "max_poll_records": 1,
            "max_batch_bytes": 1, "max_partition_fetch_bytes": 1, "fetch_max_bytes": 1,
            "throttle_retry_s": MIN_THROTTLE_RETRY_S, "results_queue_size": 1,
            "max_request_bytes": 1},
            above={"commit_interval_s": 0, "session_timeout_s": 0}, problems=problems)

    @property
    def enabled(self) -> bool:
        return bool(self.brokers.strip())

    @property
    def fetch_result_bytes(self) -> int:
        """Most bytes one partition's fetched result holds: ``max_partition_fetch_bytes``,
        and no more than the response carrying it, ``fetch_max_bytes`` (the broker fills a
        response up to both; with 64 KiB responses and 1 MiB per partition each result held
        one 40 KiB record, tests/kafka/test_kafka_fetch_buffers.py)."""
        return min(self.max_partition_fetch_bytes, self.fetch_max_bytes)

    def fetched_bytes(self, partitions: int) -> int:
        """What a worker's fetched records hold, at worst, with ``partitions`` assigned (both
        topics'), two fetched results each:
        - aiokafka (0.14, ``consumer/fetcher.py``) keeps one fetched result per partition
          until it is read (a paused partition's is dropped at a later poll) and fetches a
          partition again once its result is read, so the results of successive responses
          pile up: ``fetch_max_bytes`` caps one response, not what is kept (6 partitions kept
          6 x 64 KiB with 64 KiB fetches, tests/kafka/test_kafka_fetch_buffers.py);
        - the records read behind a record that stalled its partition wait undecoded, as
          their bytes, holding no decoding charge: at most what one poll returned for the
          partition, one result, as it is paused before the next (tests/kafka/
          test_kafka_stalled_raw.py), while aiokafka may have fetched its next result.
        Each result at most ``fetch_result_bytes``. A partition's first record batch larger
        than the fetch sizes comes whole (the brokers' record size)."""
        return 2 * partitions * self.fetch_result_bytes
