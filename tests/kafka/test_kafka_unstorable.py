"""A trace the store will not take never wedges its partition (issue 33, finding 1).

Before, the exception a poison trace raised while being stored killed the engine thread:
the committed offset stayed at 0 of 11 through restarts. Now the batch is stored trace by
trace; a trace that cannot be stored even as an evaluation error is dropped and counted, and
its record is done: every offset is committed. Real ``Service`` on librdkafka's mock cluster.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kafka_doubles import Topic
from support.harness import running_service
from support.poll import poll
from test_kafka_serve import committed, consumed, kafka_changes

import otel_eval.store.sqlite as sqlite_module
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.model import Span
from otel_eval.base.results import Evaluation
from otel_eval.decode import encode
from otel_eval.receive.kafka.publisher import KafkaPublisher
from otel_eval.store.base import Row, evaluation_row

POISON = "0d" * 16
CLEAN = [f"{i:02x}" * 16 for i in range(0x10, 0x1a)]


def _spans(trace: str) -> list[Span]:
    return [Span(trace, "01" * 8, None, "invoke_agent a", 1, 9,
                 attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}),
            Span(trace, "02" * 8, "01" * 8, "execute_tool search", 2, 8,
                 attributes={"gen_ai.operation.name": "execute_tool",
                             "gen_ai.tool.name": "search"})]


async def _publish(topic: Topic) -> int:
    pub = KafkaPublisher(KafkaConfig(brokers=topic.bootstrap, topic=topic.name))
    await pub.start()
    try:
        spans = [s for t in [POISON, *CLEAN] for s in _spans(t)]
        return await pub.publish(encode.encode_spans(spans).SerializeToString())
    finally:
        await pub.stop()


def _never(ev: Evaluation) -> Row:
    if ev.trace_id == POISON:
        raise TypeError("a row that cannot be built")
    return evaluation_row(ev)


def test_an_unstorable_trace_is_dropped_counted_and_its_offset_committed(
        topic: Topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_module, "evaluation_row", _never)
    records = asyncio.run(_publish(topic))
    assert records == 11  # one record per trace id
    with running_service(tmp_path, **kafka_changes(topic)) as h:
        poll(lambda: consumed(h) == 22, "every span consumed")
        assert h.release() == 11
        assert all(h.svc.store.get(t) is not None for t in CLEAN)
        assert h.svc.store.get(POISON) is None
        assert h.sample("otel_eval_evaluation_skipped_total", reason="unstorable") == 1
        poll(lambda: committed(h, topic.partitions) == records, "every offset committed")
        assert h.svc.engine.healthy
