"""``JudgeStage``: the judge as a sink of ``serve``, off the ingest path.

    Engine (thread) --export(trace, evaluation)--> loop.call(JudgeQueue.submit)
        -> worker task -> Judge.judge -> on_done: JudgeWrites.put (store.put_judge), then events
                                      -> on_skip: JudgeWrites.put({"overall": skipped})
        -> once stored (judged or skipped), on the writer thread: the Kafka results topic gets
           the stored object again, read back: the ``judge`` (and any verdict an outcome
           re-judged meanwhile) the results API now returns (``outputs.kafka``)
    SessionJob (thread) --judge_session(record, turns)--> loop: a task -> Judge.judge_session
        -> JudgeWrites.call(store.put_session_judge): onto the completion it judged
    IssuesJob (thread) --ask(request)--> loop: Judge.call (the issue namer's one call per new
        issue) -> the CallResult, waited for by the issues thread

The issue namer borrows the stage's ``Judge`` (``ask``): the same client, so its calls share the
concurrency, rate limits, hourly cost budget and retries, and are counted under their name.
Sessions are judged once per completion, bounded by ``queue_size`` judgements under way and
by ``max_queue_bytes`` (their turns' JSON as stored, counted with the traces waiting: a
session holds its turns until its judgement ends), sampled and budgeted as traces (skips
counted with the same reasons); a stop cuts the ones under way at its deadline and one handed
over once it began: each skipped ``shutdown`` (stored onto its completion, counted; the
session keeps its verdict by code).

Each queued evaluation is kept in a journal until its judgement, stored, is delivered; the
work a killed process held is marked skipped ``restart`` at the next start (``delivery``: the
write path, the journal and the deliveries, on the writer thread).
Each judgement is cut to fit the stored result (``fit``: the trajectory's ``max_value_bytes``
per text, ``max_result_bytes`` for the whole row) before it is written.

``export`` never blocks the engine: it schedules the submit on the service's event loop and
returns. When the judge is slow, down or over budget the queue skips traces with a reason
(counted in ``otel_eval_judge_skipped_total``), and the stored trace's ``judge.overall`` says
why. A judge result is stored only onto the revision it judged (late spans re-open a trace;
the new revision gets its own judgement).

The stage is the one writer of a row's ``judge`` part (``store.judge_writes.JudgeWrites``,
a thread of its own); the events of a judgement go out once its write is known to have
landed; shutdown waits for the writes within its deadline.

Lifecycle: the constructor only constructs; ``start()`` checks the provider credentials,
opens the rubric cache (``cache_path``), reads the prompts and starts the queue's workers and
the writer; ``shutdown(deadline_s)`` drains the queue, then the writes, then closes the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from otel_eval.base.aio import LoopThread
from otel_eval.base.judgement import JUDGED_AT
from otel_eval.base.loglimit import LogLimiter
from otel_eval.base.model import Trace
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.judge.client import (
    CALL_STATUSES,
    CallResult,
    check_credentials,
    check_prices,
    close_clients,
)
from otel_eval.evaluate.judge.config import JudgeConfig, call_names
from otel_eval.evaluate.judge.delivery import JudgeDelivery
from otel_eval.evaluate.judge.journal import PendingJournal
from otel_eval.evaluate.judge.judge import Judge
from otel_eval.evaluate.judge.observer import SKIP_REASONS, SkipReason
from otel_eval.evaluate.judge.prompting import Request
from otel_eval.evaluate.judge.rubric_cache import SqliteRubricCache
from otel_eval.evaluate.judge.sampling import session_sampled
from otel_eval.evaluate.judge.workqueue import JudgeQueue, skipped_judge
from otel_eval.outputs.deps import JudgedResults, JudgeEvents
from otel_eval.store import EvaluationStore
from otel_eval.store.judge_writes import JudgeWrites
from otel_eval.store.sessions import session_key
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

# Seconds between two lines of the stage's store (and journal) failures.
STORE_LOG_INTERVAL_S = 10.0


def _completion(record: dict[str, Any]) -> tuple[str, int]:
    """The store key of a session record's row and the completion it is (from 1)."""
    return (session_key(record.get("service"), str(record.get("session_id"))),
            int(record.get("completion") or 0) + 1)


