"""``JudgeQueue``: a bounded queue in front of the judge, drained by worker tasks on the
caller's event loop. ``submit`` never blocks: when the judge is off, sampled out, over
budget, shutting down or behind, the evaluation is skipped with a reason (``on_skip``) and
ingestion goes on.

Lifecycle: ``await start()`` (on the running loop) -> ``submit(...)`` from loop code ->
``await shutdown(deadline_s)``: stop accepting, let workers drain until the deadline, then
cancel them; whatever was not judged gets ``on_skip(evaluation, "shutdown")``. A judgement
that raised or was cut keeps the calls it made in its skip's ``totals`` (``skipped_judge``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from otel_eval.base.loglimit import BUG_LOG_INTERVAL_S, LogLimiter, bug_line
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.judge.judge import Judge
from otel_eval.evaluate.judge.observer import SkipReason
from otel_eval.evaluate.judge.sampling import sampled
from otel_eval.evaluate.judge.scoring import Collector

log = logging.getLogger(__name__)


def skipped_judge(reason: SkipReason, spent: Collector | None = None) -> dict[str, object]:
    """The ``judge`` object of a trace not judged; with the ``totals`` of the calls its
    judgement made before it ended (``spent``), when it made any."""
    return {"judges": {}, "overall": {"status": "skipped", "reason": reason},
            **(spent.spent() if spent is not None else {})}


class JudgeQueue:
    """At most ``maxsize`` evaluations waiting, of at most ``max_bytes`` of traces as received
    together (``submit``'s ``nbytes``; one alone may be larger): a waiting evaluation holds its
    run's texts, so a count alone let 1,000 of the largest traces wait in memory. The
    sessions handed to the judge (``hold`` / ``release``, the judge stage's) count in the same
    ``max_bytes``: what waits for the judge, traces and sessions alike."""

    def __init__(self, judge: Judge, maxsize: int, on_done: Callable[[Evaluation], None],
                 on_skip: Callable[[Evaluation, str], None],
                 max_bytes: int = 1 << 62, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: the time of the limit on the lines of a bug every trace hits."""
        self.judge = judge
        self.on_done = on_done  # called with evaluation.judge set (on the loop)
        self.on_skip = on_skip  # called with evaluation.judge = {"overall": skipped, reason}
        self._queue: asyncio.Queue[tuple[Evaluation, int]] = asyncio.Queue(maxsize)
        self.max_bytes = max_bytes
        # of the evaluations waiting (not those being judged) and the sessions held
        self.queued_bytes = 0
        self._workers: list[asyncio.Task[None]] = []
        self._inflight: dict[asyncio.Task[None], tuple[Evaluation, Collector]] = {}
        self._accepting = False
        self.judged = 0  # evaluations passed to on_done
        self.skipped: dict[str, int] = {}  # reason -> count
        self.errors = 0  # judge calls that raised (a bug: logged with traceback)
        self._error_log = LogLimiter(BUG_LOG_INTERVAL_S, clock)  # one place, one limiter
        self._done_log = LogLimiter(BUG_LOG_INTERVAL_S, clock)
        self._skip_log = LogLimiter(BUG_LOG_INTERVAL_S, clock)  # skips: every trace, over budget

    def qsize(self) -> int:
        return self._queue.qsize()

    def submit(self, evaluation: Evaluation, nbytes: int = 0) -> bool:
        """Queue ``evaluation`` (of a trace of ``nbytes`` as received) for judging; False (and
        ``on_skip``) when it will not be."""
        reason: SkipReason | None = None
        if not self.judge.enabled:
            reason = "disabled"
        elif not self._accepting:
            reason = "shutdown"
        elif not sampled(evaluation, self.judge.config.sampling):
            reason = "sampled_out"
        elif self.judge.over_budget():
            reason = "over_budget"
        elif self._queue.full() or not self._fits(nbytes):
            reason = "queue_full"
        if reason is not None:
            self._skip(evaluation, reason)
            return False
        self._queue.put_nowait((evaluation, nbytes))
        self.queued_bytes += nbytes
        return True

    def _fits(self, nbytes: int) -> bool:
        """``nbytes`` more within ``max_bytes`` with what waits, or alone (nothing waits)."""
        return self.queued_bytes + nbytes <= self.max_bytes or (
            self.queued_bytes == 0 and self._queue.empty())

    def hold(self, nbytes: int) -> bool:
        """Count ``nbytes`` held for the judge outside the queue (a session's turns) in
        ``max_bytes``; False, nothing counted, when they do not fit (skip it ``queue_full``).
        Each ``hold`` that returned True is ended by one ``release(nbytes)``."""
        if not self._fits(nbytes):
            return False
        self.queued_bytes += nbytes
        return True

    def release(self, nbytes: int) -> None:
        self.queued_bytes -= nbytes

    def _skip(self, evaluation: Evaluation, reason: SkipReason,
              spent: Collector | None = None) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.judge.observer.skip(reason)
        evaluation.judge = skipped_judge(reason, spent)
        try:
            self.on_skip(evaluation, reason)
        except Exception:  # the sink's failure must not stop judging
            bug_line(self._skip_log, log, "judge on_skip callback failed for trace %s",
                     evaluation.trace_id, counted="failed on_skip callbacks")

    async def start(self) -> None:
        self._accepting = True
        for n in range(self.judge.config.max_concurrency):
            task = asyncio.create_task(self._work(), name=f"judge-worker-{n}")
            task.add_done_callback(self._worker_died)
            self._workers.append(task)

    async def _work(self) -> None:
        me = asyncio.current_task()
        assert me is not None
        while True:
            evaluation, nbytes = await self._queue.get()
            self.queued_bytes -= nbytes
            spent = self.judge.spending()
            self._inflight[me] = evaluation, spent  # so shutdown can report it if cancelled
            try:
                await self._judge_one(evaluation, spent)
            finally:
                self._inflight.pop(me, None)
                self._queue.task_done()

    @property
    def alive(self) -> bool:
        """False once a worker died while the queue takes work (read from other threads:
        the judge stage's ``healthy``, /healthz)."""
        return not self._accepting or not any(
            w.done() and not w.cancelled() for w in list(self._workers))

    def _worker_died(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:  # never silently
            log.error("judge worker %s died", task.get_name(), exc_info=task.exception())

    async def _judge_one(self, evaluation: Evaluation, spent: Collector) -> None:
        try:
            evaluation.judge = await self.judge.judge(evaluation, spent)
        except asyncio.CancelledError:
            raise
        except Exception:  # stage boundary: a bug in one trace must not kill the worker
            self.errors += 1
            bug_line(self._error_log, log, "judge failed on trace %s", evaluation.trace_id,
                     counted="failed judgements")
            self._skip(evaluation, "worker_error", spent)
            return
        self.judged += 1
        try:
            self.on_done(evaluation)
        except Exception:
            bug_line(self._done_log, log, "judge on_done callback failed for trace %s",
                     evaluation.trace_id, counted="failed on_done callbacks")

    async def shutdown(self, deadline_s: float) -> None:
        """Stop accepting; drain for at most ``deadline_s`` seconds; then cancel the rest."""
        self._accepting = False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout=max(deadline_s, 0.0))
        unfinished: list[tuple[Evaluation, Collector | None]] = list(self._inflight.values())
        for w in self._workers:
            w.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()
        while not self._queue.empty():
            evaluation, nbytes = self._queue.get_nowait()
            self.queued_bytes -= nbytes
            unfinished.append((evaluation, None))
            self._queue.task_done()
        for evaluation, spent in unfinished:
            self._skip(evaluation, "shutdown", spent)
