"""The Kafka results topic carries the judge the results API returns: a trace is published
when it is stored, before the (asynchronous) judge has scored it, and is published again once
its judgement is stored (docs/configuration.md ``kafka.results_topic``: one JSON evaluation per
stored trace, key the trace id, the last one per key what a compacted topic keeps).

Before, the judge stage wrote its judgement to the store and the events sink only: every
record of the results topic lacked ``judge`` while ``GET /v1/evaluations/{trace_id}`` had it,
so a team consuming the topic never saw the judge's scores, critiques or lucky passes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from pathlib import Path
from typing import Any

from judge_fake_llm import FakeLLM, good
from judge_fixtures import combined_reply, config, evaluation
from prometheus_client import CollectorRegistry
from support.poll import poll

from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from otel_eval.base.aio import LoopThread
from otel_eval.base.component import Held
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Trace
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.feedback import Feedback
from otel_eval.evaluate.judge.journal import PendingJournal
from otel_eval.evaluate.judge.stage import JudgeStage
from otel_eval.outputs.kafka import ResultsPublisher
from otel_eval.store import SqliteStore
from otel_eval.telemetry.metrics import Metrics


class Published:
    """The results topic's records, as ``ResultsPublisher`` serialises them."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def publish(self, evaluation: Evaluation, held: Held | None = None) -> None:
        self.publish_stored(evaluation.to_json(), evaluation.evaluated_at_ns, held)

    def publish_stored(self, body: dict[str, Any], evaluated_at_ns: int, row_version: int = 0,
                       held: Held | None = None) -> None:
        with self._lock:  # delivered at once: ``held`` is not taken
            self.records.append(json.loads(json.dumps(body, default=str)))

    def ordered(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


def test_a_judged_trace_is_published_again_with_the_judge_the_api_returns(
        llm: FakeLLM, tmp_path: Path) -> None:
    llm.route = lambda body: good(combined_reply([0, 1, 2, 3, 4]))
    path = str(tmp_path / "s.db")
    store = SqliteStore(path).open()
    ev = evaluation(trace_id="c3" * 16)
    store.put_many([ev])
    topic = Published()
    topic.publish(ev)  # the results sink's export, as the trace was stored
    loop = LoopThread()
    loop.start()
    stage = JudgeStage(config(llm.api_base, combined=True), loop, store,
                       Metrics(CollectorRegistry()), cache_path=path, results=topic)
    try:
        stage.start()
        stage.export(Trace(ev.trace_id, [], "complete"), ev)
        poll(lambda: len(topic.records) == 2, "the judged trace to be published again",
             interval_s=0.02)
        stored = store.get(ev.trace_id)
        assert stored is not None and "judge" in stored
        first, last = topic.records
        assert "judge" not in first  # published before the judge scored it
        assert last["judge"] == stored["judge"]  # the last for its key: the API's object
        assert last == json.loads(json.dumps(stored))
    finally:
        stage.shutdown(5.0)
        loop.stop()
        store.close()


def test_a_judgement_stored_after_an_outcome_publishes_the_verdict_the_api_returns(
        llm: FakeLLM, tmp_path: Path) -> None:
    """An outcome recorded while the trace waited for its judge (``POST /v1/feedback``, the
    web view's form) re-judges the stored verdict; the judge, done later, published the
    evaluation it held, with the verdict from before the outcome: the topic's last record
    of the run said the old verdict while the results API said the new one."""
    llm.route = lambda body: good(combined_reply([0, 1, 2, 3, 4]))
    path = str(tmp_path / "s.db")
    store = SqliteStore(path).open()
    ev = evaluation(trace_id="c4" * 16)
    store.put_many([ev])
    evaluator = Evaluator(Config())
    assert Feedback(store, evaluator, Metrics(CollectorRegistry()).prediction).record(
        ev.trace_id, "failure") is not None
    before = store.get(ev.trace_id)
    assert before is not None and before["verdict"]["outcome"] == "failure"
    topic = Published()
    loop = LoopThread()
    loop.start()
    stage = JudgeStage(config(llm.api_base, combined=True), loop, store,
                       Metrics(CollectorRegistry()), cache_path=path, results=topic)
    try:
        stage.start()
        stage.export(Trace(ev.trace_id, [], "complete"), ev)
        poll(lambda: len(topic.records) == 1, "the judged trace to be published",
             interval_s=0.02)
        stored = store.get(ev.trace_id)
        assert stored is not None and "judge" in stored
        [last] = topic.records
        assert last["verdict"] == stored["verdict"]  # the outcome's, not the engine's
        assert last == json.loads(json.dumps(stored))
    finally:
        stage.shutdown(5.0)
        loop.stop()
        store.close()


def test_serve_hands_the_results_topic_to_the_judge(tmp_path: Path) -> None:
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "127.0.0.1:0",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "e.db"),
        "evaluation.workers": 1, "judge.model": "openai/judge",
        "judge.api_base": "http://127.0.0.1:9/v1", "kafka.brokers": "127.0.0.1:9",
        "kafka.results_topic": "results"})
    svc = Service(cfg, registry=CollectorRegistry())
    judge = next(s for s in svc.engine.sinks if isinstance(s, JudgeStage))
    assert judge.results is not None
    assert isinstance(getattr(judge.results, "part", None), ResultsPublisher)


def test_a_judgement_published_after_the_results_sink_stopped_is_a_counted_drop() -> None:
    """The judge stops first and waits for its writes within its deadline; a write that lands
    past it still publishes the judged result, after the results sink stopped: that record
    is dropped and counted (reason shutdown), never left in a queue nobody sends."""
    stats = KafkaStats()
    publisher = ResultsPublisher(KafkaConfig(), stats)
    loop = asyncio.new_event_loop()
    try:
        publisher._loop = loop
        loop.run_until_complete(publisher.shutdown(1.0))
        publisher.publish(evaluation(trace_id="e5" * 16))
        loop.call_soon(loop.stop)
        loop.run_forever()
    finally:
        loop.close()
    assert stats.dropped[("results", "shutdown")] == 1
    assert not publisher._queue


def test_a_judge_skipped_restart_is_published_as_the_api_returns_it(tmp_path: Path) -> None:
    """A process killed while a trace waited for its judge leaves it in the journal; the
    next start stores it skipped ``restart``, which ``GET /v1/evaluations/{trace_id}`` then
    returns. Before, that write was never published: the topic's last record of the run was
    its unjudged one, as if the judge were still to come, unlike every other judge skip."""
    path = str(tmp_path / "s.db")
    store = SqliteStore(path).open()
    ev = evaluation(trace_id="c5" * 16)
    ev.evaluated_at_ns = 1_000
    store.put_many([ev])
    journal = PendingJournal(path).open()  # the dead process's entry, queued for the judge
    journal.add(ev.trace_id, 0, "", ev.evaluated_at_ns)
    journal.close()
    topic = Published()
    loop = LoopThread()
    loop.start()
    stage = JudgeStage(config("http://127.0.0.1:9/v1", combined=True), loop, store,
                       Metrics(CollectorRegistry()), cache_path=path, results=topic)
    try:
        stage.start()  # marks the dead process's work before it takes any
        stored = store.get(ev.trace_id)
        assert stored is not None
        assert stored["judge"]["overall"] == {"status": "skipped", "reason": "restart"}
        assert topic.records and topic.records[-1] == json.loads(json.dumps(stored))
    finally:
        stage.shutdown(5.0)
        loop.stop()
        store.close()
