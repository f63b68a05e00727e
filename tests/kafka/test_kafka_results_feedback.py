"""The results topic's last record of a trace is what the results API returns, after a known
outcome too. ``POST /v1/feedback`` (and the web view's outcome form) re-judges a stored
verdict; before, the record was never published again, so a compacted results topic kept the
old pass/fail while ``GET /v1/evaluations/{trace_id}`` showed the new one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.feedback import Feedback
from otel_eval.outputs.kafka import ResultsPublisher
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics


def _queued(publisher: ResultsPublisher, loop: asyncio.AbstractEventLoop) -> list[dict]:
    loop.call_soon(loop.stop)  # after the hand-overs scheduled before it
    loop.run_forever()
    return [json.loads(payload) for _, payload, *_ in publisher._queue]


def test_an_outcome_publishes_the_re_judged_verdict_again(tmp_path: Path) -> None:
    tid = "e5" * 16
    root = Span(tid, "1" * 16, None, "invoke_agent", 1, 100,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    failed = Span(tid, "2" * 16, "1" * 16, "execute_tool lookup", 10, 20, status="error",
                  status_message="lookup failed",
                  attributes={"gen_ai.operation.name": "execute_tool",
                              "gen_ai.tool.name": "lookup"})
    trace = Trace(tid, [root, failed], "complete")
    evaluator = Evaluator(Config())
    evaluation = evaluator.evaluate(trace)
    evaluation.evaluated_at_ns = 1_000
    # a tool error nothing recovered from: fails until the outcome is known a success
    assert evaluation.verdict is not None and not evaluation.verdict.passed
    store = Store(str(tmp_path / "s.db"))
    store.put_many([evaluation])
    publisher = ResultsPublisher(KafkaConfig(), KafkaStats())
    loop = asyncio.new_event_loop()
    publisher._loop = loop
    try:
        publisher.export(trace, evaluation)  # as the trace was stored: failed
        feedback = Feedback(store, evaluator, Metrics(CollectorRegistry()).prediction,
                            published=publisher)
        assert feedback.record(tid, "success") is not None
        stored = store.get(tid)
        assert stored is not None and stored["verdict"]["passed"] is True
        records = _queued(publisher, loop)
        assert records[-1] == json.loads(json.dumps(stored))  # the API's object, last
        # the engine's hand-over of the same evaluation, late, stays behind it
        publisher.export(trace, evaluation)
        assert _queued(publisher, loop)[-1]["verdict"]["passed"] is True
    finally:
        loop.close()
        store.close()


def test_serve_hands_the_results_topic_to_feedback(tmp_path: Path) -> None:
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "127.0.0.1:0",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "e.db"),
        "evaluation.workers": 1, "kafka.brokers": "127.0.0.1:9",
        "kafka.results_topic": "results"})
    svc = Service(cfg, registry=CollectorRegistry())
    assert isinstance(svc._feedback._published, ResultsPublisher)


def test_a_front_end_on_the_fleets_store_publishes_its_feedback(tmp_path: Path) -> None:
    """A ``--kafka-publish`` front end with ``store.url`` answers ``POST /v1/feedback`` from
    the fleet's store and re-judges the stored verdict there, but had no results publisher:
    an outcome sent to its admin port (the helm chart's receiver Deployment, the web view it
    serves) reached the store and never the results topic, which kept the old pass/fail. It
    now starts the topic's publisher for its feedback alone (it evaluates nothing else)."""
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "127.0.0.1:0",
        "admin.endpoint": "127.0.0.1:0", "store.url": "postgresql://u@db:5432/e",
        "kafka.brokers": "127.0.0.1:9", "kafka.publish": True,
        "kafka.results_topic": "results"})
    svc = Service(cfg, registry=CollectorRegistry())
    assert isinstance(svc._feedback._published, ResultsPublisher)
    assert "ResultsPublisher" in svc._lifecycle(True).names  # started, so it sends
    assert svc.engine.sinks == []  # nothing else: the workers publish what they evaluate


def test_a_front_end_without_the_fleets_store_has_no_feedback_to_publish(
        tmp_path: Path) -> None:
    """Without ``store.url`` a front end's admin API reads an empty in-memory store: no
    outcome is ever recorded there (404), so it starts no results publisher."""
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "127.0.0.1:0",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "e.db"),
        "kafka.brokers": "127.0.0.1:9", "kafka.publish": True,
        "kafka.results_topic": "results"})
    svc = Service(cfg, registry=CollectorRegistry())
    assert svc._feedback._published is None
    assert "ResultsPublisher" not in svc._lifecycle(True).names
