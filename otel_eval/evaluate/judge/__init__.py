"""The LLM judge stage (issue 5): step (Agentic CLEAR J_s), trace (J_t), rubric (J_r + J_v),
ClawTrack process grader and outcome grader, over litellm, within a cost budget.

    JudgeQueue.submit(evaluation) -> worker -> Judge.judge(evaluation) -> evaluation.judge
    -> on_done(evaluation)         (or on_skip(evaluation, reason) when not judged)

Entry points: ``Judge``, ``JudgeQueue``, ``JudgeConfig``, ``JudgeObserver``, the rubric caches
and ``summarize`` (Pass@k / Pass^k / lucky passes). Exports load lazily: ``otel_eval.app.config``
imports ``judge.config`` and must not pay for importing litellm (seconds).

``build(config, deps)``: the judge as a sink of ``serve`` (``stage.JudgeStage``) when a judge
model is configured; litellm is imported only then.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from otel_eval.base.component import SinkComponent
    from otel_eval.evaluate.config import TrajectoryConfig
    from otel_eval.evaluate.judge.config import JudgeConfig
    from otel_eval.evaluate.judge.judge import Judge
    from otel_eval.evaluate.judge.observer import (
        SKIP_REASONS,
        JudgeObserver,
        NoopObserver,
        SkipReason,
    )
    from otel_eval.evaluate.judge.rubric_cache import (
        MemoryRubricCache,
        RubricCache,
        SqliteRubricCache,
    )
    from otel_eval.evaluate.judge.trials import TaskTrials, Trial, summarize, trials_of
    from otel_eval.evaluate.judge.workqueue import JudgeQueue
    from otel_eval.outputs.deps import Deps

_EXPORTS = {
    "JudgeConfig": "config", "Judge": "judge", "SKIP_REASONS": "observer",
    "JudgeObserver": "observer", "NoopObserver": "observer", "SkipReason": "observer",
    "MemoryRubricCache": "rubric_cache", "RubricCache": "rubric_cache",
    "SqliteRubricCache": "rubric_cache", "TaskTrials": "trials", "Trial": "trials",
    "summarize": "trials", "trials_of": "trials", "JudgeQueue": "workqueue",
}
__all__ = [
    "SKIP_REASONS", "Judge", "JudgeConfig", "JudgeObserver", "JudgeQueue", "MemoryRubricCache",
    "NoopObserver", "RubricCache", "SkipReason", "SqliteRubricCache", "TaskTrials", "Trial",
    "build", "check", "summarize", "trials_of",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


def check(config: JudgeConfig) -> None:
    """Refuse a judge that cannot work (its provider's key missing, a cost cap on a model
    litellm has no price for): serve's first step, before its store and spool are opened,
    and migrated (an upgrade's files are left as they were, for the release gone back to)."""
    if config.active:
        from otel_eval.evaluate.judge.client import check_credentials, check_prices

        check_credentials(config)
        check_prices(config)


def build(config: JudgeConfig, deps: Deps,
          trajectory: TrajectoryConfig | None = None) -> SinkComponent | None:
    """The judge stage on the service's loop, first of the sinks (it drains before the events
    sink it writes to is flushed); None without a judge model. ``trajectory``: the bounds of
    a stored result (each judgement is cut to fit them). The stage, its queue and its judge go
    by the service's clock (``deps.clock``)."""
    if not config.active or deps.loop is None:
        return None
    from otel_eval.evaluate.judge.stage import JudgeStage  # litellm: only with a judge

    return JudgeStage(config, deps.loop, deps.store, deps.metrics, deps.events,
                      cache_path=deps.store_path, trajectory=trajectory,
                      results=deps.results, clock=deps.clock)
