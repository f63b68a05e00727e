"""The judge stage's store lines while the store cannot answer: every judgement's write
failing (with a traceback) and every read-back of a judged trace for the results topic wrote
a line per trace. Each is still handled as before (the judgement not stored, the evaluation
published as held); the log says one, then, after ``STORE_LOG_INTERVAL_S``, how many it left
out meanwhile (a write's traceback at DEBUG only)."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.clock import ManualClock

from otel_eval.app.config import Config
from otel_eval.base.aio import LoopThread
from otel_eval.base.component import Held
from otel_eval.base.model import Span, Trace
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.stage import STORE_LOG_INTERVAL_S, JudgeStage
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics


class _Results:
    def __init__(self) -> None:
        self.published: list[str] = []

    def publish(self, evaluation: Evaluation, held: Held | None = None) -> None:
        self.published.append(evaluation.trace_id)

    @contextlib.contextmanager
    def ordered(self) -> Iterator[None]:
        yield


def _evaluation(n: int) -> Evaluation:
    t = f"{n + 1:032x}"
    ev = Evaluator(Config()).evaluate(Trace(t, [Span(t, "a0", None, "agent", 0, 100,
                                                     attributes={"gen_ai.agent.name": "a"})],
                                            "complete"))
    assert ev is not None
    return ev


def _down(*_: Any) -> Any:
    raise OSError("disk I/O error")


def test_store_failures_of_the_judge_are_one_line_then_a_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    store, clock, results = Store(str(tmp_path / "store.db")), ManualClock(), _Results()
    try:
        stage = JudgeStage(JudgeConfig(), LoopThread(), store, Metrics(CollectorRegistry()),
                           cache_path=str(tmp_path / "store.db"), clock=clock)
        monkeypatch.setattr(store, "get_versioned", _down)
        failed: Future[bool] = Future()
        failed.set_exception(OSError("disk I/O error"))
        with caplog.at_level(logging.WARNING):
            for n in range(10):  # a write failing, then a read-back failing
                stage._written(failed, _evaluation(n), None, Held("t", 0, lambda _: None))
                stage._publish(results, _evaluation(n))  # type: ignore[arg-type]
            clock.advance(STORE_LOG_INTERVAL_S)
            stage._publish(results, _evaluation(10))  # type: ignore[arg-type]
    finally:
        store.close()
    assert len(results.published) == 11  # each published as held
    got = [r for r in caplog.records if r.name == "otel_eval.evaluate.judge.stage"]
    assert len(got) == 2, [r.getMessage() for r in got]
    assert got[0].getMessage() == (f"storing the judge result of trace {1:032x} failed: "
                                   "OSError: disk I/O error")
    assert got[1].getMessage().endswith("failed: OSError (19 more judge store failures not "
                                        "logged since the last)")
    assert all(r.exc_info is None for r in got)


class _JournalDown:
    def _down(self, *_: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    add = add_session = remove_session = _down


def test_journal_failures_of_the_judge_are_one_line_then_a_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The pending journal failing (its disk full or gone) fails each trace's and session's
    mark: judging goes on unjournaled, and the log says one line, then a count."""
    store, clock = Store(str(tmp_path / "store.db")), ManualClock()
    try:
        stage = JudgeStage(JudgeConfig(), LoopThread(), store, Metrics(CollectorRegistry()),
                           cache_path=str(tmp_path / "store.db"), clock=clock)
        stage._journal = _JournalDown()  # type: ignore[assignment]
        with caplog.at_level(logging.WARNING):
            for n in range(10):  # a trace's mark failing, then a session's
                assert not stage._journal_add(f"{n + 1:032x}", 0, "a0", 1)
                assert not stage._journal_session(f"s{n}", 1, add=n % 2 == 0)
            clock.advance(STORE_LOG_INTERVAL_S)
            assert not stage._journal_add(f"{11:032x}", 0, "a0", 1)
    finally:
        store.close()
    got = [r for r in caplog.records if r.name == "otel_eval.evaluate.judge.stage"]
    assert len(got) == 2, [r.getMessage() for r in got]
    assert got[0].getMessage() == (f"journaling judge work of trace {1:032x} failed: "
                                   "disk I/O error")
    assert got[1].getMessage().endswith("failed: disk I/O error (19 more judge store "
                                        "failures not logged since the last)")
    assert all(r.levelno == logging.ERROR for r in got)
