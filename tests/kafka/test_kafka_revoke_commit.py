"""On revocation the consumer commits what is done: a record whose traces the engine has
stored is done, even when the engine thread's report of it still waits for the loop (the
reports are drained on the loop in one wake-up per burst, and the revocation may run first).
Committed without it, the partition's next owner replayed records whose traces were stored,
and handed over (as if unjudged) runs that were stored."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition
from kafka_doubles import FakeEngine
from kafka_traces import requests_for, trace_ids

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.receive.kafka.consumer import KafkaConsumerStage


class RecordingConsumer:
    """What ``_revoke`` uses of ``AIOKafkaConsumer``: ``commit``."""

    def __init__(self) -> None:
        self.commits: list[dict[TopicPartition, tuple[int, str]]] = []

    async def commit(self, offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        self.commits.append(dict(offsets))


class HandingOver(FakeEngine):
    def __init__(self) -> None:
        super().__init__()
        self.handed_over: list[set[str]] = []

    def hand_over(self, ids: set[str]) -> int:
        self.handed_over.append(set(ids))
        return len(ids)


def test_a_revocation_commits_the_records_stored_before_it() -> None:
    a, b = trace_ids(2)
    req_a, req_b = (requests_for([t], 2, 1)[0].SerializeToString() for t in (a, b))

    async def revoke() -> tuple[list[dict[TopicPartition, tuple[int, str]]], list[set[str]]]:
        engine, consumer = HandingOver(), RecordingConsumer()
        stage = KafkaConsumerStage(KafkaConfig(brokers="127.0.0.1:9", topic="t", logs_topic=""),
                                   engine)
        stage._loop = asyncio.get_running_loop()
        stage._consumer = consumer  # type: ignore[assignment]
        p0 = TopicPartition("t", 0)
        stage._take(p0, 0, req_a)
        stage._take(p0, 1, req_b)
        engine.release(lambda ids: ids == {a})  # a stored; its report not drained yet
        await stage._revoke({p0})
        return consumer.commits, engine.handed_over

    commits, handed_over = asyncio.run(revoke())
    assert commits == [{TopicPartition("t", 0): (1, "")}]  # a's record done, b's replayed
    assert handed_over == [{b}]  # only the run not stored
