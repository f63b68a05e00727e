"""The results publisher's shutdown counts every record once: published, send_failed, or
dropped with reason shutdown. Cancelling its sender while records were with the producer
(their deliveries awaited) counted them neither published nor dropped. A producer double
stands in for aiokafka's: what it holds, and what its ``stop`` (which delivers what it holds)
makes of each record, is the test's to say."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.outputs.kafka import ResultsPublisher


class _Producer:
    """Holds each record's delivery future. ``room``: records it takes before ``send``
    waits for buffer space (never given). ``stop`` delivers the first record, fails the
    second, and leaves the rest unknown (a sender that died)."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.futures: list[asyncio.Future[Any]] = []
        self.full = asyncio.Event()  # every record it has room for is sent
        self.stopped = False
        self.refused = False

    async def send(self, topic: str, value: bytes, key: bytes,
                   headers: list[tuple[str, bytes]] | None = None) -> asyncio.Future[Any]:
        if len(self.futures) == self.room:
            await asyncio.Event().wait()  # no buffer space: waits until cancelled
        fut = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        if len(self.futures) == self.room:
            self.full.set()
        return fut

    async def stop(self) -> None:
        self.stopped = True
        outcomes = [lambda f: f.set_result(None), lambda f: f.set_exception(KafkaError())]
        for fut, outcome in zip(self.futures, outcomes, strict=False):
            if not fut.done():
                outcome(fut)


def _shut_down_while_sending(records: int, room: int) -> KafkaStats:
    stats = KafkaStats()
    publisher = ResultsPublisher(KafkaConfig(results_topic="results"), stats)
    producer = _Producer(room)

    async def scenario() -> None:
        publisher._loop = asyncio.get_running_loop()
        publisher._producer = producer  # type: ignore[assignment]
        publisher._task = asyncio.create_task(publisher._run())
        for i in range(records):
            publisher._enqueue(f"{i:032x}", b"{}")
        await producer.full.wait()  # the sender awaits deliveries, or room for the next
        await publisher.shutdown(deadline_s=0)

    asyncio.run(scenario())
    assert producer.stopped
    return stats


def test_records_the_producer_held_when_the_sender_was_cancelled_are_counted() -> None:
    stats = _shut_down_while_sending(records=3, room=3)
    assert stats.published_records == {"results": 1}
    assert stats.dropped == {("results", "send_failed"): 1, ("results", "shutdown"): 1}


def test_records_queued_behind_a_full_producer_are_counted_once() -> None:
    stats = _shut_down_while_sending(records=4, room=1)
    assert stats.published_records == {"results": 1}
    assert stats.dropped == {("results", "shutdown"): 3}


class _Refusing(_Producer):
    """Refuses the first record before sending it (over max_request_bytes), as aiokafka's
    ``send`` does: it raises instead of returning a delivery."""

    async def send(self, topic: str, value: bytes, key: bytes,
                   headers: list[tuple[str, bytes]] | None = None) -> asyncio.Future[Any]:
        if not self.refused:
            self.refused = True
            raise MessageSizeTooLargeError()
        return await super().send(topic, value, key)


def test_a_record_the_producer_refuses_is_counted_and_the_rest_still_published() -> None:
    """An evaluation over max_request_bytes made ``send`` raise out of the sender task: the
    record was counted nowhere, and the task died, so nothing was published after it."""
    stats = KafkaStats()
    publisher = ResultsPublisher(KafkaConfig(results_topic="results"), stats)
    producer = _Refusing(room=2)

    async def scenario() -> None:
        publisher._loop = asyncio.get_running_loop()
        publisher._producer = producer  # type: ignore[assignment]
        publisher._task = asyncio.create_task(publisher._run())
        for i in range(3):
            publisher._enqueue(f"{i:032x}", b"{}")
        # the two after it handed to the producer (or, before, the sender task died)
        full = asyncio.create_task(producer.full.wait())
        await asyncio.wait([full, publisher._task], return_when=asyncio.FIRST_COMPLETED)
        full.cancel()
        await publisher.shutdown(deadline_s=0)

    asyncio.run(scenario())
    assert stats.dropped == {("results", "record_too_large"): 1,
                             ("results", "send_failed"): 1}  # the double's stop fails one
    assert stats.published_records == {"results": 1}
