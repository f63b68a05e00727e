"""The results publisher's sender task outlives a record the producer refuses at ``send``
(aiokafka raises there, not in the future, when the topic's metadata does not come within
``request_timeout_ms``: a broker away for a while; or a record over ``max_request_size``):
the record is counted (``publish_dropped("results", "send_failed")``) and later evaluations
are published. Before, the task died silently: every later evaluation waited in the queue
and was dropped as ``queue_full`` until a restart, and only the shutdown raised it."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.errors import KafkaTimeoutError

from otel_eval.app.config import Config
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.outputs.kafka import ResultsPublisher

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

    async def send(self, topic: str, value: bytes, key: bytes) -> asyncio.Future[None]:
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
