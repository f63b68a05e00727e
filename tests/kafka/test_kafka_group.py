"""Group rebalancing with two members, against the suite's real Kafka broker
(``kafka_server``: tests/support/kafka_server.py; ``broker_topic``, conftest.py, creates
and deletes its own 6-partition topic).

librdkafka's mock cluster cannot run a two-member aiokafka group (it refuses a follower's
SyncGroup that arrives after the leader's: see the ``otel_eval.receive.kafka.assignment``
docstring), so
this test runs on a real broker. Checked: when a second member joins,
the first member's partitions are revoked with its finished work committed; the new owner
replays every unstored trace whole (never a tail whose head the old owner consumed) and
skips the stored ones; in the end every record is committed.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from kafka_doubles import FakeEngine, Topic, WatchedStats, produce_traces
from support.poll import poll_async

from otel_eval.receive.kafka.consumer import KafkaConsumerStage

pytestmark = pytest.mark.kafka_broker


async def committed_total(topic: Topic) -> int:
    c = AIOKafkaConsumer(bootstrap_servers=topic.bootstrap, group_id=f"g-{topic.name}",
                         enable_auto_commit=False)
    await c.start()
    try:
        return sum([await c.committed(TopicPartition(topic.name, p)) or 0
                    for p in range(topic.partitions)])
    finally:
        await c.stop()


def test_second_member_takes_over_partitions_and_replays_whole_traces(
        broker_topic: Topic) -> None:
    topic = broker_topic

    async def scenario() -> None:
        spans = 3
        ids = await produce_traces(topic, 60, spans, traces_per_request=10)
        changed = asyncio.Condition()
        cfg = topic.config(session_timeout_s=10.0)
        first, second = FakeEngine(changed), FakeEngine(changed)
        stats_a = WatchedStats()
        a = KafkaConsumerStage(cfg, first, stats_a)
        b = KafkaConsumerStage(cfg, second, WatchedStats())
        await a.start()
        try:
            await first.until(lambda e: len(e.spans) == 60 * spans, timeout=60)
            # Store a third of the traces; their records get committed (with metadata).
            stored_early = set(ids[:20])
            first.release(lambda tids: tids <= stored_early)
            # They are the first records of every partition (produced first): committed once
            # every partition's position has passed them.
            await stats_a.until(lambda s: sum(s.commits.values()) == 20 * spans, timeout=60)
            await b.start()
            await poll_async(lambda: len(a.tracker.partitions()) + len(b.tracker.partitions())
                             == 6 and bool(b.tracker.partitions()), "the rebalance")
            first.auto_release = second.auto_release = True
            first.release()  # late: the revoked partitions' tickets are stale, ignored
            second.release()
            await poll_async(lambda: not first.held and not second.held, "every submit stored")
            async def all_committed() -> bool:
                return await committed_total(topic) == 60 * spans

            await poll_async(all_committed, "every record committed", interval_s=0.1)
            # the partitions it lost are reported by their new owner only
            owned = {tp.partition for tp in a.tracker.partitions()}
            assert set(stats_a.commits) <= owned and set(stats_a.lags) <= owned
        finally:
            await b.shutdown(10.0)
            await a.shutdown(10.0)
        assert a.failure is None and b.failure is None
        got = Counter(s.trace_id for s in second.spans)
        partial = {t: n for t, n in got.items() if n % spans}
        assert not partial, f"the new owner got trace tails: {partial}"
        assert not set(got) & stored_early  # stored and committed: not replayed ...
        seen = Counter(s.trace_id for s in first.spans) + got
        assert all(seen[t] >= spans for t in ids)  # ... and nothing is lost

    asyncio.run(scenario())
