"""The engine: receivers hand it spans; it assembles, evaluates, stores and exports.

    submit(spans) -> [spool] -> assembly -> tick(now) releases traces -> queue (bounded by
        pending spans) -> EvaluationStage.run: Evaluator.evaluate -> Store.put_many (here, or
        in worker processes) -> [spool: evaluated] -> metrics -> sinks (events, forward,
        judge) -> waiters (Kafka offsets)

Admission control is the one back-pressure mechanism: spans accepted but not yet stored
(``pending``) are bounded by ``max_pending_spans`` and their received bytes by
``max_pending_bytes``, open traces by ``max_open_traces`` (one-span traces idle for
``pressure_idle_s`` give way first) and per service by ``max_service_share``. Over any,
``submit`` takes nothing and says ``throttled`` so the receiver answers with a
retryable error; once ``submit`` has taken a span, it is evaluated and stored before
``shutdown`` returns (SIGTERM loses nothing that was acknowledged). With a ``Spool``, the bytes
of an OTLP request (``submit(request=...)``) are written to it before ``submit`` returns and
leave it once their traces are stored, so a crash (kill -9) loses nothing acknowledged either:
``Spool.replay`` submits them again at start (``replayed=True``: no admission, no new spool row).
Log requests (``submit_logs(request=...)``) likewise: they carry the content of spans.

Threads: receivers call ``submit`` from their own threads; one worker thread ticks the
assembler and hands released traces to the evaluation stage (``start``). In process (the
default stage) it evaluates them itself; with ``workers.pool.WorkerPool`` the pool's threads
finish them (``_finish``, serialized by its own lock) as the worker processes store them. A
trace's spans count as pending until then, so the pending bounds throttle receivers whatever
the stage. Tests call ``tick(now)`` and ``process()`` by hand instead.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from otel_eval.assemble.assembler import TraceAssembler
from otel_eval.assemble.config import AssemblyConfig
from otel_eval.assemble.spool import Spool
from otel_eval.base.model import Evaluation, LogEvent, Span, Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import EvaluationStage, InProcess, Job, Outcome
from otel_eval.store import EvaluationStore
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Where stored evaluations go next (events, pass-through, judge). Must not block."""

    def export(self, trace: Trace, evaluation: Evaluation) -> None: ...


@dataclass
class Admission:
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    throttled: str | None = None  # reason when refused: nothing was taken, retry later
    ignored: Counter[str] = field(default_factory=Counter)  # log records taken, not kept


