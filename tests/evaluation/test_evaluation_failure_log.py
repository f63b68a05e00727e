"""A poisonous trace shape (one that breaks a detector, or the whole evaluation) wrote a
warning per trace: a stream of them is thousands of lines a second on stderr. Every failure
is still in the stored result (an ``evaluation_error`` finding) and the metric; the log says
one, then, after ``FAILURE_LOG_INTERVAL_S``, how many it left out meanwhile."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from support.clock import ManualClock

import otel_eval.evaluate.detectors as detectors
from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.evaluator import FAILURE_LOG_INTERVAL_S, Evaluator
from otel_eval.evaluate.stage import evaluate_and_store
from otel_eval.store import open_store

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}


def run(n: int) -> Trace:
    trace_id = f"{n + 1:032x}"
    return Trace(trace_id, [Span(trace_id, "a0", None, "agent", 0, 100,
                                 attributes=dict(AGENT))], "complete")


def lines(caplog: pytest.LogCaptureFixture, what: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if what in r.getMessage()]


def test_a_detector_failing_on_every_trace_is_one_line_then_a_count(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def broken(trajectory: Trajectory, config: Any, context: Any) -> list[Any]:
        raise ZeroDivisionError

    monkeypatch.setitem(detectors._DETECTORS, "budget", broken)
    clock = ManualClock()
    evaluator = Evaluator(Config(), clock=clock)
    with caplog.at_level(logging.WARNING):
        evs = [evaluator.evaluate(run(n)) for n in range(20)]
        clock.advance(FAILURE_LOG_INTERVAL_S)
        evs.append(evaluator.evaluate(run(20)))
    assert all(ev is not None and "evaluation/evaluation_error" in
               {f"{f.detector}/{f.kind}" for f in ev.findings} for ev in evs)
    got = lines(caplog, "detector budget failed")
    assert len(got) == 2, got
    assert got[0].endswith(": ZeroDivisionError"), got
    assert got[1].endswith(": ZeroDivisionError (19 more evaluation failures not logged "
                           "since the last)"), got


def test_evaluations_failing_on_every_trace_are_one_line_then_a_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def boom(*_: Any, **__: Any) -> Any:
        raise RuntimeError("a poisonous shape")

    clock = ManualClock()
    evaluator = Evaluator(Config(), clock=clock)
    evaluator.evaluate = boom  # type: ignore[method-assign]
    store = open_store(str(tmp_path / "s.db"))
    try:
        with caplog.at_level(logging.WARNING):
            outs = evaluate_and_store(evaluator, store, [run(n) for n in range(20)])
            clock.advance(FAILURE_LOG_INTERVAL_S)
            outs += evaluate_and_store(evaluator, store, [run(20)])
    finally:
        store.close()
    assert [o.failure for o in outs] == ["RuntimeError"] * 21  # each stored as an error
    got = lines(caplog, "evaluation of trace")
    assert len(got) == 2, got
    assert got[0].endswith(": RuntimeError: a poisonous shape"), got
    assert got[1].endswith("(19 more evaluation failures not logged since the last)"), got
