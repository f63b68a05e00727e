"""The results publisher's sender task outlives a record the producer refuses at ``send``
(aiokafka raises there, not in the future, when the topic's metadata does not come within
``request_timeout_ms``: a broker away for a while; or a record over ``max_request_size``):
the record is counted (``publish_dropped("results", "send_failed")``) and later evaluations
are published. Before, the task died silently: every later evaluation waited in the queue
and was dropped as ``queue_full`` until a restart, and only the shutdown raised it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from otel_eval.app.config import Config
from otel_eval.base.aio import LoopThread
from otel_eval.base.component import OnLoop
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.outputs.deps import Deps
from otel_eval.outputs.kafka import ResultsPublisher, build
from otel_eval.outputs.sender import DROP_REASONS
from otel_eval.telemetry.metrics import Metrics

WAIT_S = 30.0  # a bound on a wait that, fixed, ends at once


def _evaluated(tid: str) -> tuple[Trace, Any]:
    trace = Trace(tid, [Span(tid, "1" * 16, None, "invoke_agent", 1, 2)], "complete")
    return trace, Evaluator(Config()).evaluate(trace)


class _Producer:
    """Refuses the first record at ``send`` (as aiokafka does), takes the others."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.second = asyncio.Event()
        self.calls = 0

    async def send(self, topic: str, value: bytes, key: bytes,
                   headers: list[tuple[str, bytes]] | None = None) -> asyncio.Future[None]:
        self.calls += 1
        if self.calls == 1:
            raise KafkaTimeoutError("Failed to update metadata after 40.0 secs.")
        self.sent.append(key)
        self.second.set()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def stop(self) -> None:
        pass


async def _publish_two() -> tuple[KafkaStats, _Producer]:
    stats = KafkaStats()
    publisher = ResultsPublisher(KafkaConfig(results_topic="results"), stats)
    producer = _Producer()
    publisher._loop = asyncio.get_running_loop()
    publisher._producer = producer  # type: ignore[assignment]
    publisher._task = asyncio.create_task(publisher._run())
    first, second = _evaluated("a" * 32), _evaluated("b" * 32)
    publisher.export(*first)
    await asyncio.wait_for(_called(producer), WAIT_S)
    task = publisher._task
    assert not task.done(), f"the sender task died: {task.exception()!r}"
    publisher.export(*second)
    try:
        await asyncio.wait_for(producer.second.wait(), WAIT_S)
    finally:
        await publisher.shutdown(1.0)
    return stats, producer


async def _called(producer: _Producer) -> None:
    while producer.calls == 0:
        await asyncio.sleep(0)  # a yield to the sender task, no time


def test_a_record_refused_at_send_is_counted_and_the_next_is_published() -> None:
    stats, producer = asyncio.run(_publish_two())
    assert producer.sent == [b"b" * 32]
    assert stats.dropped[("results", "send_failed")] == 1


class _RefusingProducer:
    """Refuses every record at ``send``: the first as too large, the others as undelivered."""

    def __init__(self) -> None:
        self.calls = 0

    async def send(self, topic: str, value: bytes, key: bytes,
                   headers: list[tuple[str, bytes]] | None = None) -> asyncio.Future[None]:
        self.calls += 1
        if self.calls == 1:
            raise MessageSizeTooLargeError()
        raise KafkaTimeoutError("Failed to update metadata after 40.0 secs.")

    async def stop(self) -> None:
        pass


def test_its_drops_are_in_the_series_the_results_dropped_alert_reads() -> None:
    """docs/metrics.md: ``sink_dropped_total`` counts a result sink's drops by ``sink``
    (``results`` among them), and OtelEvalResultsDropped reads only that series. The Kafka
    results sink counted its drops in ``kafka_publish_dropped_total`` alone: records lost on
    the results topic never raised the alert."""
    metrics = Metrics()
    deps = Deps(metrics=metrics, registry=metrics.registry, store=cast(Any, None),
                store_path="", store_target="", loop=LoopThread())
    config = KafkaConfig(brokers="127.0.0.1:1", results_topic="results", results_queue_size=2)
    sink = build(config, deps)
    assert isinstance(sink, OnLoop)
    publisher = sink.part
    assert isinstance(publisher, ResultsPublisher)
    producer = _RefusingProducer()

    async def scenario() -> None:
        publisher._loop = asyncio.get_running_loop()
        for i in range(4):  # the queue holds 2: the 2 oldest go, queue_full
            publisher._enqueue(f"{i:032x}", b"{}")
        publisher._producer = producer  # type: ignore[assignment]
        await publisher.shutdown(WAIT_S)  # sends the 2 queued: too large, then refused

    asyncio.run(scenario())
    assert producer.calls == 2

    def dropped(reason: str) -> float | None:
        return metrics.registry.get_sample_value(
            "otel_eval_sink_dropped_total", {"sink": "results", "reason": reason})

    assert (dropped("queue_full"), dropped("too_large"), dropped("send_failed")) == (2, 1, 1)
    assert {"queue_full", "too_large", "send_failed", "not_started"} <= set(DROP_REASONS)
