"""The results topic in a fleet: a worker's judge and a ``--kafka-publish`` front end's
feedback (``POST /v1/feedback`` on the fleet's store) each publish a trace's stored object,
each from its own process, so the ordering lock (``ResultsPublisher.ordered``) holds between
them no more than between any two workers: the topic's last record of the key may be the
older one. Each record now carries its place among its key's in headers (revision,
evaluated_at_ns, and the row's version: the writes made to the evaluation, migration 20), so
a consumer keeping the highest per key ends on what the results API returns. Before, the
records said nothing to order them by: the topic ended on the judge's read, the verdict the
outcome re-judged lost."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from judge_fixtures import config, evaluation
from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config
from otel_eval.base.aio import LoopThread
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.feedback import Feedback
from otel_eval.evaluate.judge.stage import JudgeStage
from otel_eval.outputs.kafka import ResultsPublisher
from otel_eval.store import SqliteStore
from otel_eval.telemetry.metrics import Metrics

Record = tuple[bytes, bytes, dict[str, bytes]]


class _Topic:
    """One partition of the results topic: what each process's producer delivers, in the
    order they deliver it."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    async def send(self, topic: str, value: bytes, key: bytes,
                   headers: list[tuple[str, bytes]] | None = None) -> asyncio.Future[None]:
        self.records.append((key, value, dict(headers or [])))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def stop(self) -> None:
        pass


def _process(topic: _Topic) -> tuple[ResultsPublisher, asyncio.AbstractEventLoop]:
    """A process's results publisher, its records sent once its loop runs (``_flush``)."""
    publisher = ResultsPublisher(KafkaConfig(results_topic="results"), KafkaStats())
    loop = asyncio.new_event_loop()
    publisher._loop = loop
    publisher._producer = topic  # type: ignore[assignment]
    return publisher, loop


def _flush(publisher: ResultsPublisher, loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(publisher.shutdown(5.0))  # sends what was handed over first
    loop.close()


def _newest(records: list[Record]) -> dict[str, Any]:
    """What a consumer keeps of the key (docs/guide.md): the record with the highest
    (revision, evaluated_at_ns, row_version), compared as integers; of equals, the later."""
    def place(record: Record) -> tuple[int, ...]:
        headers = record[2]
        return tuple(int(headers[h]) for h in (
            "otel_eval.revision", "otel_eval.evaluated_at_ns", "otel_eval.row_version"))
    best = records[0]
    for record in records[1:]:
        if place(record) >= place(best):
            best = record
    return dict(json.loads(best[1]))


def test_a_consumer_keeps_the_newest_record_the_fleets_processes_published(
        tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "fleet.db")).open()  # the fleet's one store
    ev = evaluation(trace_id="e8" * 16)
    ev.evaluated_at_ns = 1_000
    store.put_many([ev])
    topic = _Topic()
    worker, worker_loop = _process(topic)
    front_end, front_loop = _process(topic)
    stage = JudgeStage(config("http://127.0.0.1:9/v1"), LoopThread(), store,
                       Metrics(CollectorRegistry()), results=worker)
    try:
        ev.judge = {"score": 0.5}
        assert store.put_judge(ev.trace_id, 0, ev.judge, ev.evaluated_at_ns)
        stage._publish(worker, ev)  # the worker's judge read the row back, its record queued
        feedback = Feedback(store, Evaluator(Config()), Metrics(CollectorRegistry()).prediction,
                            published=front_end)
        assert feedback.record(ev.trace_id, "failure") is not None  # on the front end
        _flush(front_end, front_loop)  # the front end's producer is the quicker
        _flush(worker, worker_loop)
        stored = store.get(ev.trace_id)
        assert stored is not None and stored["verdict"]["outcome"] == "failure"
        assert "judge" in stored
        assert [k for k, _, _ in topic.records] == [ev.trace_id.encode()] * 2
        assert json.loads(topic.records[-1][1]) != stored  # the topic's order: the judge's
        assert _newest(topic.records) == json.loads(json.dumps(stored))
    finally:
        store.close()
