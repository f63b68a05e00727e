"""Records waiting undecoded behind a stalled partition, against the suite's real Kafka
broker (``broker_topic``, conftest.py).

A record the engine refuses for anything but a service's share stalls its partition: the
records read behind it wait as their bytes, not decoded, so they hold no decoding charge
(``records``). They are bounded by the pause (``flow``): a stalled partition is paused before
the next poll, so what waits undecoded is at most what one poll returned for it, one fetched
result (``max_partition_fetch_bytes``), however long the stall lasts. They were counted
nowhere: ``KafkaConfig.fetched_bytes`` counted only aiokafka's result kept per partition,
which aiokafka may fetch again for the partition between the poll and the pause.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from kafka_doubles import FakeEngine, Topic, WatchedStats
from kafka_traces import requests_for, trace_ids
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from otel_eval.receive.decoding import DecodeBudget
from otel_eval.receive.kafka.consumer import KafkaConsumerStage

pytestmark = pytest.mark.kafka_broker

FETCH = 64 * 1024  # both fetch sizes
RECORDS = 40  # ~8 KiB each: five fetched results' worth on one partition


def _records() -> list[bytes]:
    out = []
    for req in requests_for(trace_ids(RECORDS), 1, 1):
        req.resource_spans[0].scope_spans[0].spans[0].attributes.append(
            KeyValue(key="pad", value=AnyValue(string_value="x" * 8000)))
        out.append(req.SerializeToString())
    return out


async def _produce(topic: Topic, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=topic.bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic.name, value, partition=0)
    finally:
        await producer.stop()


def test_records_waiting_undecoded_are_bounded_and_counted(broker_topic: Topic) -> None:
    config = broker_topic.config(max_partition_fetch_bytes=FETCH, fetch_max_bytes=FETCH,
                                 assignment="static")  # no group join to wait for
    budget = DecodeBudget(1 << 30)

    async def scenario() -> tuple[int, int, int, int]:
        engine = FakeEngine()
        engine.throttle = "pending"  # the engine takes nothing: the partition stalls
        await _produce(broker_topic, _records())
        stage = KafkaConsumerStage(config, engine, WatchedStats(), decoding=budget)
        await stage.start()
        try:
            # the head refused again on several retry passes, the stall lasting
            await engine.until(lambda e: e.refusals >= 8)
            waiting = list(stage._retries.records())
            raw = sum(len(r.value) for r in waiting if r.value is not None)
            return raw, len(waiting), sum(r.charge for r in waiting), budget.held
        finally:
            await stage.shutdown(5.0)

    raw, waiting, charged, held = asyncio.run(scenario())
    assert 0 < raw <= FETCH, raw  # no more than one poll's records for the partition
    assert waiting < RECORDS  # the rest was not read: the partition is paused
    assert charged == held > 0  # the head's charge only: the bytes waiting hold none
    # what the partition may hold: aiokafka's result fetched again, and the records waiting
    assert FETCH + raw <= config.fetched_bytes(1)
