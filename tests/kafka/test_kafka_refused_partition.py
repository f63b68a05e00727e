"""A record the engine refuses holds only the records of its own traces, against the suite's
real Kafka broker (``broker_topic``, conftest.py).

With ``assembly.max_service_share`` the engine refuses (throttles, ``service_share``) a record
whose every trace is a new one of a service past its share, and the consumer retries it:
Kafka commits in order per partition, so it is never skipped (the committed position stays
at it). The records of its traces behind it wait for it; every other record goes on, on its
partition (other runs, other services) as on the others (the collector's exporter with
``partition_traces_by_id`` spreads traces over them).

The consumer held every later record of the topic behind it, from any partition and any
service, so one flooding service locked every other service out until its record was taken;
and then every later record of its partition: the rest of the service's own open runs too,
so its share freed only when those were cut as non-terminated, ``idle_timeout_s`` later.
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
    """Refuses every record opening a trace of the flooding service while ``flooding``, as the
    engine throttles a one-service request past its share; ``frees``: a run of that service
    whose spans, once taken, end it and free its slot."""

    def __init__(self, flood: set[str], frees: str = "") -> None:
        super().__init__()
        self.flood = flood
        self.frees = frees
        self.flooding = True

    def submit(self, spans: list[Span], source: str = "otlp",
               on_stored: Callable[[], None] | None = None, *,
               signal: str = "traces") -> Any:
        taken = {s.trace_id for s in self.spans}
        if any(s.trace_id == self.frees and s.is_entry for s in spans):  # its root
            self.flooding = False
        refused = self.flooding and any(s.trace_id in self.flood - taken for s in spans)
        self.throttle = "service_share" if refused else None
        return super().submit(spans, source, on_stored, signal=signal)


async def produce(topic: Topic, records: list[tuple[int, str]], span: int = 0) -> None:
    """One record per (partition, trace id): span ``span`` of a two-span trace (1: the root),
    keyed by its id."""
    producer = AIOKafkaProducer(bootstrap_servers=topic.bootstrap)
    await producer.start()
    try:
        for partition, tid in records:
            req = requests_for([tid], 2, 1)[span]
            await producer.send_and_wait(topic.name, req.SerializeToString(),
                                         key=tid.encode(), partition=partition)
    finally:
        await producer.stop()


def spans_of(engine: FakeEngine) -> list[tuple[str, bool]]:
    return [(s.trace_id, s.is_entry) for s in engine.spans]


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
            # its own root and another service's run behind it on partition 0, a run on
            # every other partition
            await produce(topic, [(0, behind), *enumerate(others, start=1)])
            await produce(topic, [(0, flood)], span=1)
            await engine.until(lambda e: {s.trace_id for s in e.spans} >= {*others, behind})
            assert flood not in {s.trace_id for s in engine.spans}
            engine.flooding = False
            await engine.until(lambda e: flood in {s.trace_id for s in e.spans})
            await engine.until(lambda e: len(e.spans) == 3 + len(others))
            # the run's own records in their order
            assert [r for r in spans_of(engine) if r[0] == flood] == [(flood, False),
                                                                      (flood, True)]
            await stats.until(lambda s: sum(s.commits.values()) == 3 + len(others)
                              and not s.is_paused)
        finally:
            await stage.shutdown(10.0)
        assert stage.failure is None

    asyncio.run(scenario())


def test_a_refused_record_does_not_hold_the_run_that_frees_its_share(
        broker_topic: Topic) -> None:
    """The service's open run ends behind its refused record on the same partition: taking it
    frees the share, and the refused record is taken next (no wait for ``idle_timeout_s``)."""
    topic = broker_topic

    async def scenario() -> None:
        [open_run, refused] = trace_ids(2)
        await produce(topic, [(0, open_run)])
        engine, stats = ShareEngine({refused}, frees=open_run), WatchedStats()
        engine.auto_release = True
        stage = KafkaConsumerStage(topic.config(session_timeout_s=10.0), engine, stats)
        await stage.start()
        try:
            await engine.until(lambda e: len(e.spans) == 1, timeout=60)
            await produce(topic, [(0, refused)])
            await stats.until(lambda s: s.throttles["service_share"] >= 1)
            await produce(topic, [(0, open_run)], span=1)  # its root: the run ends
            await engine.until(lambda e: len(e.spans) == 3)
            assert spans_of(engine) == [(open_run, False), (open_run, True),
                                        (refused, False)]
            await stats.until(lambda s: s.commits.get(0) == 3 and not s.is_paused)
        finally:
            await stage.shutdown(10.0)
        assert stage.failure is None

    asyncio.run(scenario())


def test_the_next_owner_replays_the_refused_record_and_skips_those_done_past_it(
        broker_topic: Topic) -> None:
    """The committed position stays at the refused record; the records stored past it are
    named in the commit metadata: the next owner takes the refused one, not those again."""
    topic = broker_topic

    async def scenario() -> None:
        refused, done = trace_ids(2)
        await produce(topic, [(0, refused), (0, done)])
        engine, stats = ShareEngine({refused}), WatchedStats()
        engine.auto_release = True
        cfg = topic.config(session_timeout_s=10.0, assignment="static")
        stage = KafkaConsumerStage(cfg, engine, stats)
        await stage.start()
        try:
            await engine.until(lambda e: len(e.spans) == 1, timeout=60)
            await stats.until(lambda s: s.commits.get(0) == 0 and s.throttles["service_share"])
        finally:
            await stage.shutdown(10.0)
        assert spans_of(engine) == [(done, False)]
        after = FakeEngine()
        after.auto_release = True
        stats = WatchedStats()
        stage = KafkaConsumerStage(cfg, after, stats)
        await stage.start()
        try:
            await stats.until(lambda s: s.commits.get(0) == 2, timeout=60)  # both passed
        finally:
            await stage.shutdown(10.0)
        assert spans_of(after) == [(refused, False)]

    asyncio.run(scenario())
