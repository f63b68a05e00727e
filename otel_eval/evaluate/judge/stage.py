"""``JudgeStage``: the judge as a sink of ``serve``, off the ingest path.

    Engine (thread) --export(trace, evaluation)--> loop.call(JudgeQueue.submit)
        -> worker task -> Judge.judge -> on_done: store.put_judge, judge events
                                      -> on_skip: store.put_judge({"overall": skipped, reason})

``export`` never blocks the engine: it schedules the submit on the service's event loop and
returns. When the judge is slow, down or over budget the queue skips traces with a reason
(counted in ``otel_eval_judge_skipped_total``), and the stored trace's ``judge.overall`` says
why. A judge result is stored only onto the revision it judged (late spans re-open a trace;
the new revision gets its own judgement).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_eval.base.aio import LoopThread
from otel_eval.base.model import Evaluation, Trace
from otel_eval.evaluate.judge.client import check_credentials, close_clients
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.judge import Judge
from otel_eval.evaluate.judge.rubric_cache import SqliteRubricCache
from otel_eval.evaluate.judge.workqueue import JudgeQueue
from otel_eval.store import EvaluationStore
from otel_eval.telemetry.metrics import Metrics

if TYPE_CHECKING:
    from otel_eval.outputs.events import EvaluationEvents


class JudgeStage:
    def __init__(self, config: JudgeConfig, loop: LoopThread, store: EvaluationStore,
                 metrics: Metrics, events: EvaluationEvents | None = None, *,
                 cache_path: str = ":memory:") -> None:
        """``cache_path``: the local SQLite file of the rubric cache (``store.path``)."""
        self.config = config
        self.loop = loop
        self.store = store
        self.metrics = metrics
        self.events = events
        check_credentials(config)
        cache = SqliteRubricCache(cache_path, ttl_s=config.rubric_ttl_days * 86400)
        self.judge = Judge(config, rubric_cache=cache, observer=metrics.judge)
        self.queue = JudgeQueue(self.judge, config.queue_size, self._done, self._skipped)

    def start(self) -> None:
        self.loop.run(self.queue.start(), timeout_s=10)

    def export(self, trace: Trace, evaluation: Evaluation) -> None:
        self.loop.call(self._submit, evaluation)

    def _submit(self, evaluation: Evaluation) -> None:  # on the loop
        self.queue.submit(evaluation)
        self.metrics.judge.queue_depth(self.queue.qsize())

    def _done(self, evaluation: Evaluation) -> None:  # on the loop
        self.metrics.judge.queue_depth(self.queue.qsize())
        assert evaluation.judge is not None
        stored = self.store.put_judge(evaluation.trace_id, evaluation.trajectory.revision,
                                      evaluation.judge)
        if stored and self.events is not None:
            self.events.export_judge(evaluation, evaluation.trajectory.run_span_id,
                                     self.config.low_score_threshold)

    def _skipped(self, evaluation: Evaluation, reason: str) -> None:  # on the loop
        assert evaluation.judge is not None
        self.store.put_judge(evaluation.trace_id, evaluation.trajectory.revision,
                             evaluation.judge)

    def shutdown(self, deadline_s: float) -> None:
        """Drain for at most ``deadline_s``; what is left is stored as skipped ``shutdown``."""
        self.loop.run(self._shutdown(deadline_s), timeout_s=deadline_s + 10)

    async def _shutdown(self, deadline_s: float) -> None:
        await self.queue.shutdown(deadline_s)
        await close_clients()  # litellm caches HTTP clients per loop: close them on this one
