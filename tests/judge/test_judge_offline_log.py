"""``otel-eval eval --judge``: a judge bug every trace hits (the judgement raises: the trace
skipped ``worker_error``) wrote a full traceback per trace to stderr, the run's report: a
thousand traces, a thousand tracebacks above the cost line. Each trace's record says
``worker_error`` and the cost line counts them (``skipped: N worker_error``); the log says
the first with its traceback (what to fix), then, after ``BUG_LOG_INTERVAL_S``, a line with
how many it left out meanwhile, as ``serve``'s queue does."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from judge_fixtures import config, evaluation
from support.clock import ManualClock

from otel_eval.base.loglimit import BUG_LOG_INTERVAL_S
from otel_eval.evaluate.judge.offline import Spend, judged
from otel_eval.evaluate.judge.scoring import Collector


class _Buggy:
    """A judge whose every judgement raises (a bug, not a failed call: those are a
    status)."""

    config = config("http://127.0.0.1:9/v1")

    def spending(self) -> Collector:
        return Collector(self.config.model)

    async def judge(self, evaluation: Any, spent: Collector) -> Any:
        raise ZeroDivisionError


def test_a_judge_bug_every_trace_hits_is_one_traceback_then_a_count(
        caplog: pytest.LogCaptureFixture) -> None:
    clock, spend = ManualClock(), Spend()
    traces = [evaluation(trace_id=f"{n + 1:032x}") for n in range(21)]
    out = judged(traces, _Buggy(), spend, clock=clock)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="otel_eval.evaluate.judge.offline"):
        done = [next(out) for _ in range(20)]
        clock.advance(BUG_LOG_INTERVAL_S)
        done += list(out)
    assert [ev.judge and ev.judge["overall"]["reason"] for ev in done] == ["worker_error"] * 21
    assert spend.skipped == {"worker_error": 21}
    assert "skipped: 21 worker_error" in spend.line("m")  # the report's count of them all
    got = [r for r in caplog.records if r.name == "otel_eval.evaluate.judge.offline"]
    assert [r.getMessage()[:len("judge failed on trace ") + 32] for r in got] == [
        f"judge failed on trace {1:032x}", f"judge failed on trace {21:032x}"], got
    assert got[0].exc_info and not got[1].exc_info
    assert got[1].getMessage().endswith("(19 more failed judgements not logged since the "
                                        "last)"), got[1].getMessage()
