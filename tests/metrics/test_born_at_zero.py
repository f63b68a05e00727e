"""Counters an alert reads with increase() whose label values are a closed set exist at 0
before their first event: a series born at 1 makes increase() take that 1 as its baseline,
and the alert misses the first worker restart, store refusal or judge skip
(OtelEvalWorkerRestarts, OtelEvalStoreRefusingWrites, OtelEvalJudgeSkipping). Each set is
declared where it is owned (telemetry sits below the store and the judge), so the tests
build that part on a fresh registry."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from otel_eval.app.workers import WorkerPool
from otel_eval.base.aio import LoopThread
from otel_eval.evaluate.judge import SKIP_REASONS, JudgeConfig
from otel_eval.evaluate.judge.client import CALL_STATUSES
from otel_eval.evaluate.judge.stage import JudgeStage
from otel_eval.store import Store
from otel_eval.store.failures import WRITE_FAILURE_REASONS
from otel_eval.telemetry.metrics import Metrics


def _sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_the_verbs_declare_each_value_at_zero() -> None:
    metrics = Metrics(CollectorRegistry())
    assert _sample(metrics, "otel_eval_workers_restarts_total", worker="0") is None
    metrics.workers.pool_started(3)
    metrics.judge.skip_reasons(SKIP_REASONS)
    metrics.evaluation.store_write_failure_reasons(WRITE_FAILURE_REASONS)
    for worker in ("0", "1", "2"):
        assert _sample(metrics, "otel_eval_workers_restarts_total", worker=worker) == 0
        assert _sample(metrics, "otel_eval_workers_inflight_traces", worker=worker) == 0
    assert _sample(metrics, "otel_eval_workers_restarts_total", worker="3") is None
    for reason in SKIP_REASONS:
        assert _sample(metrics, "otel_eval_judge_skipped_total", reason=reason) == 0
    for reason in WRITE_FAILURE_REASONS:
        assert _sample(metrics, "otel_eval_store_write_failures_total", reason=reason) == 0


def test_the_worker_pool_declares_its_workers_when_it_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = Metrics(CollectorRegistry())
    pool = WorkerPool(2, None, metrics.workers, lambda traces, e, since: [])  # type: ignore[arg-type]
    monkeypatch.setattr(pool, "_spawn", lambda w: None)  # no process: only the metrics
    assert _sample(metrics, "otel_eval_workers_restarts_total", worker="0") is None
    pool.start()
    for worker in ("0", "1"):
        assert _sample(metrics, "otel_eval_workers_restarts_total", worker=worker) == 0


def test_the_service_declares_the_store_refusals(tmp_path: Path) -> None:
    # where the store and the engine meet: the engine knows the store only by interface
    config = replace(Config(), **{"store.path": str(tmp_path / "store.db")})
    service = Service(config)  # constructed, not started: nothing is opened
    for reason in WRITE_FAILURE_REASONS:
        assert _sample(service.metrics, "otel_eval_store_write_failures_total",
                       reason=reason) == 0


def test_the_judge_stage_declares_its_skip_reasons(tmp_path: Path) -> None:
    metrics = Metrics(CollectorRegistry())
    store = Store(str(tmp_path / "store.db"))
    try:
        JudgeStage(JudgeConfig(), LoopThread(), store, metrics,
                   cache_path=str(tmp_path / "store.db"))
        for reason in SKIP_REASONS:
            assert _sample(metrics, "otel_eval_judge_skipped_total", reason=reason) == 0
        # its calls too (OtelEvalJudgeFailing: the first timeout of a judge was invisible)
        for judge in ("combined", "step", "trace", "process", "outcome", "session"):
            for status in CALL_STATUSES:
                assert _sample(metrics, "otel_eval_judge_calls_total", judge=judge,
                               status=status) == 0
        assert _sample(metrics, "otel_eval_judge_calls_total", judge="rubric_verify",
                       status="ok") is None  # rubric is off by default
    finally:
        store.close()


def test_the_service_declares_the_issue_judge_calls(tmp_path: Path) -> None:
    # the issues job's namer and merger call through the judge stage: their series are
    # read by OtelEvalJudgeFailing too, so the first failed naming call must be seen
    config = replace(Config(), **{"store.path": str(tmp_path / "store.db"),
                                  "judge.model": "openai/gpt-4o-mini"})
    service = Service(config)  # constructed, not started: nothing is opened
    assert service.issues is not None
    for judge in ("issue_name", "issue_merge"):
        for status in CALL_STATUSES:
            assert _sample(service.metrics, "otel_eval_judge_calls_total", judge=judge,
                           status=status) == 0


def test_no_issue_judge_calls_without_the_issues_job(tmp_path: Path) -> None:
    config = replace(Config(), **{"store.path": str(tmp_path / "store.db"),
                                  "judge.model": "openai/gpt-4o-mini",
                                  "issues.interval_s": 0})
    service = Service(config)
    assert _sample(service.metrics, "otel_eval_judge_calls_total", judge="issue_name",
                   status="ok") is None


def test_every_reason_a_released_trace_is_skipped_for_is_declared_at_zero() -> None:
    from otel_eval.evaluate import handoff

    metrics = Metrics(CollectorRegistry())
    for reason in (handoff.ALREADY_EVALUATED, handoff.LATE, handoff.NOT_A_RUN,
                   handoff.FOREIGN_SENDER, handoff.UNSTORABLE):
        assert _sample(metrics, "otel_eval_evaluation_skipped_total", reason=reason) == 0


def test_the_spool_declares_its_failure_operations_when_it_opens(tmp_path: Path) -> None:
    # OtelEvalSpoolRefusingWrites reads increase() of the appends that failed: a full disk's
    # first refused export must count, not be the series' baseline
    from otel_eval.assemble.spool import Spool
    from otel_eval.telemetry.spool import SPOOL_OPERATIONS

    metrics = Metrics(CollectorRegistry())
    assert _sample(metrics, "otel_eval_spool_failures_total", operation="append") is None
    spool = Spool(str(tmp_path / "spool"), 1 << 20, metrics.spool).open()
    try:
        assert set(SPOOL_OPERATIONS) == {"append", "delete", "settle", "open", "replay"}
        for operation in SPOOL_OPERATIONS:
            assert _sample(metrics, "otel_eval_spool_failures_total",
                           operation=operation) == 0
    finally:
        spool.close()
