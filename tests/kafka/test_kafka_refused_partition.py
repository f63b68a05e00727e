"""A record the engine refuses holds only its own partition, against the suite's real Kafka
broker (``broker_topic``, conftest.py).

With ``assembly.max_service_share`` the engine refuses (throttles, ``service_share``) a record
whose every trace belongs to a service past its share, and the consumer retries it: Kafka
commits in order per partition, so it is never skipped. The records behind it on its
partition wait for it; the other partitions (other traces, other services: the collector's
exporter with ``partition_traces_by_id`` spreads traces over them) go on. The consumer held
every later record of the topic behind it, from any partition and any service, so one
flooding service locked every other service out until its record was taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from kafka_doubles import FakeEngine, Topic, WatchedStats
from kafka_traces import requests_for, trace_ids

from otel_eval.base.model import Span
from otel_eval.receive.kafka.consumer import KafkaConsumerStage

pytestmark = pytest.mark.kafka_broker


class ShareEngine(FakeEngine):
    """Refuses every record holding a trace of the flooding service while ``flooding``, as the
    engine throttles a one-service request past its share."""

    def __init__(self, flood: set[str]) -> None:
        super().__init__()
        self.flood = flood
        self.flooding = True

    def submit(self, spans: list[Span], source: str = "otlp",
               on_stored: Callable[[], None] | None = None, *,
               signal: str = "traces") -> Any:
        refused = self.flooding and any(s.trace_id in self.flood for s in spans)
        self.throttle = "service_share" if refused else None
        return super().submit(spans, source, on_stored, signal=signal)


async def produce(topic: Topic, records: list[tuple[int, str]]) -> None:
    """One record per (partition, trace id): the trace's one span, keyed by its id."""
    producer = AIOKafkaProducer(bootstrap_servers=topic.bootstrap)
    await producer.start()
    try:
        for partition, tid in records:
            [req] = requests_for([tid], 1, 1)
            await producer.send_and_wait(topic.name, req.SerializeToString(),
                                         key=tid.encode(), partition=partition)
    finally:
        await producer.stop()


def test_a_refused_record_holds_only_its_own_partition(broker_topic: Topic) -> None:
    topic = broker_topic

    async def scenario() -> None:
        flood, behind, *others = trace_ids(2 + topic.partitions - 1)
        await produce(topic, [(0, flood)])
        engine, stats = ShareEngine({flood}), WatchedStats()
        engine.auto_release = True
        stage = KafkaConsumerStage(topic.config(session_timeout_s=10.0), engine, stats)
        await stage.start()
        try:
            await stats.until(lambda s: s.throttles["service_share"] >= 1, timeout=60)
            # another service's trace behind it on partition 0, one on every other partition
            await produce(topic, [(0, behind), *enumerate(others, start=1)])
            await engine.until(lambda e: {s.trace_id for s in e.spans} >= set(others))
            got = {s.trace_id for s in engine.spans}
            assert flood not in got and behind not in got  # partition 0 keeps its order
            engine.flooding = False
            await engine.until(lambda e: {flood, behind} <= {s.trace_id for s in e.spans})
            assert [s.trace_id for s in engine.spans][-2:] == [flood, behind]
            await stats.until(lambda s: sum(s.commits.values()) == 2 + len(others)
                              and not s.is_paused)
        finally:
            await stage.shutdown(10.0)
        assert stage.failure is None

    asyncio.run(scenario())
