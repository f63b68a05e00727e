"""A trace whose row the store's driver refuses (a value it cannot take) is stored as an
evaluation error, with a warning: a stream of such traces wrote a line per trace (and one
per batch before it). Each is still stored as an error and counted; the log says one, then,
after ``FAILURE_LOG_INTERVAL_S``, how many it left out meanwhile."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from support.clock import ManualClock

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.evaluator import FAILURE_LOG_INTERVAL_S, Evaluator
from otel_eval.evaluate.stage import evaluate_and_store
from otel_eval.store import open_store

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}


def run(n: int) -> Trace:
    trace_id = f"{n + 1:032x}"
    return Trace(trace_id, [Span(trace_id, "a0", None, "agent", 0, 100,
                                 attributes=dict(AGENT))], "complete")


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "otel_eval.evaluate.stage"]


def test_traces_the_driver_refuses_are_one_line_then_a_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(str(tmp_path / "s.db"))
    put_many = store.put_many

    def refusing(evs: Sequence[Evaluation]) -> Any:  # only the error records fit
        if not all(any(f.kind == "evaluation_error" for f in ev.findings) for ev in evs):
            raise ValueError("a value the driver cannot take")
        return put_many(evs)

    monkeypatch.setattr(store, "put_many", refusing)
    clock = ManualClock()
    evaluator = Evaluator(Config(), clock=clock)
    try:
        with caplog.at_level(logging.WARNING):
            outs = [o for n in range(0, 20, 2)
                    for o in evaluate_and_store(evaluator, store, [run(n), run(n + 1)])]
            clock.advance(FAILURE_LOG_INTERVAL_S)
            outs += evaluate_and_store(evaluator, store, [run(20)])
    finally:
        store.close()
    assert [o.failure for o in outs] == ["ValueError"] * 21  # each stored as an error
    got = lines(caplog)
    assert len(got) == 2, got
    assert "storing a batch of 2 trace(s) failed" in got[0], got
    assert got[1].startswith(f"trace {21:032x} could not be stored"), got
    assert got[1].endswith("(29 more store failures not logged since the last)"), got


def test_outcomes_a_store_cannot_read_after_each_batch_are_one_line_then_a_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A store that answers writes but not the outcome read after each batch's commit (a
    broken read path) wrote a line per batch: a batch is one trace when traffic is light."""
    store = open_store(str(tmp_path / "s.db"))
    feedback_many = store.feedback_many
    reads: list[int] = []

    def after_the_commit_fails(ids: Any) -> Any:
        reads.append(1)
        if len(reads) % 2 == 0:  # the read again after put_many
            raise OSError("disk I/O error")
        return feedback_many(ids)

    monkeypatch.setattr(store, "feedback_many", after_the_commit_fails)
    clock = ManualClock()
    evaluator = Evaluator(Config(), clock=clock)
    try:
        with caplog.at_level(logging.WARNING):
            outs = [o for n in range(20) for o in evaluate_and_store(evaluator, store, [run(n)])]
            clock.advance(FAILURE_LOG_INTERVAL_S)
            outs += evaluate_and_store(evaluator, store, [run(20)])
    finally:
        store.close()
    assert all(o.evaluation is not None and o.failure is None for o in outs)  # all stored
    got = [g for g in lines(caplog) if g.startswith("reading the outcomes recorded")]
    assert len(got) == 2, got
    assert got[1].endswith("(19 more store failures not logged since the last)"), got


def test_an_agent_history_a_store_cannot_record_is_one_line_then_a_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A store that cannot record the agent history (after each batch's commit) wrote a
    line per batch: a batch is one trace when traffic is light."""
    store = open_store(str(tmp_path / "s.db"))
    calls: list[int] = []

    def down(rows: Any) -> Any:
        calls.append(1)
        raise OSError("disk I/O error")

    monkeypatch.setattr(store, "remember_agents", down)
    clock = ManualClock()
    evaluator = Evaluator(Config(), clock=clock)
    try:
        with caplog.at_level(logging.WARNING):
            outs = [o for n in range(20) for o in evaluate_and_store(evaluator, store, [run(n)])]
            clock.advance(FAILURE_LOG_INTERVAL_S)
            outs += evaluate_and_store(evaluator, store, [run(20)])
    finally:
        store.close()
    assert len(calls) == 21
    assert all(o.evaluation is not None and o.failure is None for o in outs)  # all stored
    got = [g for g in lines(caplog) if g.startswith("recording the agent history")]
    assert len(got) == 2, got
    assert got[0] == "recording the agent history failed: OSError", got
    assert got[1].endswith("(19 more store failures not logged since the last)"), got
