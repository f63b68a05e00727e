"""The results topic's last record of a run holds both the judge's write and an outcome's
(docs/guide.md: "the last record of a key is what ``GET /v1/evaluations/{trace_id}``
returns"). Both read the stored row back after their own write and hand it to the publisher;
before, nothing ordered the two: the judge's writer could read the row before an outcome
re-judged its verdict (``POST /v1/feedback``) and hand it over after the outcome's record,
so the topic ended on the judged row with the verdict from before the outcome. Now each
reads and hands over under the publisher's ``ordered()``: the one that reads second hands
over second."""

from __future__ import annotations

import asyncio
import json
import threading
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

GUARD_S = 30.0  # a deadlock guard only: every wait below ends on an event


class _Signalling:
    """The publisher's order lock, telling when the outcome's thread waits at it."""

    def __init__(self, lock: Any, arrived: threading.Event, thread: list[threading.Thread]):
        self._lock, self._arrived, self._thread = lock, arrived, thread

    def __enter__(self) -> None:
        if threading.current_thread() in self._thread:
            self._arrived.set()
        self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)


def test_an_outcome_recorded_while_the_judge_reads_back_ends_the_topic(
        tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db")).open()
    ev = evaluation(trace_id="d6" * 16)
    ev.evaluated_at_ns = 1_000
    store.put_many([ev])
    publisher = ResultsPublisher(KafkaConfig(), KafkaStats())
    loop = asyncio.new_event_loop()
    publisher._loop = loop
    went_on = threading.Event()  # the outcome's thread handed over, or waits its turn
    outcome: list[threading.Thread] = []
    publisher._order = _Signalling(publisher._order, went_on, outcome)  # type: ignore[assignment]
    feedback = Feedback(store, Evaluator(Config()), Metrics(CollectorRegistry()).prediction,
                        published=publisher)

    def record() -> None:
        assert feedback.record(ev.trace_id, "failure") is not None
        went_on.set()

    read_back = store.get_versioned

    def get_versioned(trace_id: str) -> tuple[dict[str, Any], int, int] | None:
        got = read_back(trace_id)  # the judged row, the outcome not recorded yet
        if threading.current_thread() is threading.main_thread() and not outcome:
            outcome.append(threading.Thread(target=record))
            outcome[0].start()
            assert went_on.wait(GUARD_S)
        return got

    store.get_versioned = get_versioned  # type: ignore[method-assign]
    stage = JudgeStage(config("http://127.0.0.1:9/v1"), LoopThread(), store,
                       Metrics(CollectorRegistry()), results=publisher)
    try:
        ev.judge = {"score": 0.5}
        assert store.put_judge(ev.trace_id, 0, ev.judge, ev.evaluated_at_ns)
        stage._publish(publisher, ev)  # the judge's writer, once its write is stored
        outcome[0].join(GUARD_S)
        assert not outcome[0].is_alive()
        loop.call_soon(loop.stop)
        loop.run_forever()
        records = [json.loads(payload) for _, payload, *_ in publisher._queue]
        stored = store.get(ev.trace_id)
        assert stored is not None and stored["verdict"]["outcome"] == "failure"
        assert "judge" in stored
        assert records[-1] == json.loads(json.dumps(stored))  # the API's object, last
    finally:
        loop.close()
        store.close()
