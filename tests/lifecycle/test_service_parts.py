"""The optional parts of ``serve`` come from their builders (``build(config, deps)`` next to
each part) and take their place in the lifecycle: every part on, the Kafka publishing front
end, and every part off. Nothing is opened: a ``Service`` only constructs.

The publishing front end (``kafka.publish``, docs/guide.md "Scaling out": stateless) starts
only what it uses: its receivers feed the topic, never the engine, so it has no spool (a
request is acknowledged once Kafka acknowledged it), no store file, no evaluation workers,
no sinks, no session or issues job, retention or engine thread."""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config, ConfigError, load_config, replace
from otel_eval.app.lifecycle import Lifecycle, Step
from otel_eval.app.service import Service

COMMON = ["instance lock", "admin", "store", "spool"]
TAIL = ["engine", "listeners", "spool replay", "otlp grpc", "otlp http", "readiness"]
OFF = {"kafka.brokers": "", "judge.model": "", "export.events_endpoint": "",
       "export.forward_endpoint": "", "issues.interval_s": 0.0}


def _service(tmp_path: Path, **changes: Any) -> Service:
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "127.0.0.1:0",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "e.db"),
        "evaluation.workers": 1, "export.events_endpoint": "127.0.0.1:9",
        "export.forward_endpoint": "127.0.0.1:9", "judge.model": "openai/judge",
        "judge.max_cost_usd_per_hour": 0.0,
        "judge.api_base": "http://127.0.0.1:9/v1", "kafka.brokers": "127.0.0.1:9",
        "kafka.results_topic": "results", "issues.interval_s": 60.0, **changes})
    return Service(cfg, registry=CollectorRegistry())


@pytest.mark.parametrize(("changes", "parts", "sinks", "front"), [
    ({}, ["event loop", "admin api", "issues job", "retention", "ResultsPublisher",
          "Forwarder", "EvaluationEvents", "JudgeStage", "feedback results owed",
          "session job", "issues runs",
          "kafka consumer"],
     ["JudgeStage", "EvaluationEvents", "Forwarder", "OnLoop"], "Engine"),
    (OFF, ["admin api", "retention", "session job"], [], "Engine"),
], ids=["all-on", "all-off"])
def test_each_optional_part_is_built_and_placed_in_the_lifecycle(
        tmp_path: Path, changes: dict[str, Any], parts: list[str], sinks: list[str],
        front: str) -> None:
    svc = _service(tmp_path, **changes)
    kafka = [p for p in parts if p.startswith("kafka")]
    # a Kafka front end stops after the engine but starts after the spool replay: a consumer
    # submitting meanwhile would take open slots from replayed runs
    tail = TAIL[:3] + [f"{k} start" for k in kafka] + TAIL[3:]
    # a judge's configuration is checked before anything is opened (and migrated)
    first = ["judge check"] if "JudgeStage" in parts else []
    assert svc._lifecycle(True).names == first + COMMON + parts + tail
    # the judge first: it drains before the events sink it writes its judgements to
    assert [type(s).__name__ for s in svc.engine.sinks] == sinks
    assert svc.grpc is not None and type(svc.grpc.ingest.engine).__name__ == front
    assert (svc.issues is not None) == ("issues job" in parts)


def test_the_session_job_stops_before_the_sinks_it_feeds(tmp_path: Path) -> None:
    """The session job hands each completion to the judge (``judge_session``) and its event
    to the events sink. Stopped after them, a completion made while they drain went to a
    judge that had stopped: its task was cancelled with the loop's leftovers, the session
    never judged and no skip counted. As the engine, it stops (and starts) inside them."""
    names = _service(tmp_path)._lifecycle(True).names
    feeds = [names.index("JudgeStage"), names.index("EvaluationEvents")]
    assert names.index("session job") > max(feeds)  # shutdown runs the list backwards


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_the_publishing_front_end_starts_only_what_it_uses(tmp_path: Path, store: str) -> None:
    """Every other part on (judge, events, forward, results topic, issues, 4 evaluation
    workers): the front end still starts none of them. They would never get work (the
    receivers feed the topic), yet it held a spool and a SQLite file it never wrote, locked
    them (a second front end on the volume refused), and forked a worker process per core."""
    url = {"store.url": "postgresql://u@db:5432/e"} if store == "postgresql" else {}
    svc = _service(tmp_path, **{"kafka.publish": True, "evaluation.workers": 4, **url})
    # on the fleet's store, the results topic's publisher for the verdicts its feedback
    # re-judges there (tests/kafka/test_kafka_results_feedback.py), and those a stopped
    # process owed it published again once it is up
    feedback = ["ResultsPublisher", "feedback results owed"] if store == "postgresql" else []
    assert svc._lifecycle(True).names == [
        "instance lock", "admin", "store", "event loop", "admin api", *feedback, "kafka publisher",
        "listeners", "kafka publisher start", "otlp grpc", "otlp http", "readiness"]
    assert svc.spool is None and svc.pool is None and not svc._locks
    assert svc.engine.sinks == [] and svc.issues is None
    assert svc.grpc is not None and type(svc.grpc.ingest.engine).__name__ == "PublishingEngine"
    # no SQLite file created; the fleet's PostgreSQL store is read by the admin API
    assert svc.store.location == (":memory:" if store == "sqlite" else svc.config.store.target)


