"""A sink with a bug every trace hits wrote an ERROR line with a full traceback per trace.
Each failure is still counted (``otel_eval_sink_dropped_total{reason="internal_error"}``); the
log says the first with its traceback, then, after ``BUG_LOG_INTERVAL_S``, a line saying how
many it left out meanwhile, per sink (another sink's bug gets its own traceback)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.clock import ManualClock

from otel_eval.app.config import Config
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.component import Held
from otel_eval.base.loglimit import BUG_LOG_INTERVAL_S
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics


class _Buggy:
    def __init__(self, name: str) -> None:
        self.name = name

    def export(self, trace: Trace, evaluation: Any) -> None:
        raise ZeroDivisionError

    def pass_on(self, trace: Trace) -> None:
        raise ZeroDivisionError

    def items(self, trace: Trace, evaluation: Any) -> int:
        return 1


def test_a_sink_failing_on_every_trace_is_one_traceback_then_counted_lines(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock, cfg = ManualClock(), Config()
    store = Store(str(tmp_path / "store.db"))
    sinks: Any = [_Buggy("forward"), _Buggy("events")]
    engine = Engine(InProcess(Evaluator(cfg), store), StoreHealth(store.location, clock=clock),
                    Metrics(CollectorRegistry()), assembly=cfg.assembly, clock=clock,
                    sinks=sinks)
    try:
        with caplog.at_level(logging.WARNING):
            for n in range(21):
                if n == 20:
                    clock.advance(BUG_LOG_INTERVAL_S)
                t = f"{n + 1:032x}"
                trace = Trace(t, [Span(t, "a0", None, "agent", 0, 100)], "complete")
                engine.finishing._to_sinks(trace, None, Held(t, 0, lambda _: None), [])
    finally:
        store.close()
    for name in ("forward", "events"):
        got = [r for r in caplog.records if f"sink {name} failed" in r.getMessage()]
        assert len(got) == 2, [r.getMessage() for r in got]
        assert got[0].exc_info and not got[1].exc_info
        assert got[1].getMessage().endswith("(19 more failures of this sink not logged "
                                            "since the last)")


def _engine(tmp_path: Path, clock: ManualClock) -> tuple[Engine, Store]:
    cfg = Config()
    store = Store(str(tmp_path / "store.db"))
    return Engine(InProcess(Evaluator(cfg), store), StoreHealth(store.location, clock=clock),
                  Metrics(CollectorRegistry()), assembly=cfg.assembly, clock=clock), store


def _one_then_counted(caplog: pytest.LogCaptureFixture, what: str, counted: str) -> None:
    got = [r for r in caplog.records if what in r.getMessage()]
    assert len(got) == 2, [r.getMessage() for r in got]
    assert got[0].exc_info and not got[1].exc_info
    assert got[1].getMessage().endswith(f"(19 more {counted} not logged since the last)")


def test_metrics_failing_on_every_trace_are_one_traceback_then_counted_lines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The metrics read a stored trace's content: content no reader bounded fails them for
    every trace like it (counted, ``otel_eval_evaluation_failures_total{stage="metrics"}``),
    and each wrote a traceback."""
    clock = ManualClock()
    engine, store = _engine(tmp_path, clock)
    monkeypatch.setattr(engine.metrics, "evaluation_stored", _raise)
    try:
        with caplog.at_level(logging.WARNING):
            for n in range(21):
                if n == 20:
                    clock.advance(BUG_LOG_INTERVAL_S)
                ev: Any = SimpleNamespace(trace_id=f"{n + 1:032x}")
                engine.finishing._observe(ev, 0.0, False)
    finally:
        store.close()
    _one_then_counted(caplog, "the metrics of trace", "metrics failures")


def test_a_waiter_failing_on_every_trace_is_one_traceback_then_counted_lines(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A waiter (a Kafka record's offset) is called per trace it waits for, on the finishing
    thread or a sender's: a bug in it wrote a traceback per trace."""
    clock = ManualClock()
    engine, store = _engine(tmp_path, clock)
    try:
        with caplog.at_level(logging.WARNING):
            for n in range(21):
                if n == 20:
                    clock.advance(BUG_LOG_INTERVAL_S)
                held = Held(f"{n + 1:032x}", 0, lambda _: None, [_raise])
                engine.finishing._release([held])
    finally:
        store.close()
    _one_then_counted(caplog, "a waiter of trace", "failed waiters")


def _raise(*_: object) -> None:
    raise ZeroDivisionError
