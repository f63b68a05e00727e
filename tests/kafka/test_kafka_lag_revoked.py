"""A partition revoked while the lag was being read is reported by its new owner only: the
group's revocation runs while the loop waits for a paused partition's end (``report_lag``),
and a lag set after ``forget`` left the old owner's frozen gauge beside the new owner's
(the dashboard sums lag by partition). Pure: a stand-in consumer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from aiokafka import TopicPartition

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.receive.kafka.flow import Flow
from otel_eval.receive.kafka.offsets import OffsetTracker, TraceGate
from otel_eval.receive.kafka.retries import Retries

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


class _Consumer:
    """Both partitions assigned and paused; asking their ends lets a revocation of B run."""

    def __init__(self, during_ends: list[object]) -> None:
        self.during_ends = during_ends
        # aiokafka's fetch positions, still holding B until the group's new assignment
        state = SimpleNamespace(has_valid_position=True, position=4)
        assignment = SimpleNamespace(tps={A, B}, state_value=lambda _tp: state)
        self._subscription = SimpleNamespace(subscription=SimpleNamespace(assignment=assignment))

    def assignment(self) -> set[TopicPartition]:
        return {A, B}  # a rebalance in progress still lists what is being revoked

    def paused(self) -> set[TopicPartition]:
        return {A, B}

    def highwater(self, _tp: TopicPartition) -> int:
        return 10

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        for revoke in self.during_ends:
            revoke()  # type: ignore[operator]
        return dict.fromkeys(tps, 10)


def test_a_partition_revoked_while_its_end_was_asked_gets_no_lag_from_the_old_owner() -> None:
    stats = KafkaStats()
    tracker: OffsetTracker[TopicPartition] = OffsetTracker()
    for tp in (A, B):
        tracker.assign(tp)
        tracker.take(tp, 4)
    flow = Flow(KafkaConfig(brokers="k:9092", logs_topic=""), object(),  # type: ignore[arg-type]
                stats, tracker, TraceGate(), Retries())

    def revoke_b() -> None:  # what the consumer's revocation does (``_revoke``)
        tracker.revoke(B)
        flow.forget(B)
        stats.released(B.partition, "spans")

    asyncio.run(flow.report_lag(_Consumer([revoke_b])))  # type: ignore[arg-type]
    assert stats.lags == {A.partition: 6}
    tracker.assign(B)  # assigned again: its lag is this worker's to report
    tracker.take(B, 7)
    flow.assigned({A, B})
    asyncio.run(flow.report_lag(_Consumer([])))  # type: ignore[arg-type]
    assert stats.lags == {A.partition: 6, B.partition: 3}
