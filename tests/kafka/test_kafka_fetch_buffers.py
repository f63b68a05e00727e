"""What a worker's fetches keep grows with the partitions it is assigned, past
``fetch_max_bytes``, against the suite's real Kafka broker (``broker_topic``, conftest.py).

aiokafka keeps one fetched result per assigned partition until it is read and fetches a
partition again once its result is read, so results of successive responses pile up:
``fetch_max_bytes`` caps one response, and the memory worst case counted only brokers x it.
Now ``KafkaConfig.fetched_bytes`` counts partitions x ``max_partition_fetch_bytes`` (twice:
test_kafka_stalled_raw.py), the worker logs it on each assignment and
``app.memory.worst_case`` adds it when told the partitions.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from kafka_doubles import FakeEngine, Topic, WatchedStats
from support.poll import poll_async

from otel_eval.app.config import Config, build
from otel_eval.app.memory import worst_case
from otel_eval.receive.kafka.consumer import KafkaConsumerStage

pytestmark = pytest.mark.kafka_broker

FETCH = 64 * 1024  # both fetch sizes
RECORD = 40 * 1024


async def _fill(topic: Topic, per_partition: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=topic.bootstrap)
    await producer.start()
    try:
        for p in range(topic.partitions):
            for _ in range(per_partition):
                await producer.send_and_wait(topic.name, b"x" * RECORD, partition=p)
    finally:
        await producer.stop()


def _kept(consumer: AIOKafkaConsumer) -> int:
    """The bytes of the fetched results aiokafka keeps, not read yet."""
    results = consumer._fetcher._records.values()
    return sum(r._partition_records._records.size_in_bytes() for r in results
               if getattr(r, "_partition_records", None) is not None)


def test_fetched_results_pile_up_past_fetch_max_bytes(broker_topic: Topic) -> None:
    async def scenario() -> int:
        await _fill(broker_topic, 4)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker_topic.bootstrap, auto_offset_reset="earliest",
            enable_auto_commit=False, fetch_max_bytes=FETCH, max_partition_fetch_bytes=FETCH)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(broker_topic.name, p)
                             for p in range(broker_topic.partitions)])
            # one record read: every partition's result is fetched, none read to its end
            await consumer.getmany(timeout_ms=10_000, max_records=1)
            return await poll_async(
                lambda: (n := _kept(consumer)) > 3 * FETCH and n,
                "fetched results of several responses")
        finally:
            await consumer.stop()

    kept = asyncio.run(scenario())
    assert kept <= broker_topic.partitions * FETCH  # one result per partition


def _results(consumer: AIOKafkaConsumer) -> list[int]:
    """The bytes of each fetched result aiokafka keeps."""
    return [r._partition_records._records.size_in_bytes()
            for r in consumer._fetcher._records.values()
            if getattr(r, "_partition_records", None) is not None]


def test_a_fetched_result_is_at_most_its_response(broker_topic: Topic) -> None:
    """With ``fetch_max_bytes`` under ``max_partition_fetch_bytes`` a partition's result is
    at most its response: ``fetched_bytes`` counted 1 MiB a result where 64 KiB were held."""
    config = broker_topic.config(fetch_max_bytes=FETCH, max_partition_fetch_bytes=1 << 20)

    async def scenario() -> list[int]:
        await _fill(broker_topic, 4)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker_topic.bootstrap, auto_offset_reset="earliest",
            enable_auto_commit=False, fetch_max_bytes=config.fetch_max_bytes,
            max_partition_fetch_bytes=config.max_partition_fetch_bytes)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(broker_topic.name, p)
                             for p in range(broker_topic.partitions)])
            await consumer.getmany(timeout_ms=10_000, max_records=1)
            return await poll_async(
                lambda: len(r := _results(consumer)) >= broker_topic.partitions - 1 and r,
                "a fetched result kept for most partitions")
        finally:
            await consumer.stop()

    results = asyncio.run(scenario())
    assert max(results) <= FETCH, results  # a 40 KiB record each: two would pass 64 KiB
    assert config.fetched_bytes(6) == 2 * 6 * FETCH


def test_the_worker_logs_what_its_assignment_may_keep(
        broker_topic: Topic, caplog: pytest.LogCaptureFixture) -> None:
    """Static assignment: worker 0 of 2 takes 3 of the 6 partitions, logged as it starts (a
    group's first assignment may come before the broker's metadata names the topic, and
    the next only after a metadata refresh)."""
    config = broker_topic.config(max_partition_fetch_bytes=2 << 20, assignment="static",
                                 worker_count=2, worker_index=0)

    async def scenario() -> None:
        stage = KafkaConsumerStage(config, FakeEngine(), WatchedStats())
        await stage.start()
        await stage.shutdown(5.0)

    with caplog.at_level(logging.INFO, logger="otel_eval.receive.kafka"):
        asyncio.run(scenario())
    assert "3 partition(s) assigned; their fetched records may hold 12.0 MiB" in caplog.text


def test_the_worst_case_counts_the_partitions_when_given() -> None:
    config = build(Config, {"kafka": {"brokers": "a:9092",
                                      "max_partition_fetch_bytes": 2 << 20}})
    part = "Kafka fetched records (2 x partitions x fetch_result_bytes)"
    assert worst_case(config, kafka_partitions=4)[part] == 16 << 20
    assert part not in worst_case(config)
    # and the one broker's 50 MiB response in flight is at most the 4 partitions' results
    assert sum(worst_case(config, 4).values()) - sum(worst_case(config).values()) == \
        (16 << 20) - (50 << 20) + (8 << 20)
