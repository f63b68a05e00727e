"""The records the engine refused wait holding their decoding charge (``records``); their
partitions pause once those charges reach half of ``receiver.max_decoding_bytes``, not only
at ``max_poll_records`` of them: a few large refused records held the whole budget, and the
OTLP receivers' requests and the other partitions' records (other services) were throttled
``decoding`` until the refused ones were taken (``Flow.apply``, pure: a stand-in consumer)."""

from __future__ import annotations

from aiokafka import TopicPartition

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.receive.decoding import DecodeBudget
from otel_eval.receive.kafka.flow import Flow
from otel_eval.receive.kafka.offsets import OffsetTracker, TraceGate
from otel_eval.receive.kafka.records import Record
from otel_eval.receive.kafka.retries import Retries

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


class _Consumer:
    def __init__(self) -> None:
        self._paused: set[TopicPartition] = set()

    def assignment(self) -> set[TopicPartition]:
        return {A, B}

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def pause(self, *tps: TopicPartition) -> None:
        self._paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self._paused.difference_update(tps)


def _flow(budget: DecodeBudget) -> tuple[Flow, Retries[TopicPartition, Record],
                                         OffsetTracker[TopicPartition]]:
    config = KafkaConfig(brokers="k:9092", logs_topic="", max_poll_records=500)
    tracker: OffsetTracker[TopicPartition] = OffsetTracker()
    retries: Retries[TopicPartition, Record] = Retries()
    for tp in (A, B):
        tracker.assign(tp)
    return (Flow(config, object(), KafkaStats(), tracker, TraceGate(), retries,  # type: ignore[arg-type]
                 decoding=budget), retries, tracker)


def _wait(retries: Retries[TopicPartition, Record], tracker: OffsetTracker[TopicPartition],
          offset: int, charge: int) -> None:
    rec = Record(A, tracker.take(A, offset), None, charge=charge)
    retries.offer(A, frozenset({f"t{offset}"}), rec, lambda _r, _again: "service_share")


def test_partitions_with_refused_records_pause_at_half_the_decoding_budget() -> None:
    budget = DecodeBudget(1000)
    flow, retries, tracker = _flow(budget)
    consumer = _Consumer()
    _wait(retries, tracker, 0, 300)
    flow.apply(consumer)  # type: ignore[arg-type]
    assert consumer.paused() == set()  # one record, under half: read on
    _wait(retries, tracker, 1, 200)
    flow.apply(consumer)  # type: ignore[arg-type]
    assert consumer.paused() == {A}  # half the budget waiting: A paused, B read on