class _Barrier:
    """Calls ``callback`` once after ``done`` was called ``n`` times (set after counting)."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.n = 0
        self._lock = threading.Lock()

    def arm(self, n: int) -> None:
        with self._lock:
            self.n += n
            fire = self.n == 0
        if fire:
            self.callback()

    def done(self) -> None:
        with self._lock:
            self.n -= 1
            fire = self.n == 0
        if fire:
            self.callback()


class Engine:
    def __init__(self, evaluator: Evaluator, store: EvaluationStore, metrics: Metrics, *,
                 assembly: AssemblyConfig, sinks: Sequence[Sink] = (),
                 clock: Callable[[], float] = time.monotonic,
                 tick_interval_s: float = 0.25, batch_size: int = 256,
                 spool: Spool | None = None, stage: EvaluationStage | None = None) -> None:
        self.config = assembly
        self.evaluator = evaluator
        self.store = store
        self.metrics = metrics
        self.sinks = list(sinks)
        self.clock = clock
        self.tick_interval_s = tick_interval_s
        self.batch_size = batch_size
        self.spool = spool
        # where released traces are evaluated and stored (worker processes, or this one)
        self.stage: EvaluationStage = stage or InProcess(evaluator, store)
        self._finish_lock = threading.Lock()  # stages may finish jobs from several threads
        self._assembler = TraceAssembler(self.config)
        self._lock = threading.Lock()
        self._queue: deque[Job] = deque()
        self._queued_spans = 0
        self._queued_bytes = 0
        self._closing = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None

    # --- ingest (any thread) -----------------------------------------------------------------

    def pending_spans(self) -> int:
        with self._lock:
            return self._assembler.open_spans + self._queued_spans

    def open_traces(self) -> int:
        with self._lock:
            return len(self._assembler)

    def submit(self, spans: list[Span], source: str = "otlp",
               on_stored: Callable[[], None] | None = None, *,
               request: bytes | Callable[[], bytes] | None = None,
               replayed: bool = False, sender: str = "") -> Admission:
        """Take spans or refuse them all (``throttled``); see the module docstring.
        ``request``: the protobuf bytes the spans were decoded from, spooled before this
        returns (when there is a spool); ``replayed``: spans from the spool at start;
        ``sender``: the authenticated sender's token name (re-opening needs the same)."""
        adm = Admission()
        barrier = _Barrier(on_stored) if on_stored is not None else None
        raw = None
        if self.spool is not None and request is not None and spans and not replayed:
            raw = request() if callable(request) else request
        with self._lock:
            adm.throttled = None if replayed else self._refusal(spans, len(raw or b""))
            row = None if raw is None or adm.throttled else self._spool_append(
                raw, {s.trace_id for s in spans})
            if adm.throttled is not None or row == -1:
                adm.throttled = adm.throttled or "spool_error"
                return adm
            res = self._assembler.add(
                spans, self.clock(), on_trace=(lambda _tid: barrier.done) if barrier else None,
                source=source, sender=sender)
            if row is not None:
                self._spool_settle(row, {s.trace_id for s in spans}, res.traces)
            self._update_gauges()
        if barrier is not None:
            barrier.arm(len(res.traces))
        adm.accepted, adm.rejected = res.accepted, res.rejected
        if res.reopened:
            self.metrics.trace_reopened(res.reopened)
        return adm

    def submit_logs(self, records: list[LogEvent], source: str = "otlp", sender: str = "",
                    *, request: bytes | Callable[[], bytes] | None = None,
                    replayed: bool = False,
                    on_stored: Callable[[], None] | None = None) -> Admission:
        """Take GenAI event records (held for their span's trace) or refuse them all;
        ``request`` and ``replayed`` as for ``submit`` (the log request's bytes).
        ``on_stored``: called once every trace that took a record is stored, or dropped
        with its records for want of spans (``no_spans``, counted): either way the records
        are done with (Kafka commits their offsets then)."""
        adm = Admission()
        barrier = _Barrier(on_stored) if on_stored is not None else None
        raw = None
        if self.spool is not None and request is not None and records and not replayed:
            raw = request() if callable(request) else request
        with self._lock:
            asm = self._assembler
            adm.throttled = None if replayed else self._logs_refusal(records, len(raw or b""))
            row = None if raw is None or adm.throttled else self._spool_append(
                raw, {r.trace_id for r in records}, "logs")
            if adm.throttled is not None or row == -1:
                adm.throttled = adm.throttled or "spool_error"
                return adm
            res = asm.add_logs(records, self.clock(), source=source, sender=sender,
                               on_trace=(lambda _tid: barrier.done) if barrier else None)
            if row is not None:
                self._spool_settle(row, {r.trace_id for r in records}, res.traces, records)
            self._update_gauges()
        if barrier is not None:
            barrier.arm(len(res.traces))
        adm.accepted, adm.rejected = res.accepted, res.rejected
        if res.reopened:
            self.metrics.trace_reopened(0)
        return adm

    def _logs_refusal(self, records: list[LogEvent], spool_bytes: int) -> str | None:
        asm = self._assembler
        if self._closing:
            return "shutting_down"
        if spool_bytes and self.spool is not None and (full := self.spool.refusal(spool_bytes)):
            return full
        if asm.open_logs and asm.open_logs + len(records) > self.config.max_pending_log_records:
            return "pending_log_records"
        if len(asm) + asm.new_trace_count(records) > self.config.max_open_traces:
            return "open_traces"
        return None

    def _refusal(self, spans: list[Span], spool_bytes: int) -> str | None:
        cfg, asm = self.config, self._assembler
        if self._closing:
            return "shutting_down"
        if spool_bytes and self.spool is not None and (full := self.spool.refusal(spool_bytes)):
            return full
        pending = asm.open_spans + self._queued_spans
        if pending and pending + len(spans) > cfg.max_pending_spans:
            return "pending_spans"
        held = asm.open_bytes + self._queued_bytes
        if held and held + sum(s.nbytes for s in spans) > cfg.max_pending_bytes:
            return "pending_bytes"
        new = asm.new_traces_by_service(spans)
        if cfg.max_service_share < 1.0:
            share = cfg.max_service_share * cfg.max_open_traces
            if any(asm.service_open(svc) + k > share for svc, k in new.items()):
                return "service_share"
        over = len(asm) + sum(new.values()) - cfg.max_open_traces
        if over > 0:  # one-span traces idle for pressure_idle_s give way first
            now = self.clock()
            self._enqueue(asm.give_way(over, now - cfg.pressure_idle_s, now))
            over = len(asm) + sum(new.values()) - cfg.max_open_traces
        if over > 0:
            if cfg.overflow_policy == "throttle":
                return "open_traces"
            self._enqueue(asm.release_oldest(over, self.clock()))
        return None

    def _spool_append(self, raw: bytes, trace_ids: set[str],
                      signal: str = "traces") -> int:  # lock held
        """The request's spool row, or -1 when it could not be written (then it is refused)."""
        assert self.spool is not None
        try:
            return self.spool.append(raw, trace_ids, signal)
        except (sqlite3.Error, OSError):
            log.exception("spool write failed; refusing the request (the exporter retries)")
            self.metrics.spool.failed("append")
            return -1

    def _spool_settle(self, row: int, written: set[str], took: set[str],
                      fresh: list[LogEvent] | None = None) -> None:  # lock held
        """``fresh``: the records this (log) request added, spooled in its own row."""
        assert self.spool is not None
        asm = self._assembler
        revisions = {}
        for tid in took:
            opened = asm.open_trace(tid)
            if opened is not None:
                revisions[tid] = opened[0]
        mine = {id(r) for r in fresh or ()}

        def held(tid: str) -> tuple[list[Span], list[LogEvent]]:
            opened = asm.open_trace(tid)
            spans = list(opened[1]) if opened is not None else []
            return spans, [r for r in asm.open_logs_of(tid) if id(r) not in mine]

        self.spool.settle(row, written, revisions, held)

    def _spool_dropped(self) -> None:
        """Traces assembly dropped with only log records: their spooled records are done,
        and so are their waiters (called here, outside the lock)."""
        asm = self._assembler
        with self._lock:
            dropped, asm.dropped_traces = asm.dropped_traces, []
            waiters, asm.dropped_waiters = asm.dropped_waiters, []
        for waiter in waiters:
            waiter()
        if dropped and self.spool is not None:
            try:
                self.spool.evaluated(dropped)
            except (sqlite3.Error, OSError):  # rows stay (replayed, dropped again): count
                log.exception("spool: deleting dropped log records failed")
                self.metrics.spool.failed("delete")

    # --- release and evaluation (worker thread, or tests by hand) ------------------------------

    def tick(self, now: float | None = None) -> int:
        """Release due traces onto the evaluation queue; returns how many."""
        with self._lock:
            released = self._assembler.tick(self.clock() if now is None else now)
            self._enqueue(released)
            self._update_gauges()
        self._spool_dropped()
        return len(released)

    def _enqueue(self, traces: list[Trace]) -> None:  # lock held
        now = self.clock()
        for t in traces:
            self._queue.append(Job(t, now))
            self._queued_spans += len(t.spans)
            self._queued_bytes += sum(s.nbytes for s in t.spans)
            self.metrics.trace_released(t.status, t.release_reason, len(t.spans))
        if traces:
            self._wake.set()

    def process(self, max_traces: int | None = None) -> int:
        """Hand queued traces to the evaluation stage; returns how many. In process (the
        default stage) they are evaluated, stored and exported before this returns."""
        done = 0
        while max_traces is None or done < max_traces:
            with self._lock:
                n = min(self.batch_size, len(self._queue))
                batch = [self._queue.popleft() for _ in range(n)]
            if not batch:
                break
            self.stage.run(batch, self._finish)
            done += len(batch)
        return done

    def _finish(self, jobs: list[Job], outcomes: list[Outcome]) -> None:
        """After the store committed ``jobs``: spool, metrics, sinks, then the waiters."""
        with self._finish_lock:
            self._finish_locked(jobs, outcomes)

    def _finish_locked(self, jobs: list[Job], outcomes: list[Outcome]) -> None:
        if self.spool is not None:
            try:  # after the commit: a crash in between replays and supersedes
                self.spool.evaluated((j.trace.trace_id, j.trace.revision) for j in jobs)
            except (sqlite3.Error, OSError):  # rows stay (replayed at start): count, go on
                log.exception("spool: deleting evaluated traces failed")
                self.metrics.spool.failed("delete")
        now = self.clock()
        for job, out in zip(jobs, outcomes, strict=True):
            trace, ev = job.trace, out.evaluation
            if out.failure is not None:
                self.metrics.evaluation_failed("evaluate", out.failure)
            self.metrics.evaluation_stored(ev, now - job.released_at, out.superseded)
            for sink in self.sinks:
                try:
                    sink.export(trace, ev)
                except Exception:
                    log.exception("sink %s failed on trace %s", type(sink).__name__,
                                  trace.trace_id)
                    self.metrics.sink_dropped(type(sink).__name__, "exception", 1)
        # Only now is the work durable: release the pending budget and tell the waiters.
        with self._lock:
            self._queued_spans -= sum(len(j.trace.spans) for j in jobs)
            self._queued_bytes -= sum(s.nbytes for j in jobs for s in j.trace.spans)
            self._update_gauges()
        for job in jobs:
            for waiter in job.trace.waiters:
                waiter()

    def _update_gauges(self) -> None:  # lock held
        asm = self._assembler
        self.metrics.open_traces(len(asm))
        self.metrics.pending_spans(asm.open_spans + self._queued_spans)
        self.metrics.pending_log_records(asm.open_logs)
        for reason, n in asm.dropped_logs.items():
            self.metrics.log_records_dropped(reason, n)
        asm.dropped_logs.clear()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="otel-eval-engine", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._closing:
                self.tick()
                self.process()
                self._wake.wait(self.tick_interval_s)
                self._wake.clear()
        except BaseException as e:  # a dead worker must be loud: health turns red
            log.exception("engine worker died")
            self.failure = e

    @property
    def healthy(self) -> bool:
        return self.failure is None and self.stage.healthy and (
            self._thread is None or self._thread.is_alive() or self._closing)

    def shutdown(self, deadline_s: float = 30.0) -> None:
        """Stop taking spans, release every open trace, evaluate and store them all (with
        worker processes: wait for them to store what they were given, within the deadline;
        what they could not store stays in the spool)."""
        end = time.monotonic() + deadline_s
        with self._lock:
            self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(deadline_s)
        with self._lock:
            self._enqueue(self._assembler.release_all(self.clock(), "shutdown"))
        self._spool_dropped()
        self.process()
        if not self.stage.drain(max(0.0, end - time.monotonic())):
            log.error("evaluation workers did not store every trace before the deadline; "
                      "what they hold is replayed from the spool at the next start")
