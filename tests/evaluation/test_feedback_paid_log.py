"""An outcome re-judges a stored verdict and the record goes to the Kafka results topic, owed
in the store until delivered (``results_owed``); once delivered the debt is paid. A store that
refuses that write (down, read-only) wrote an ERROR line per outcome: a stream of feedback
while the store is down, a line each. The record stays owed either way (published again at
the next start); the log says one, then, after ``PAID_LOG_INTERVAL_S``, how many it left out
meanwhile."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.clock import ManualClock

from otel_eval.app.config import Config
from otel_eval.base.component import Held
from otel_eval.base.model import Span, Trace
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.feedback import PAID_LOG_INTERVAL_S, Feedback
from otel_eval.store import SqliteStore
from otel_eval.telemetry.metrics import Metrics

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}


def _trace(n: int) -> Trace:
    trace_id = f"{n + 1:032x}"
    return Trace(trace_id, [Span(trace_id, "a0", None, "agent", 0, 100,
                                 attributes=dict(AGENT))], "complete")


class Delivered:
    """A results topic that delivers at once: it takes no hold, so the debt is paid as the
    outcome's record is handed over."""

    def __init__(self) -> None:
        self.published: list[str] = []

    def publish(self, evaluation: Evaluation, held: Held | None = None) -> None:
        raise AssertionError("feedback publishes the stored row")

    def publish_stored(self, body: dict[str, Any], evaluated_at_ns: int, row_version: int = 0,
                       held: Held | None = None) -> None:
        self.published.append(str(body["trace_id"]))

    @contextlib.contextmanager
    def ordered(self) -> Iterator[None]:
        yield


def test_debts_a_store_cannot_clear_are_one_line_then_a_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SqliteStore(str(tmp_path / "s.db")).open()
    evaluator = Evaluator(Config())
    evaluations = [evaluator.evaluate(_trace(n), None) for n in range(11)]
    store.put_many([ev for ev in evaluations if ev is not None])

    clock, topic, tried = ManualClock(), Delivered(), []

    def refused(trace_id: str, owed_at_ns: int) -> None:  # on the payer's one thread
        tried.append(trace_id)
        if len(tried) == 11:  # the ten before it tried (and logged) in order
            clock.advance(PAID_LOG_INTERVAL_S)
        raise OSError("attempt to write a readonly database")

    store.results_paid = refused  # type: ignore[method-assign]
    feedback = Feedback(store, evaluator, Metrics(CollectorRegistry()).prediction,
                        published=topic, clock=clock)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_eval.evaluate.feedback"):
            for n in range(11):
                assert feedback.record(_trace(n).trace_id, "success") is not None
            feedback.close()  # every debt tried: the payer's thread is done
    finally:
        store.close()
    assert len(topic.published) == len(tried) == 11
    got = [r.getMessage() for r in caplog.records if r.name == "otel_eval.evaluate.feedback"]
    assert len(got) == 2, got
    assert got[0] == f"clearing the owed results record of trace {_trace(0).trace_id} " \
                     "failed: OSError", got
    assert got[1].startswith(f"clearing the owed results record of trace "
                             f"{_trace(10).trace_id} failed: OSError"), got
    assert got[1].endswith("(9 more clearing failures not logged since the last)"), got
