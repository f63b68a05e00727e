"""A judge bug every trace hits (the judgement raises: counted, the trace skipped
``worker_error``) wrote an ERROR line with a full traceback per trace. The log says the first
with its traceback, then, after ``BUG_LOG_INTERVAL_S``, a line saying how many it left out."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from judge_fixtures import config, evaluation
from prometheus_client import CollectorRegistry
from support.clock import ManualClock

from otel_eval.base.aio import LoopThread
from otel_eval.base.loglimit import BUG_LOG_INTERVAL_S
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.judge.stage import JudgeStage
from otel_eval.evaluate.judge.workqueue import JudgeQueue
from otel_eval.store import SqliteStore
from otel_eval.telemetry.metrics import Metrics


class _Buggy:
    observer = SimpleNamespace(skip=lambda reason: None)

    async def judge(self, evaluation: Any, spent: Any) -> Any:
        raise ZeroDivisionError


async def _judge(q: JudgeQueue, ids: range) -> None:
    for n in ids:
        await q._judge_one(SimpleNamespace(trace_id=f"{n + 1:032x}"),  # type: ignore[arg-type]
                           None)  # type: ignore[arg-type]


def test_a_judge_failing_on_every_trace_is_one_traceback_then_counted_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    skipped: list[str] = []

    def on_skip(ev: Evaluation, reason: str) -> None:
        skipped.append(reason)

    clock = ManualClock()
    q = JudgeQueue(_Buggy(), 10, lambda ev: None, on_skip,  # type: ignore[arg-type]
                   clock=clock)
    with caplog.at_level(logging.WARNING):
        asyncio.run(_judge(q, range(20)))
        clock.advance(BUG_LOG_INTERVAL_S)
        asyncio.run(_judge(q, range(20, 21)))
    assert skipped == ["worker_error"] * 21 and q.errors == 21
    got = [r for r in caplog.records if "judge failed on trace" in r.getMessage()]
    assert len(got) == 2, [r.getMessage() for r in got]
    assert got[0].exc_info and not got[1].exc_info
    assert got[1].getMessage().endswith("(19 more failed judgements not logged since the "
                                        "last)")


def test_an_on_skip_failing_on_every_skip_is_one_traceback_then_counted_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    """A skip comes per trace whatever the input (over budget, behind, sampled out, off):
    an ``on_skip`` with a bug wrote a traceback for each."""
    def on_skip(ev: Evaluation, reason: str) -> None:
        raise ZeroDivisionError

    clock = ManualClock()
    off = SimpleNamespace(enabled=False, observer=_Buggy.observer)
    q = JudgeQueue(off, 10, lambda ev: None, on_skip, clock=clock)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        for n in range(21):
            if n == 20:
                clock.advance(BUG_LOG_INTERVAL_S)
            ev: Any = SimpleNamespace(trace_id=f"{n + 1:032x}")
            assert not q.submit(ev)
    assert q.skipped == {"disabled": 21}
    got = [r for r in caplog.records if "on_skip callback failed" in r.getMessage()]
    assert len(got) == 2, [r.getMessage() for r in got]
    assert got[0].exc_info and not got[1].exc_info
    assert got[1].getMessage().endswith("(19 more failed on_skip callbacks not logged since "
                                        "the last)")


def test_the_stage_clock_times_its_queue_lines(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The stage's clock is its queue's: a test advancing it past the interval sees the
    queue's next line (on ``time.monotonic`` the queue left it out)."""
    store, clock = SqliteStore(str(tmp_path / "s.db")).open(), ManualClock()
    loop = LoopThread()
    stage = JudgeStage(config("http://127.0.0.1:9/v1"), loop, store,
                       Metrics(CollectorRegistry()), cache_path=str(tmp_path / "j.db"),
                       clock=clock)
    try:
        loop.start()
        stage.start()
        q = stage.queue
        assert q is not None
        q.judge = _Buggy()  # type: ignore[assignment]
        with caplog.at_level(logging.WARNING):
            for n in range(21):
                if n == 20:
                    clock.advance(BUG_LOG_INTERVAL_S)
                ev = evaluation(trace_id=f"{n + 1:032x}")
                loop.run(q._judge_one(ev, None), timeout_s=30)  # type: ignore[arg-type]
    finally:
        stage.shutdown(5.0)
        loop.shutdown(5.0)
        store.close()
    got = [r for r in caplog.records if "judge failed on trace" in r.getMessage()]
    assert len(got) == 2, [r.getMessage() for r in got]
    assert got[1].getMessage().endswith("(19 more failed judgements not logged since the "
                                        "last)")
