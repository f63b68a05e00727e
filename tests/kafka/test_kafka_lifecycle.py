"""The Kafka parts implement the one lifecycle through ``OnLoop`` (their coroutines on the
service's loop): each starts against the mock cluster and shuts down."""

from __future__ import annotations

import pytest
from kafka_doubles import FakeEngine, Topic

from otel_eval.app.lifecycle import Component, OnLoop
from otel_eval.base.aio import LoopThread
from otel_eval.outputs.kafka import ResultsPublisher
from otel_eval.receive.kafka.consumer import KafkaConsumerStage
from otel_eval.receive.kafka.publisher import KafkaPublisher


@pytest.mark.parametrize("kind", ["consumer", "publisher", "results publisher"])
def test_kafka_part_starts_and_shuts_down(topic: Topic, loop: LoopThread, kind: str) -> None:
    cfg = topic.config(results_topic=topic.name)
    made = {"consumer": lambda: KafkaConsumerStage(cfg, loop.run(_fake_engine())),
            "publisher": lambda: KafkaPublisher(cfg),
            "results publisher": lambda: ResultsPublisher(cfg)}[kind]()
    part = OnLoop(made, loop)
    assert isinstance(part, Component)
    part.start()
    part.shutdown(5.0)
    if kind == "consumer":
        assert made.failure is None


async def _fake_engine() -> FakeEngine:
    return FakeEngine()  # made on the loop: it schedules notifications there