class JudgeStage(JudgeDelivery):
    name = "judge"  # outputs.sender.SINK_NAMES

    def __init__(self, config: JudgeConfig, loop: LoopThread, store: EvaluationStore,
                 metrics: Metrics, events: JudgeEvents | None = None, *,
                 cache_path: str = ":memory:",
                 trajectory: TrajectoryConfig | None = None,
                 results: JudgedResults | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``cache_path``: the local SQLite file of the rubric cache and the pending journal
        (``store.path``); ``trajectory``: the bounds of a stored result; ``results``: the
        Kafka results topic, which gets each evaluation again once its judge is stored;
        ``clock``: the stage's one time, its judge's too (the hourly cost budget, the rate
        limits, a call's latency) and that of the limits on the stage's, its queue's and its
        judge's lines. The rate limits wait on the loop's ``asyncio.sleep``: a clock that
        does not move with it suits a judge without ``requests_per_min`` and
        ``tokens_per_min``."""
        self.config = config
        self._clock = clock
        # the writer thread's and the loop's store failures: one line per interval
        self._store_log = LogLimiter(STORE_LOG_INTERVAL_S, clock)
        self.bounds = trajectory or TrajectoryConfig()
        self.loop = loop
        self.store = store
        self.metrics = metrics
        metrics.judge.skip_reasons(SKIP_REASONS)
        metrics.judge.call_statuses(call_names(config), CALL_STATUSES)
        self.events = events
        self.results = results
        self.cache_path = cache_path
        self._cache: SqliteRubricCache | None = None
        self._journal: PendingJournal | None = None
        # the journal as opened, also once closed: events delivered after the stop clear it
        self._journal_ever: PendingJournal | None = None
        self.judge: Judge | None = None  # made at start(): it reads the prompt files
        self.queue: JudgeQueue | None = None
        self._writer: JudgeWrites | None = None
        self._writes: set[Future[bool]] = set()  # made, not yet done (touched on the loop)
        self._sessions: set[asyncio.Task[None]] = set()  # session judgements under way
        self._stopping = False  # set by shutdown: ``ask`` sends nothing more
        self._asks: set[asyncio.Task[Any]] = set()  # calls lent under way (on the loop)

    def start(self) -> None:
        check_credentials(self.config)
        check_prices(self.config)
        self._cache = SqliteRubricCache(self.cache_path,
                                        ttl_s=self.config.rubric_ttl_days * 86400)
        try:
            self.judge = Judge(self.config, clock=self._clock, rubric_cache=self._cache,
                               observer=self.metrics.judge)
        except BaseException:
            self._close_cache()
            raise
        self.queue = JudgeQueue(self.judge, self.config.queue_size, self._done, self._skipped,
                                self.config.max_queue_bytes, clock=self._clock)
        # one thread: the judge's writes reach the store one at a time, in order
        self._writer = JudgeWrites(self.store)
        self._writer.start()
        self._journal = self._journal_ever = PendingJournal(self.cache_path).open()
        # before any new work: the writer runs in order; and waited for, so it is done before
        # the spool replay (started after the sinks) stores anything
        marked = self._writer.call(self._mark_lost)
        self.loop.run(self.queue.start(), timeout_s=10)
        marked.result()

    @property
    def healthy(self) -> bool:
        """Every queue worker alive (base.component.Live): a dead one judges nothing more."""
        return self.queue is None or self.queue.alive

    def items(self, trace: Trace, evaluation: Evaluation | None) -> int:
        return 0 if evaluation is None else 1  # one evaluation to judge

    def export(self, trace: Trace, evaluation: Evaluation) -> None:
        try:
            nbytes = sum(span.nbytes for span in trace.spans)
            self.loop.call(self._submit, evaluation, nbytes)
        except RuntimeError:  # the loop has closed: the service stopped before this trace
            log.warning("trace %s not judged: the service is stopping", evaluation.trace_id)
            self.metrics.judge.skip("shutdown")

    def pass_on(self, trace: Trace) -> None:
        """No evaluation, nothing to judge."""

    def _submit(self, evaluation: Evaluation, nbytes: int) -> None:  # on the loop
        assert self.queue is not None and self._writer is not None, "export before start()"
        if self.queue.submit(evaluation, nbytes) and self._journal is not None:
            # queued after the submit: a worker's write for it can only come later
            trace_id, revision = evaluation.trace_id, evaluation.trajectory.revision
            run_span_id, at = evaluation.trajectory.run_span_id, evaluation.evaluated_at_ns
            self._writer.call(lambda: self._journal_add(trace_id, revision, run_span_id, at))
        self.metrics.judge.queue_depth(self.queue.qsize())

    def _done(self, evaluation: Evaluation) -> None:  # on the loop
        assert self.queue is not None
        self.metrics.judge.queue_depth(self.queue.qsize())
        if evaluation.judge is not None:  # its events' time, now or sent again after a restart
            evaluation.judge[JUDGED_AT] = time.time_ns()
        self._write(evaluation, then=self._judged if self.events is not None else None)

    def _skipped(self, evaluation: Evaluation, reason: str) -> None:  # on the loop
        assert self.queue is not None
        # as ``_done``: a judgement that raised, or one the stop cut, leaves the queue too
        self.metrics.judge.queue_depth(self.queue.qsize())
        self._write(evaluation)

    # -- sessions ------------------------------------------------------------------------

    def judge_session(self, record: dict[str, Any], turns: Sequence[dict[str, Any]],
                      nbytes: int) -> None:
        """From the session job's thread, once a completion is stored: judge the
        conversation (one call) on the loop and write the result onto that completion
        (``store.put_session_judge``, on the writer thread). Returns at once. ``nbytes``:
        the turns' JSON as stored, held in ``max_queue_bytes`` until the judgement ends."""
        try:
            self.loop.call(self._session_submit, record, list(turns), nbytes)
        except RuntimeError:  # the loop has closed: the service stopped before this session
            log.warning("session %r not judged: the service is stopping",
                        record.get("session_id"))
            self.metrics.judge.skip("shutdown")

    def _session_submit(self, record: dict[str, Any], turns: list[dict[str, Any]],
                        nbytes: int) -> None:  # on the loop
        if self.judge is None or self._writer is None or self.queue is None \
                or "session" not in self.config.enabled or not turns:
            return
        reason: SkipReason | None = None
        if self._stopping:  # as a trace's submit once the queue stops accepting: a session
            reason = "shutdown"  # is completed once, and no next start judges it again
        elif record.get("turns") == 1 and "trace" in self.config.enabled:
            # the conversation is its one run, which the trace judge scores on the same
            # question: a second call would double the judge's cost for the stacks that make
            # a conversation id per run (Agno, ADK, pydantic-ai) and say nothing new
            reason = "one_turn"
        elif not session_sampled(record, self.config.sampling):
            reason = "sampled_out"
        elif self.judge.over_budget():
            reason = "over_budget"
        elif len(self._sessions) >= self.config.queue_size or not self.queue.hold(nbytes):
            reason = "queue_full"
        if reason is not None:
            self.metrics.judge.skip(reason)
            self._write_session(record, skipped_judge(reason))
            return
        task = asyncio.get_running_loop().create_task(self._judge_session(record, turns))
        # journaled before its write (the writer runs in order): a kill before that write
        # leaves the entry, and the next start marks the completion skipped ``restart``
        key, completions = _completion(record)
        self._writer.call(lambda: self._journal_session(key, completions, True))
        self._sessions.add(task)
        task.add_done_callback(lambda t: self._session_ended(t, nbytes))

    def _session_ended(self, task: asyncio.Task[None], nbytes: int) -> None:  # on the loop
        assert self.queue is not None
        self._sessions.discard(task)
        self.queue.release(nbytes)

    async def _judge_session(self, record: dict[str, Any],
                             turns: list[dict[str, Any]]) -> None:  # on the loop
        assert self.judge is not None
        spent = self.judge.spending()  # the calls made, whatever ends the judgement
        try:
            judge = await self.judge.judge_session(record, turns, spent)
        except asyncio.CancelledError:  # cut by the stop's deadline: judged once, never at
            self.metrics.judge.skip("shutdown")  # the next start, so marked and counted
            self._write_session(record, skipped_judge("shutdown", spent))
            raise
        except Exception as e:  # the stage boundary: said, counted, judging goes on
            log.error("judging session %r failed: %s", record.get("session_id"),
                      type(e).__name__, exc_info=e)
            self.metrics.judge.skip("worker_error")  # as a trace's judgement that raises
            judge = skipped_judge("worker_error", spent)
        self._write_session(record, judge)

    def _write_session(self, record: dict[str, Any],
                       judge: dict[str, Any]) -> None:  # on the loop
        assert self._writer is not None
        session_id = str(record.get("session_id"))
        key, completions = _completion(record)
        try:
            write = self._writer.put_session(key, completions, judge)
        except RuntimeError:  # the writer has stopped: the shutdown deadline passed
            log.warning("judge result of session %r not stored: the stage has stopped",
                        session_id)
            return
        # written (or refused for good): out of the journal, after the write in order
        with contextlib.suppress(RuntimeError):  # stopped since: the next start checks it
            self._writer.call(lambda: self._journal_session(key, completions, False))
        self._writes.add(write)
        write.add_done_callback(lambda f: self.loop.call(self._session_written, f, session_id))

    def _session_written(self, write: Future[bool], session_id: str) -> None:  # on the loop
        self._writes.discard(write)
        if not write.cancelled() and (e := write.exception()) is not None:
            log.error("storing the judge result of session %r failed: %s", session_id,
                      type(e).__name__, exc_info=e)

    # -- calls lent to the issue namer ---------------------------------------------------

    def ask(self, request: Request) -> CallResult | None:
        """From another thread (the issues job's namer): one call through the stage's
        ``Judge`` on the loop, waited for (at most ``ask_timeout_s``). None, with nothing
        sent, when the stage is not running (before ``start``, from ``shutdown`` on)."""
        if self.judge is None or self._stopping:
            return None
        return self.loop.run(self._ask(request), timeout_s=self.ask_timeout_s())

    async def _ask(self, request: Request) -> CallResult | None:  # on the loop
        # checked again here: a call that reaches the loop once shutdown began sends nothing;
        # one under way is waited for by ``_shutdown`` (within its deadline), as a session's
        if self.judge is None or self._stopping:
            return None
        task = asyncio.current_task()
        assert task is not None
        self._asks.add(task)
        try:
            return await self.judge.call(request)
        finally:
            self._asks.discard(task)

    def ask_timeout_s(self) -> float:
        """A bound on one call with its retries and repair, plus a minute of waiting for a
        slot (concurrency, rate limits): past it the namer gives up, the call may still end."""
        c = self.config
        return 2 * (c.max_retries + 1) * (c.timeout_s + c.backoff_max_s) + 60.0

    def shutdown(self, deadline_s: float) -> None:
        """Drain for at most ``deadline_s``; what is left is stored as skipped ``shutdown``,
        then the writes made are waited for with what is left of the deadline."""
        self._stopping = True
        if self.queue is None:  # never started
            return
        self.loop.run(self._shutdown(deadline_s), timeout_s=deadline_s + 10)
        if self._writer is not None:
            self._writer.stop()  # a write past the deadline still finishes
        self._close_cache()

    async def _shutdown(self, deadline_s: float) -> None:
        end = asyncio.get_running_loop().time() + deadline_s
        assert self.queue is not None
        await self.queue.shutdown(deadline_s)
        under_way = [*self._sessions, *self._asks]  # session judgements, issue names
        if under_way:  # finished within the deadline
            left = max(0.0, end - asyncio.get_running_loop().time())
            _, late = await asyncio.wait(under_way, timeout=left)
            for task in late:
                task.cancel()
            if late:  # each cut one marks and counts itself: let it, before the writes
                await asyncio.wait(late)
                log.warning("%d session judgements or issue names cut by the shutdown "
                            "deadline", len(late))
        await close_clients()  # litellm caches HTTP clients per loop: close them on this one
        if self._writes:
            left = max(0.0, end - asyncio.get_running_loop().time())
            _, pending = await asyncio.wait([asyncio.wrap_future(w) for w in self._writes],
                                            timeout=left)
            # each write's ``_written`` (its events) was queued on the loop before the wait
            # it ends, so the events sink, stopped after this stage, has them all
            if pending:
                log.warning("%d judge results not stored within the shutdown deadline",
                            len(pending))

    def _close_cache(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self._cache is not None:
            self._cache.close()
            self._cache = None
