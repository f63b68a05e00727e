"""A revocation hands over only the runs the revoked partitions alone fed. A trace whose
records came on two partitions (an exporter without ``partition_traces_by_id``) was forgotten
whole when one of them was revoked, with the waiters of the records of the partition the
worker kept: those were never done, so that partition's committed offset stopped there for
as long as the worker owned it (every later record replayed after the next restart), and
the done offsets behind it piled up in memory and in every commit's metadata."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiokafka import TopicPartition
from kafka_traces import requests_for, trace_ids
from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.receive.kafka.consumer import KafkaConsumerStage
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics


class RecordingConsumer:
    async def commit(self, offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        pass


def test_a_trace_split_over_two_partitions_keeps_the_kept_partition_moving(
        tmp_path: Path) -> None:
    (tid,) = trace_ids(1)
    head, middle, root = (r.SerializeToString() for r in requests_for([tid], 3, 1))
    clock = [1000.0]
    cfg = Config()
    store = Store(str(tmp_path / "s.db"))
    engine = Engine(InProcess(Evaluator(cfg), store),
                    StoreHealth(store.location, clock=lambda: clock[0]),
                    Metrics(CollectorRegistry()), assembly=cfg.assembly,
                    clock=lambda: clock[0])

    async def scenario() -> int | None:
        stage = KafkaConsumerStage(KafkaConfig(brokers="127.0.0.1:9", topic="t", logs_topic=""),
                                   engine)
        stage._loop = asyncio.get_running_loop()
        stage._consumer = RecordingConsumer()  # type: ignore[assignment]
        p0, p1 = TopicPartition("t", 0), TopicPartition("t", 1)
        stage._take(p0, 0, head)
        stage._take(p1, 0, middle)
        await stage._revoke({p0})  # p1 stays this worker's
        stage._take(p1, 1, root)
        clock[0] += cfg.assembly.grace_s + 1
        engine.tick()
        engine.process()
        stage._drain_stored()  # what the loop runs next (in process: stored already)
        return stage.tracker.position(p1)

    assert asyncio.run(scenario()) == 2  # both of p1's records done: committable past them
    assert store.get(tid) is not None
