"""Stage: assemble (finishing). Released traces -> evaluation -> what follows the store's commit.

    enqueue(released traces: content digest) -> queue -> process: EvaluationStage.run
        (evaluate and store, here or in worker processes) -> finish: metrics -> sinks
        (events, forward, judge) -> pending budget released -> once no delivering sink
        holds the trace (``Held``): spool (evaluated) -> waiters (Kafka offsets)

A released trace whose content the store already holds an evaluation of (same trace id,
same ``model.content_digest``: a redelivered Kafka record, a replayed spool row) comes back
``already_evaluated``: counted (``otel_eval_evaluation_skipped_total{reason}``), no metric of
the trace and no sink, but done like any other (spool rows deleted, waiters called). So is a
trace that is no agent run (``not_a_run``: only setup operations, such as a ``create_agent``
span in a trace of its own): nothing stored, counted the same way, and its spans handed to
the sinks' ``pass_on`` (pass-through forwards them unstamped: otel-eval in the trace path must
not swallow a user's spans because they are no run), and so is a trace of spans that came
after their run was stored (``late``: ``evaluate.stage``) and, with pass-through, a trace of
only another sender's spans for a released run (``foreign_sender``: a passing trace).

A batch the store refused (``Outcome.unstored``: a full disk, a lost connection) is not
finished: its jobs go back into the queue ahead of what was released after them (release order:
with worker processes several batches are refused in turn), still pending and spooled, the
refusal is counted (``otel_eval_store_write_failures_total{reason}``) and ``StoreHealth``
says when ``process`` may hand out work again (capped exponential back-off); meanwhile the
receivers throttle (``store_unavailable``). The first batch stored ends the back-off (one
that wrote nothing does not, unless it held a refused job: ``_took_writes``). A
kept trace that a later revision re-opening it was stored after (worker processes store
the batch after a refused one) is done as ``already_evaluated``, never stored over it.

A request whose items a released trace already holds (a Kafka record delivered again after
its partition came back: every span a ``duplicate_span`` or ``late``) is done when that trace
is: ``wait_for`` adds its waiter to the trace's own, called by ``finish`` with them. The
traces released and not finished are kept by trace id for it (the latest revision, which holds
the earlier ones' spans); an entry leaves at ``finish``, so they are bounded by the pending
budget. A trace kept after a store refusal, re-sent after its worker process died, or left
unstored by a stop keeps its waiters uncalled.

A delivering sink (``base.component.DeliveringSink``: pass-through, the evaluation events)
queues in memory what no store keeps: each trace is ``Held`` until every such sink has
delivered it or dropped it for good, and only then leave its spool rows and are its waiters
called (``_release``, a batch per sender batch; a trace of spans only to pass on lets its
own revision's rows go, not the earlier revisions', which it does not hold: ``Held.alone``).
A stop or a crash before then replays it;
the store holds its evaluation, so the replay comes back ``already_evaluated`` and goes to
the delivering sinks again, with the evaluation the store holds (at least once). Without
such a sink a trace is released as soon as its sinks have run.

A trace's spans count as pending (``queued_spans``, ``queued_bytes``, and per service
``queued_load``: admission bounds them),
and so do its GenAI event records (``queued_logs``, per service ``queued_log_load``), from its
release until ``finish``,
whatever the stage, so the receivers throttle while the evaluation is behind. A sink that
raises is logged and counted, and the others still run;
so do a trace's metrics (``otel_eval_evaluation_failures_total{stage="metrics"}``): the
trace is stored, and the rest of its batch is finished all the same.

Threads: ``enqueue`` and the counters under the engine's lock (``lock``); ``process`` on
the engine's worker thread (or tests by hand); ``finish`` on the thread the stage finishes
a batch on (the pool's threads with worker processes), serialized by its own lock.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from otel_eval.assemble.durability import Durability
from otel_eval.assemble.service_load import ServiceLoad
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.component import DeliveringSink, Held, Sink, settle
from otel_eval.base.loglimit import BUG_LOG_INTERVAL_S, LogLimiter, bug_line, limited_line
from otel_eval.base.model import Trace, content_digest
from otel_eval.base.results import Evaluation, stored_evaluation
from otel_eval.evaluate.handoff import (
    ALREADY_EVALUATED,
    FOREIGN_SENDER,
    LATE,
    NOT_A_RUN,
    UNSTORABLE,
    EvaluationStage,
    Job,
    Outcome,
)
from otel_eval.outputs.sender import INTERNAL_ERROR
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

# Seconds between two lines of failed store reads (the rest counted in the next).
STORE_READ_LOG_INTERVAL_S = 10.0


class Finishing:
    def __init__(self, stage: EvaluationStage, durability: Durability, metrics: Metrics, *,
                 sinks: Sequence[Sink], clock: Callable[[], float], batch_size: int,
                 lock: threading.Lock, gauges: Callable[[], None],
                 health: StoreHealth,
                 stored: Callable[[str], tuple[Mapping[str, Any], int] | None] | None = None
                 ) -> None:
        """``stored``: a trace's stored record and its evaluation time by id (the store's
        ``get_stamped``), read for the delivering sinks when a replay comes back already
        evaluated: its events are timed at that evaluation, as the first send's were."""
        self.stage = stage
        self._stored = stored
        self.health = health
        self.sinks = list(sinks)
        self._durability = durability
        self._metrics = metrics
        self._clock = clock
        # a store that cannot answer: a line per interval (the engine's reads use it too)
        self.read_log = LogLimiter(STORE_READ_LOG_INTERVAL_S, clock)
        self._sink_logs: dict[str, LogLimiter] = {}  # a sink's bug: per sink, by its name
        self._metrics_log = LogLimiter(BUG_LOG_INTERVAL_S, clock)  # a trace's metrics' bug
        self._waiter_log = LogLimiter(BUG_LOG_INTERVAL_S, clock)  # a waiter's, any thread
        self._batch_size = batch_size
        self._lock = lock  # the engine's: guards the queue and the counters
        self._gauges = gauges  # the engine's gauges, called with the lock held
        self._finish_lock = threading.Lock()  # stages may finish jobs from several threads
        self._queue: deque[Job] = deque()  # in release order (``Job.seq``)
        self._seq = itertools.count(1)
        # Kept jobs (a store refusal) by seq, and for their trace ids the highest revision
        # re-opening them stored since (-1: none): a kept revision older than that is done
        self._kept: dict[int, str] = {}
        self._kept_ids: Counter[str] = Counter()
        self._newer: dict[str, int] = {}
        # released, not finished (queued, or handed to the stage): by trace id, under the lock
        self._unfinished: dict[str, Trace] = {}
        self.queued_spans = 0
        self.queued_bytes = 0
        self.queued_load = ServiceLoad()  # the queued spans per service (its share of them)
        self.queued_logs = 0  # GenAI event records of the queued traces (pending, as spans)
        self.queued_log_load = ServiceLoad()  # those records per service (its share of them)
        self.wake = threading.Event()  # set when there is work for process()

    def enqueue(self, traces: list[Trace]) -> None:  # lock held
        now = self._clock()
        for t in traces:
            t.digest = content_digest(t)  # what it is released with (the store keeps it)
            self._queue.append(Job(t, now, seq=next(self._seq)))
            self._unfinished[t.trace_id] = t
            self.queued_spans += len(t.spans) + len(t.passed)
            self.queued_bytes += _nbytes(t)
            self.queued_load.add(t.spans)
            self.queued_load.add(t.passed)
            self.queued_logs += len(t.logs)
            self.queued_log_load.add_released(t.logs)
            self._metrics.ingest.trace_released(t.status, t.release_reason,
                                                len(t.spans) + len(t.passed))
        if traces:
            self.wake.set()

    def wait_for(self, trace_ids: Iterable[str], waiter: Callable[[], None]) -> int:
        """Add ``waiter`` to the traces of ``trace_ids`` released and not finished (called
        once each is); returns to how many. Lock held."""
        n = 0
        for tid in trace_ids:
            trace = self._unfinished.get(tid)
            if trace is not None:
                trace.waiters.append(waiter)
                n += 1
        return n

    def queued_traces(self) -> int:
        """Traces waiting to be handed out (after a store refusal: kept for the retry)."""
        with self._lock:
            return len(self._queue)

    def process(self, max_traces: int | None = None) -> int:
        """Hand queued traces to the evaluation stage; returns how many. In process (the
        default stage) they are evaluated, stored and exported before this returns."""
        done = 0
        while max_traces is None or done < max_traces:
            if self.health.retry_in(self._clock()) > 0:
                break  # the store refused the last write: not before the back-off ends
            with self._lock:
                n = min(self._batch_size, len(self._queue))
                batch = [self._queue.popleft() for _ in range(n)]
                stale = self._stale(batch)
            if not batch:
                break
            if stale:  # done without the store: no sign it takes writes (refused)
                batch = [j for j in batch if j not in stale]
                for job in stale:
                    job.refused = False
                self.finish(stale, [Outcome(None, False, skipped=ALREADY_EVALUATED)
                                    for _ in stale])
            # spans only to pass on (``Trace.passed``), none to evaluate: no run, and no
            # evaluation stage to hand them to (a worker process is not given them)
            bare = [j for j in batch if not j.trace.spans and j.trace.passed]
            if bare:
                batch = [j for j in batch if j not in bare]
                self.finish(bare, [Outcome(None, False, skipped=_bare(j.trace)) for j in bare])
            if batch:
                self.stage.run(batch, self.finish)
            done += len(batch) + len(stale) + len(bare)
        return done

    def _stale(self, batch: list[Job]) -> list[Job]:  # lock held
        """The kept jobs of ``batch`` whose trace a later revision re-opening it (so holding
        its spans) was stored after: with worker processes, the batch after a refused one
        may be stored. Handed again, such a job was stored over that revision; it is done
        as ``already_evaluated`` instead (spool rows, waiters: the store holds its spans)."""
        stale = []
        for job in batch:
            tid = self._kept.pop(job.seq, None)
            if tid is None:
                continue
            if self._newer.get(tid, -1) > job.trace.revision:
                stale.append(job)
            self._kept_ids[tid] -= 1
            if self._kept_ids[tid] <= 0:
                del self._kept_ids[tid]
                self._newer.pop(tid, None)
        return stale

    def finish(self, jobs: list[Job], outcomes: list[Outcome]) -> None:
        """After the store committed ``jobs``: spool, metrics, sinks, then the waiters."""
        with self._finish_lock:
            self._finish_locked(jobs, outcomes)

    def _finish_locked(self, jobs: list[Job], outcomes: list[Outcome]) -> None:
        for out in outcomes:  # the agent history's bounds, as the batch taught it
            for reason, rows in out.history_evicted:
                self._metrics.evaluation.history_evicted(reason, rows)
        refused = [(j, o) for j, o in zip(jobs, outcomes, strict=True) if o.unstored]
        if refused:
            self._keep(refused)
            jobs = [j for j, o in zip(jobs, outcomes, strict=True) if not o.unstored]
            outcomes = [o for o in outcomes if not o.unstored]
        elif _took_writes(jobs, outcomes) and self.health.recovered():
            log.warning("store %s takes writes again", self.health.location)
        if not jobs:
            return
        now = self._clock()
        delivering = [s for s in self.sinks if isinstance(s, DeliveringSink)]
        held = [Held(j.trace.trace_id, j.trace.revision, self._release, j.trace.waiters,
                     alone=not j.trace.spans) for j in jobs]
        for job, out, h in zip(jobs, outcomes, held, strict=True):
            trace, ev = job.trace, out.evaluation
            # taken to pass on only (pass-through), never evaluated: why, span by span
            for reason, n in Counter(s.unevaluable or "trace_too_large"
                                     for s in trace.passed).items():
                self._metrics.evaluation.spans_skipped(reason, n)
            if ev is None:  # already evaluated (and exported then), no agent run, or a
                skipped = out.skipped or ALREADY_EVALUATED  # result nothing could store
                trace.finished.late = skipped == LATE  # read by assembly if spans re-open it
                self._metrics.evaluation.skipped(skipped)
                if skipped in (NOT_A_RUN, FOREIGN_SENDER, LATE, UNSTORABLE):  # spans pass on
                    self._to_sinks(trace, None, h, delivering)
                elif delivering:  # a replay: what those sinks held may never have gone out
                    self._again(trace, h, delivering)
                continue
            if out.failure is not None:
                self._metrics.evaluation.failed("evaluate", out.failure)
            self._observe(ev, now - job.released_at, out.superseded)
            self._to_sinks(trace, ev, h, delivering)
        # The store holds them: release the pending budget. Under the lock, the trace stops
        # taking waiters (``wait_for``) before ``_release`` reads them: a waiter added later
        # finds the trace finished and is not kept waiting.
        with self._lock:
            self.queued_spans -= sum(len(j.trace.spans) + len(j.trace.passed) for j in jobs)
            self.queued_bytes -= sum(_nbytes(j.trace) for j in jobs)
            for job in jobs:
                self.queued_load.remove(job.trace.spans)
                self.queued_load.remove(job.trace.passed)
            self.queued_logs -= sum(len(j.trace.logs) for j in jobs)
            for job in jobs:
                self.queued_log_load.add_released(job.trace.logs, -1)
            self._gauges()
            for job, out in zip(jobs, outcomes, strict=True):
                tid = job.trace.trace_id
                if self._unfinished.get(tid) is job.trace:  # not a later revision's entry
                    del self._unfinished[tid]
                if tid in self._newer and out.evaluation is not None and \
                        not job.trace.late_if_stored:  # a re-open (a fragment holds less)
                    self._newer[tid] = max(self._newer[tid], job.trace.revision)
        settle(held)  # finishing's own hold: what no sink queued is released now

    def _release(self, held: list[Held]) -> None:
        """Traces no sink holds any more (on this thread or a sender's): their spool rows
        go (one transaction), then their waiters are told."""
        self._durability.evaluated([(h.trace_id, h.revision) for h in held if not h.alone],
                                   [(h.trace_id, h.revision) for h in held if h.alone])
        for h in held:
            for waiter in h.waiters:
                try:
                    waiter()
                except Exception as e:  # a sender's thread must not die of a waiter's bug
                    bug_line(self._waiter_log, log, "a waiter of trace %s failed",
                             h.trace_id, counted="failed waiters")
                    self._metrics.evaluation.failed("release", type(e).__name__[:64])

    def _observe(self, evaluation: Evaluation, completion_to_verdict_s: float,
                 superseded: bool) -> None:
        """The stored trace's metrics. They read its content (a count, a duration): content
        no reader bounded must cost this trace its metrics only, never the batch its sinks,
        waiters and pending budget (the trace is stored: what follows must run)."""
        try:
            self._metrics.evaluation_stored(evaluation, completion_to_verdict_s, superseded)
        except Exception as e:  # stage boundary: after the commit, before the sinks
            bug_line(self._metrics_log, log, "the metrics of trace %s failed",
                     evaluation.trace_id, counted="metrics failures")
            self._metrics.evaluation.failed("metrics", type(e).__name__[:64])

    def _to_sinks(self, trace: Trace, evaluation: Evaluation | None, held: Held,
                  delivering: list[DeliveringSink]) -> None:
        """Each sink gets the evaluation, or (None: no agent run) the trace to pass on; the
        ``delivering`` ones its ``Held`` too."""
        for sink in self.sinks:
            try:
                if any(sink is d for d in delivering):
                    one: Any = sink
                    if evaluation is None:
                        one.pass_on(trace, held)
                    else:
                        one.export(trace, evaluation, held)
                elif evaluation is None:
                    sink.pass_on(trace)
                else:
                    sink.export(trace, evaluation)
            except Exception:
                self._sink_failed(sink, trace, evaluation)

    def _again(self, trace: Trace, held: Held, delivering: list[DeliveringSink]) -> None:
        """An already evaluated trace (a replay) to the delivering sinks again, with the
        evaluation the store holds (passed on when it cannot be read: the spans still go
        on, and no event is made up)."""
        ev = None
        if self._stored is not None:
            try:
                found = self._stored(trace.trace_id)
                if found is not None:
                    ev = stored_evaluation(trace, found[0], found[1])
            except Exception as e:  # stage boundary: the spans still go on
                limited_line(self.read_log, log, "reading the stored evaluation of trace %s "
                             "failed; passing it on as it came (%s)", trace.trace_id,
                             type(e).__name__, counted="failed store reads")
                self._metrics.evaluation.failed("stored_read", type(e).__name__[:64])
        for sink in delivering:
            try:
                if ev is None:
                    sink.pass_on(trace, held)
                else:
                    sink.export(trace, ev, held)
            except Exception:
                self._sink_failed(sink, trace, ev)

    def _sink_failed(self, sink: Sink | DeliveringSink, trace: Trace,
                     evaluation: Evaluation | None) -> None:
        """Counted as the sink's own drops are: under its name, by the items the call
        dropped, reason ``internal_error`` (outputs.sender's closed sets). Logged with the
        traceback once, then a line per interval (a bug every trace hits)."""
        limiter = self._sink_logs.setdefault(sink.name, LogLimiter(BUG_LOG_INTERVAL_S,
                                                                   self._clock))
        bug_line(limiter, log, "sink %s failed on trace %s", sink.name, trace.trace_id,
                 counted="failures of this sink")
        self._metrics.sinks.dropped(sink.name, INTERNAL_ERROR, sink.items(trace, evaluation))

    def _keep(self, refused: list[tuple[Job, Outcome]]) -> None:
        """The store did not write these: back into the queue in release order, as if never
        handed out (a worker process committed none of them: no attempt counts). Not simply
        at its head: worker processes hold several batches, refused one after another, and
        a batch refused later may hold a later revision of a trace than one kept before."""
        kept = sorted((job for job, _ in refused), key=_seq)
        for job in kept:
            job.attempts, job.first_sent_ns, job.refused = 0, 0, True
        with self._lock:
            self._queue = deque(heapq.merge(kept, self._queue, key=_seq))
            for job in kept:
                self._kept[job.seq] = job.trace.trace_id
                self._kept_ids[job.trace.trace_id] += 1
                self._newer.setdefault(job.trace.trace_id, -1)
        out = refused[0][1]
        assert out.unstored is not None
        self._metrics.evaluation.store_write_failed(out.unstored)
        self.health.failed(out.unstored, out.error)


def _seq(job: Job) -> int:
    return job.seq


def _took_writes(jobs: list[Job], outcomes: list[Outcome]) -> bool:
    """Whether a batch the store did not refuse says it takes writes again: an evaluation
    stored, or a refused job's batch done (what the back-off waited for). A batch that wrote
    nothing (no run, already evaluated, late, only spans to pass on; a full disk still
    answers reads) says nothing: it ended a refusal, so /readyz answered 200 and the
    back-off began again at its first interval, while the disk stayed full."""
    return (any(o.evaluation is not None for o in outcomes)
            or any(j.refused for j in jobs))


def _bare(trace: Trace) -> str:
    """Why a trace of spans only to pass on is not evaluated: ``foreign_sender`` for a
    passing trace (another sender's spans for a released run), else ``not_a_run`` (every
    span unevaluable)."""
    foreign = all(s.unevaluable == "foreign_sender" for s in trace.passed)
    return FOREIGN_SENDER if foreign else NOT_A_RUN


def _nbytes(trace: Trace) -> int:
    """Received size of what a released trace holds: its spans and those it passes on."""
    return sum(s.nbytes for s in trace.spans) + sum(s.nbytes for s in trace.passed)
