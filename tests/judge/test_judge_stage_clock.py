"""The judge stage's clock is its judge's too. The stage ran its queue (and its own lines) on
the injected clock but built its ``Judge`` on ``time.monotonic``: the hourly cost budget, the
rate limits and the failed-call lines went by another time than the stage a test drives, so
advancing the stage's clock an hour left the judge over budget."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from judge_fake_llm import FakeLLM, error, good
from judge_fixtures import config, judged_service
from prometheus_client import CollectorRegistry
from support.clock import ManualClock

from otel_eval.app.service import Service
from otel_eval.base.aio import LoopThread
from otel_eval.evaluate.judge.client import FAILURE_LOG_INTERVAL_S
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.limits import CostBudget
from otel_eval.evaluate.judge.prompting import Request
from otel_eval.evaluate.judge.schemas import trace_schema
from otel_eval.evaluate.judge.stage import JudgeStage
from otel_eval.store import SqliteStore
from otel_eval.telemetry.metrics import Metrics

REQUEST = Request("trace", ("trace",), [{"role": "user", "content": "grade this"}],
                  trace_schema())


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@contextmanager
def _stage(tmp_path: Path, cfg: JudgeConfig, clock: ManualClock) -> Iterator[JudgeStage]:
    store, loop = SqliteStore(str(tmp_path / "s.db")).open(), LoopThread()
    stage = JudgeStage(cfg, loop, store, Metrics(CollectorRegistry()),
                       cache_path=str(tmp_path / "j.db"), clock=clock)
    try:
        loop.start()
        stage.start()
        yield stage
    finally:
        stage.shutdown(5.0)
        loop.shutdown(5.0)
        store.close()


def test_the_stage_clock_times_its_judges_hourly_budget(
        tmp_path: Path, llm: FakeLLM, clock: ManualClock) -> None:
    llm.script(good({"critique": "fine", "score": 0.5}))  # 1,000 prompt tokens: over 1e-6
    with _stage(tmp_path, config(llm.api_base, max_cost_usd_per_hour=1e-6), clock) as stage:
        assert stage.judge is not None
        got = stage.ask(REQUEST)
        assert got is not None and got.status == "ok" and got.cost_usd, got
        assert stage.judge.over_budget()  # the queue and the sessions skip: over_budget
        clock.advance(CostBudget.WINDOW_S)  # an hour on the stage's clock: spent no more
        assert not stage.judge.over_budget()


def test_the_stage_clock_times_its_judges_failed_call_lines(
        tmp_path: Path, llm: FakeLLM, clock: ManualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    llm.script(error(400), error(400), error(400))
    with (_stage(tmp_path, config(llm.api_base, max_retries=0), clock) as stage,
          caplog.at_level(logging.WARNING)):
        for n in range(3):
            if n == 2:  # the interval passed on the stage's clock: the next line is said
                clock.advance(FAILURE_LOG_INTERVAL_S)
            got = stage.ask(REQUEST)
            assert got is not None and got.status == "error", got
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(
        "judge trace call: error")]
    assert len(lines) == 2, lines
    assert lines[1].endswith("(1 more failed judge calls not logged since the last)"), lines


def test_the_services_clock_is_its_judge_stages(tmp_path: Path, llm: FakeLLM,
                                                 clock: ManualClock) -> None:
    # ``Service(clock=...)`` reached the engine and the metrics, not the judge stage: the
    # stage and its judge went by ``time.monotonic`` whatever clock the service was given
    llm.script(good({"critique": "fine", "score": 0.5}))  # 1,000 prompt tokens: over 1e-6
    with judged_service(tmp_path, llm.api_base, clock=clock,
                        **{"judge.max_cost_usd_per_hour": 1e-6}) as svc:
        stage = _judge_stage(svc)
        assert stage.judge is not None
        got = stage.ask(REQUEST)
        assert got is not None and got.status == "ok" and got.cost_usd, got
        assert stage.judge.over_budget()
        clock.advance(CostBudget.WINDOW_S)  # an hour on the service's clock: spent no more
        assert not stage.judge.over_budget()


def _judge_stage(svc: Service) -> JudgeStage:
    stages = [s for s in svc.sinks if isinstance(s, JudgeStage)]
    assert len(stages) == 1, svc.sinks
    return stages[0]