def _died(publisher: Any) -> None:
    """``publisher``'s sending task, as it is once it died past its boundary."""
    async def boom() -> None:
        raise RuntimeError("boom")

    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(boom())
        loop.run_until_complete(asyncio.wait([task]))
        assert isinstance(task.exception(), RuntimeError)
    finally:
        loop.close()
    publisher._task = task


@pytest.mark.parametrize("front_end", [True, False])
def test_a_dead_results_publisher_turns_health_and_readiness_red(
        tmp_path: Path, front_end: bool) -> None:
    """The results topic's publisher (a worker's sink; a publishing front end's, for the
    verdicts its feedback re-judges) had no ``healthy``, so its task dying left /healthz and
    /readyz green while nothing more reached the topic; docs/api.md promises a 503 naming
    the stage that died."""
    if front_end:
        svc = _service(tmp_path, **{"kafka.publish": True,
                                    "store.url": "postgresql://u@db:5432/e"})
        part = svc.feedback_topic
    else:
        svc = _service(tmp_path)  # a Kafka worker (kafka.brokers, not kafka.publish)
        part = next(s for s in svc.sinks if type(getattr(s, "part", s)).__name__
                    == "ResultsPublisher")
    assert part is not None
    assert svc._dead() is None
    _died(part.part)
    assert not svc.healthy
    assert "results" in (svc._dead() or "")


def test_the_shutdown_deadline_is_the_configured_one(tmp_path: Path) -> None:
    """SIGTERM's drain (``run_until_signal`` -> ``shutdown()``) takes
    ``service.shutdown_timeout_s``: a supervisor's longer grace (the chart's
    terminationGracePeriodSeconds) gives the judge and the exporters that much longer, not a
    fixed 30 s with the rest skipped."""
    config = tmp_path / "c.yaml"
    config.write_text("service:\n  shutdown_timeout_s: 170\n")
    svc = Service(replace(load_config(config), **{"store.path": str(tmp_path / "e.db")}),
                  registry=CollectorRegistry())
    given: list[float] = []
    lifecycle = Lifecycle(clock=lambda: 0.0)
    lifecycle.add("drain", Step(shutdown=given.append))
    lifecycle.start()
    svc._lifecycle_ = lifecycle
    svc.shutdown()
    assert given == [170.0]
    config.write_text("service:\n  shutdown_timeout_s: 0\n")
    with pytest.raises(ConfigError, match=r"service\.shutdown_timeout_s"):
        load_config(config)


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


@contextmanager
def _migration_held(svc: Service) -> Iterator[str]:
    """``svc`` starting on a thread with its store's opening (the migration) held: yields the
    admin endpoint's URL meanwhile; the migration goes on, and the start ends, on leaving."""
    opening, release = threading.Event(), threading.Event()
    open_store = svc._open_store

    def held_migration() -> None:
        opening.set()
        assert release.wait(60)
        open_store()

    svc._open_store = held_migration  # type: ignore[method-assign]
    starting = threading.Thread(target=svc.start, kwargs={"worker": False})
    starting.start()
    try:
        assert opening.wait(60)
        yield f"http://127.0.0.1:{svc.admin.port}"
    finally:
        release.set()
        starting.join(60)


def test_probes_are_answered_while_the_store_is_opened_and_migrated(tmp_path: Path) -> None:
    """A migration of a large store at an upgrade takes minutes: the admin endpoint listens
    before the store is opened, /healthz says the process is alive (a startup or liveness
    probe does not kill the migration halfway, to start it again, in a loop), /readyz and
    the API answer 503 until it is open."""
    svc = _service(tmp_path, **OFF, **{"receiver.grpc_endpoint": "",
                                       "receiver.http_endpoint": "127.0.0.1:0"})
    with _migration_held(svc) as url:
        assert svc.admin.port and _status(url + "/healthz") == 200
        assert _status(url + "/readyz") == 503
        assert _status(url + "/v1/evaluations") == 503
    try:
        assert _status(url + "/v1/evaluations") == 200
        assert _status(url + "/readyz") == 200
    finally:
        svc.shutdown(10.0)


def test_metrics_are_scraped_during_a_migration_without_reading_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prometheus scrapes /metrics during the minutes a migration takes: a 503 there is
    ``up == 0`` and OtelEvalDown pages for an upgrade. The process's metrics are served while
    /readyz says not ready; the gauges computed from the store (judge agreement) are not
    computed until it is open (its connection is the migration's), then at the next scrape."""
    svc = _service(tmp_path, **OFF, **{"receiver.grpc_endpoint": "",
                                       "receiver.http_endpoint": "127.0.0.1:0"})
    reads: list[str] = []
    for name in ("labelled", "feedback_version"):
        real = getattr(svc.store, name)
        monkeypatch.setattr(svc.store, name, lambda *a, _n=name, _r=real: (
            reads.append(_n), _r(*a))[1])
    with _migration_held(svc) as url:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            assert r.status == 200
            assert b"otel_eval_receiver_spans_received_total" in r.read()
        assert _status(url + "/readyz") == 503
        assert reads == []
    try:
        assert _status(url + "/metrics") == 200
        assert "labelled" in reads  # computed once open, not held back for refresh_s
    finally:
        svc.shutdown(10.0)
