"""Acknowledged means durable for the record ``POST /v1/feedback`` publishes too. Once an
outcome re-judged a stored verdict, the 200 answers and the stored object goes to the results
topic, but that record sat in the publisher's memory only: a kill -9 (or a stop whose flush
could not deliver it) after the 200 and before Kafka had it lost the re-judged verdict from
the topic for good (the feedback row itself was stored), the topic's last record of the run
saying the old pass/fail while the results API said the new. The record is now owed in the
store (``results_owed``) until delivered, and the next start publishes it again: the topic's
last record of the key is the results API's object. Against the suite's real broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from kafka_doubles import Topic
from prometheus_client import CollectorRegistry
from test_kafka_serve import kafka_changes, read_records

from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from otel_eval.base.kafka.client import client_kwargs
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.outputs.kafka import ResultsPublisher
from otel_eval.store import Store

pytestmark = pytest.mark.kafka_broker

TID = "f6" * 16


def _failed_run(store_path: Path) -> None:
    """A run stored failed (a tool error nothing recovered from) until its outcome is known."""
    root = Span(TID, "1" * 16, None, "invoke_agent", 1, 100,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    failed = Span(TID, "2" * 16, "1" * 16, "execute_tool lookup", 10, 20, status="error",
                  status_message="lookup failed",
                  attributes={"gen_ai.operation.name": "execute_tool",
                              "gen_ai.tool.name": "lookup"})
    evaluation = Evaluator(Config()).evaluate(Trace(TID, [root, failed], "complete"))
    assert evaluation.verdict is not None and not evaluation.verdict.passed
    store = Store(str(store_path))
    try:
        store.put_many([evaluation])
    finally:
        store.close()


@contextlib.contextmanager
def _serve(tmp_path: Path, changes: dict[str, Any]) -> Iterator[Service]:
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "127.0.0.1:0",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "otel-eval.db"),
        "evaluation.workers": 1, **changes})
    svc = Service(cfg, registry=CollectorRegistry())
    svc.start(worker=False)
    try:
        yield svc
    finally:
        svc.shutdown(deadline_s=1)


def _admin(svc: Service, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{svc.admin.port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
        answer: dict[str, Any] = json.loads(r.read())
        return answer


def _never_delivered(publisher: ResultsPublisher) -> None:
    """The broker takes nothing more from this process: each record handed to the producer
    is never acknowledged (the process dies, or stops, before it is)."""
    assert publisher._loop is not None

    async def send(*_args: Any, **_kwargs: Any) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    publisher._producer.send = send  # type: ignore[method-assign,union-attr]


async def _create(bootstrap: str, name: str) -> None:
    admin = AIOKafkaAdminClient(**client_kwargs(KafkaConfig(brokers=bootstrap)))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        await admin.close()


def test_an_outcome_acknowledged_reaches_the_results_topic_after_a_crash(
        broker_topic: Topic, tmp_path: Path) -> None:
    results = f"{broker_topic.name}_results"
    asyncio.run(_create(broker_topic.bootstrap, results))
    _failed_run(tmp_path / "otel-eval.db")
    changes = kafka_changes(broker_topic, **{"kafka.results_topic": results})

    with _serve(tmp_path, changes) as first:
        publisher = next(s.part for s in first.sinks
                         if isinstance(getattr(s, "part", None), ResultsPublisher))
        assert isinstance(publisher, ResultsPublisher)
        _never_delivered(publisher)
        answered = _admin(first, "/v1/feedback", {"trace_id": TID, "outcome": "success"})
        assert answered["verdict"]["passed"] is True  # the 200: the outcome acknowledged
    # the process is gone and Kafka never had the re-judged verdict

    with _serve(tmp_path, changes) as second:
        api = _admin(second, f"/v1/evaluations/{TID}")
        assert api["verdict"]["passed"] is True
        second.shutdown(deadline_s=5)  # sends what the start handed over
    records = [(json.loads(v), h) for _, k, v, h in
               asyncio.run(read_records(broker_topic.bootstrap, results, 1))
               if k == TID.encode()]
    assert records, "the re-judged verdict never reached the results topic"
    last, headers = records[-1]
    assert last == api  # the topic's last record of the key is the results API's object
    assert headers["otel_eval.row_version"] == b"1"  # the feedback's write
    store = Store(str(tmp_path / "otel-eval.db"))
    try:
        assert store.results_owed(10) == []  # delivered: owed no more
    finally:
        store.close()
