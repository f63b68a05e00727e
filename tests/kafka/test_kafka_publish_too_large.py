"""``--kafka-publish``: a trace too large for one Kafka record is a counted rejection, not a
retryable refusal. Thrown back as ``kafka_unavailable``, the exporter retried the request
without end (it can never fit), and every retry wrote the request's other traces again."""

from __future__ import annotations

import asyncio

from kafka_doubles import Topic
from kafka_mock_cluster import MockCluster
from kafka_traces import trace_ids
from test_kafka_serve import read_topic

from otel_eval.base.aio import LoopThread
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import LogEvent, Span
from otel_eval.receive.kafka.frontend import PublishingEngine
from otel_eval.receive.kafka.publisher import KafkaPublisher


def _trace(tid: str, n: int, text: str = "") -> list[Span]:
    return [Span(tid, f"{i + 1:016x}", None if i == 0 else f"{1:016x}", "chat", 1, 2,
                 attributes={"gen_ai.prompt": text} if text else {}) for i in range(n)]


def test_a_trace_too_large_for_a_record_is_rejected_and_the_rest_written_once(
        topic: Topic, loop: LoopThread) -> None:
    small, big = trace_ids(2)
    stats = KafkaStats()
    publisher = KafkaPublisher(topic.config(max_request_bytes=16 * 1024), stats)
    loop.run(publisher.start())
    try:
        engine = PublishingEngine(publisher, loop)
        adm = engine.submit(_trace(small, 2) + _trace(big, 3, "x" * 64 * 1024))
    finally:
        loop.run(publisher.stop())
    # not a refusal the exporter retries for ever: the big trace's spans are rejected, said
    # why (the receiver answers with a partial success), the small one is taken
    assert adm.throttled is None
    assert adm.accepted == 2 and adm.rejected == {"record_too_large": 3}
    assert stats.dropped == {("spans", "record_too_large"): 1}
    records = asyncio.run(read_topic(topic.bootstrap, topic.name, topic.partitions))
    assert [key for _part, key, _value in records] == [small.encode()]


def test_a_log_record_too_large_for_a_record_is_rejected(
        topic: Topic, mock_cluster: MockCluster, loop: LoopThread) -> None:
    logs_topic = f"{topic.name}_logs"
    mock_cluster.create_topic(logs_topic, topic.partitions)
    small, big = trace_ids(2)
    stats = KafkaStats()
    publisher = KafkaPublisher(topic.config(logs_topic=logs_topic,
                                            max_request_bytes=16 * 1024), stats)

    def event(tid: str, text: str) -> LogEvent:
        return LogEvent(tid, "e" * 16, "gen_ai.user.message", 5, {"gen_ai.system": "openai"},
                        {"content": text})

    loop.run(publisher.start())
    try:
        adm = PublishingEngine(publisher, loop).submit(
            [event(small, "hi"), event(big, "x" * 64 * 1024)], signal="logs")
    finally:
        loop.run(publisher.stop())
    assert adm.throttled is None
    assert adm.accepted == 1 and adm.rejected == {"record_too_large": 1}
    assert stats.dropped == {("logs", "record_too_large"): 1}
    records = asyncio.run(read_topic(topic.bootstrap, logs_topic, topic.partitions))
    assert [key for _part, key, _value in records] == [small.encode()]
