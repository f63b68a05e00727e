"""The engine: receivers hand it spans and log records; it assembles, evaluates, stores and
exports, through three parts with one owner each:

    submit(items, signal) -> AdmissionControl.refusal (bounds: take all or refuse with a
        reason) -> Durability.append (spool the request) -> TraceAssembler.add / add_logs
        -> Durability.settle
    tick(now) -> assembler releases traces -> Finishing.enqueue (pending until finished)
        -> process: EvaluationStage.run (the stage the engine was given, ``evaluate.handoff``:
        evaluate and store, here or in worker processes) -> Finishing.finish: metrics ->
        sinks (events, forward, judge) -> once the delivering sinks delivered the trace:
        Durability.evaluated -> waiters (Kafka offsets)
        | the store refused the batch: back in the queue; StoreHealth: back-off, admission
        refuses (store_unavailable) until a write goes through, or gives up (``failure``)

Traces and logs take one path, the signal (``"traces"`` or ``"logs"``) being data: what
differs is which assembler call takes them and which bounds apply (``admission``). Once
``submit`` has taken an item it is never lost: ``shutdown`` (SIGTERM) evaluates and stores
what was released and the runs that have ended, and leaves a run still going open and
unjudged (a stop is no verdict: no evaluation, metric or sink call), its requests in the
spool and its Kafka offsets uncommitted, for the next start to resume with its timers (a
replay hands assembly the time each request was received at). With a ``Spool`` the request's
bytes are written before
``submit`` returns and leave once their traces are stored, so a crash (kill -9) loses nothing
acknowledged either: ``replay`` submits them again at start (``replayed=True``: no admission,
no new spool row). Log records carry the content of spans.

Threads: receivers call ``submit`` from their own threads; the engine's lock serializes
them with the worker thread (``start``) that ticks the assembler and hands released traces
to the evaluation stage. In process (``InProcess``) it evaluates them itself; with
``app.workers.WorkerPool`` the pool's threads finish them as the worker processes store them.
Tests call ``tick(now)`` and ``process()`` by hand instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from otel_eval.assemble.admission import Admission, AdmissionControl, Signal
from otel_eval.assemble.assembler import TraceAssembler
from otel_eval.assemble.config import AssemblyConfig
from otel_eval.assemble.durability import Durability, Request
from otel_eval.assemble.finishing import Finishing, Sink
from otel_eval.assemble.spool import Spool
from otel_eval.assemble.store_health import StoreGaveUp, StoreHealth
from otel_eval.base.backoff import Backoff
from otel_eval.base.loglimit import limited_line
from otel_eval.base.model import LogEvent, Span
from otel_eval.decode.otlp_logs import HeldRecord, hold
from otel_eval.evaluate.handoff import EvaluationStage
from otel_eval.telemetry.metrics import Metrics

__all__ = ["Admission", "Engine", "Sink"]

log = logging.getLogger(__name__)


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
    def __init__(self, stage: EvaluationStage, store_health: StoreHealth, metrics: Metrics, *,
                 assembly: AssemblyConfig, sinks: Sequence[Sink] = (),
                 clock: Callable[[], float] = time.monotonic,
                 tick_interval_s: float = 0.25, batch_size: int = 256,
                 spool: Spool | None = None,
                 stored: Callable[[str], tuple[Mapping[str, Any], int] | None] | None = None
                 ) -> None:
        """``stage``: where released traces are evaluated and stored (``evaluate.stage``'s
        ``InProcess`` in this process, or worker processes); ``store_health``: whether the
        store takes writes, on the same ``clock`` (a refused batch is kept, retried, and
        throttles the receivers); ``stored``: a stored record and when it was evaluated, by
        trace id (the store's ``get_stamped``: a replay goes to the delivering sinks again,
        with the evaluation it holds, timed as it was: ``Finishing``)."""
        self.config = assembly
        self.metrics = metrics
        self.clock = clock
        self.tick_interval_s = tick_interval_s
        self.spool = spool
        self._stored = stored
        self._lock = threading.Lock()  # serializes the assembler and the parts below
        # pass-through (the sink named "forward": outputs.forward.SINK) forwards what
        # assembly takes but cannot evaluate (a straggler of a run it no longer re-opens, the
        # spans past max_spans_per_trace): the user's span is never swallowed
        self._assembler = TraceAssembler(self.config, pass_through=any(
            getattr(s, "name", "") == "forward" for s in sinks))
        self.durability = Durability(spool, self._assembler, metrics, clock=clock,
                                     backoff=Backoff(store_health.initial_interval_s,
                                                     store_health.max_interval_s))
        self.store_health = store_health
        self.finishing = Finishing(stage, self.durability, metrics, sinks=sinks, clock=clock,
                                   batch_size=batch_size, lock=self._lock,
                                   gauges=self._update_gauges, health=store_health,
                                   stored=stored)
        self.admission = AdmissionControl(self.config, self._assembler, self.finishing,
                                          self.durability, clock, self.store_health)
        self._thread: threading.Thread | None = None
        self._last_pass_done = False  # the runs ended at shutdown released and processed
        self._left_open = 0  # runs still going at shutdown, left unjudged
        self.failure: BaseException | None = None
        # The spool is being replayed: nothing is released until all of it is back (a trace
        # past its timers would otherwise go out with its first request only).
        self._replaying = False
        # shutdown returned: what this process will store is stored; the waiters of traces
        # left open are never called here (the Kafka consumer does not wait for them)
        self.stopped = False

    @property
    def stage(self) -> EvaluationStage:
        return self.finishing.stage

    @stage.setter
    def stage(self, stage: EvaluationStage) -> None:  # the pool could not start: in process
        self.finishing.stage = stage

    @property
    def sinks(self) -> list[Sink]:
        return self.finishing.sinks

    # --- ingest (any thread) -----------------------------------------------------------------

    def pending_spans(self) -> int:
        with self._lock:
            return self._assembler.open_spans + self.finishing.queued_spans

    def open_traces(self) -> int:
        with self._lock:
            return len(self._assembler)

    def submit(self, items: Sequence[Span] | Sequence[LogEvent] | Sequence[HeldRecord],
               source: str = "otlp",
               on_stored: Callable[[], None] | None = None, *, signal: Signal = "traces",
               request: Request | None = None, replayed: bool = False,
               sender: str = "", age_s: float = 0.0) -> Admission:
        """Take spans (``signal="traces"``) or GenAI event records (``"logs"``, held for
        their span's trace), or refuse them all (``throttled``); see the module docstring.
        ``request``: the protobuf bytes they were decoded from, spooled before this returns
        (when there is a spool); ``replayed``: items from the spool at start, received
        ``age_s`` seconds ago (assembly's timers count from then); ``sender``: the
        authenticated sender's token name (re-opening needs the same). ``on_stored``: called
        once every trace that took an item is stored (or, for records no span joined,
        dropped and counted as ``no_spans``), and every released trace not stored yet that
        refused items as its own (``duplicate_span``, ``late``: a Kafka record delivered
        again after a rebalance); either way the items are done with (Kafka commits their
        offsets then). Records are held as their bytes (``HeldRecord``; one
        given decoded is encoded here) until their trace is released."""
        taken: Sequence[Span] | Sequence[HeldRecord] = (
            [hold(r) for r in items] if signal == "logs"  # type: ignore[arg-type]
            else items)  # type: ignore[assignment]
        adm = Admission()
        barrier = _Barrier(on_stored) if on_stored is not None else None
        on_trace = (lambda _tid: barrier.done) if barrier is not None else None
        raw = self.durability.request_bytes(request, taken, replayed)
        with self._lock:
            shed: set[str] = set()
            if not replayed:
                taken, shed = self._within_shares(taken, adm, raw, sender)
                if shed and raw is not None:  # the spool holds only what was taken
                    raw = self.durability.taken_only(signal, taken)
            trace_ids = {item.trace_id for item in taken}
            adm.throttled = None if replayed else self.admission.refusal(
                signal, taken, self.durability.spool_bytes(raw, taken, sender),
                self.durability.reopened_bytes(raw, taken, sender))
            row = None if raw is None or adm.throttled else self.durability.append(
                raw, trace_ids, signal, taken, sender, refused=shed)
            if adm.throttled is None and raw is not None and row is None:
                adm.throttled = "spool_error"
            if adm.throttled is not None:
                return adm
            res = self._add(signal, taken, on_trace, source, sender, self.clock() - age_s)
            if row is not None:
                self.durability.settle(row, trace_ids, res.traces, taken,
                                       foreign=res.foreign)
            waits = len(res.traces)
            if barrier is not None:  # items a released, unstored trace holds: wait for it
                waits += self.finishing.wait_for(res.known - res.traces, barrier.done)
            self._update_gauges()
        if barrier is not None:
            barrier.arm(waits)
        adm.accepted, adm.rejected = res.accepted, adm.rejected + res.rejected
        if res.reopened:  # log records re-open a trace without spans of their own
            self.metrics.ingest.trace_reopened(res.reopened, res.late_spans,
                                               res.carried_spans)
        return adm

    def _within_shares(self, spans: Sequence[Span] | Sequence[HeldRecord], adm: Admission,
                       raw: bytes | None = None, sender: str = ""
                       ) -> tuple[Sequence[Span] | Sequence[HeldRecord], set[str]]:
        """The spans (or log records) of a request but for the new traces a service past
        its share would open (``AdmissionControl.over_share``: whole traces, never some of
        a trace's spans), those counted in ``adm.rejected``; and the traces refused (the
        spool keeps them: their runs cut when they open, after a restart too; the request is
        then spooled as taken, ``Durability.taken_only``: a replay takes every item of a
        trace its row names, and the rejected ones would fill the spool while the kept runs
        stay open). Lock held."""
        shed = self.admission.over_share(
            spans, self.durability.reopened_bytes(raw, spans, sender))
        if not shed:
            return spans, set()
        kept: Any = [s for s in spans if s.trace_id not in shed]
        adm.rejected["service_share"] = len(spans) - len(kept)
        self._assembler.cut(shed)  # the runs later opened for them miss these spans
        return kept, set(shed)

    def _add(self, signal: Signal, items: Sequence[Any], on_trace: Any, source: str,
             sender: str, at: float) -> Any:  # lock held
        add = self._assembler.add_logs if signal == "logs" else self._assembler.add
        return add(items, at, on_trace=on_trace, source=source, sender=sender)

    def replay(self) -> tuple[int, int, int] | None:
        """What the spool holds, submitted again (before the receivers open), with the times
        it was received at; ``tick`` releases nothing meanwhile. Then the runs that missed
        spans refused for a share are cut again, and the idle clocks of the runs handed back
        are resumed (``TraceAssembler.resume``), each late if its run is
        stored unless the spool kept a stored revision's spans with it."""
        with self._lock:
            self._replaying = True
        try:
            return self.durability.replay(self.submit)
        finally:
            with self._lock:
                self._assembler.cut(self.durability.cut())  # as they were: missing spans
                self._assembler.resume(self.clock(), self.durability.carried())
                self._replaying = False

    def hand_over(self, trace_ids: Collection[str]) -> int:
        """A Kafka partition was revoked: forget its runs still open, unjudged (their records
        are uncommitted; the partition's next owner replays them whole). Returns how many."""
        with self._lock:
            before = self._assembler.open_spans
            gone = self._assembler.hand_over(trace_ids, "kafka")
            self.metrics.ingest.spans_handed_over(before - self._assembler.open_spans)
            self._update_gauges()
        if gone:
            log.info("kafka: %d run(s) in flight handed over unjudged with their partition",
                     len(gone))
        return len(gone)

    def open_runs(self, trace_ids: Collection[str]) -> set[str]:
        """Of ``trace_ids``, the runs assembly holds open (not released): a Kafka record of
        one is finished only once more of its run is read, so the consumer does not count it
        against ``kafka.max_inflight_records`` (this engine's own bounds hold such runs)."""
        with self._lock:
            return {t for t in trace_ids if self._assembler.open_trace(t) is not None}

    def _dropped(self) -> None:
        """Traces assembly dropped with only log records: their spooled records are done,
        and so are their waiters (called here, outside the lock)."""
        asm = self._assembler
        with self._lock:
            dropped, asm.dropped_traces = asm.dropped_traces, []
            waiters, asm.dropped_waiters = asm.dropped_waiters, []
            counts, asm.dropped_logs_only = asm.dropped_logs_only, []
        for trace_id, n in counts:
            self.metrics.ingest.log_records_dropped(self._logs_only_reason(trace_id), n)
        for waiter in waiters:
            waiter()
        self.durability.dropped(dropped)
        with self._lock:
            asm.dropped_deleted(dropped)

    def _logs_only_reason(self, trace_id: str) -> str:
        """Why records no span joined are dropped: ``late`` when the store holds their run
        (stored before they came: past the re-open window, or a Kafka logs record replayed
        after a restart without its spans' records, done), else ``no_spans``."""
        if self._stored is None:
            return "no_spans"
        try:
            return "late" if self._stored(trace_id) is not None else "no_spans"
        except Exception as e:  # the store unreadable: the records are dropped all the same
            limited_line(self.finishing.read_log, log, "reading the stored run of trace %s "
                         "failed (%s)", trace_id, type(e).__name__, counted="failed store reads")
            return "no_spans"

    # --- release and evaluation (worker thread, or tests by hand) ------------------------------

    def tick(self, now: float | None = None) -> int:
        """Release due traces onto the evaluation queue; returns how many."""
        with self._lock:
            released = [] if self._replaying else self._assembler.tick(
                self.clock() if now is None else now)
            self.finishing.enqueue(released)
            self._update_gauges()
        self._dropped()
        return len(released)

    def process(self, max_traces: int | None = None) -> int:
        """Hand queued traces to the evaluation stage; returns how many. In process (the
        default stage) they are evaluated, stored and exported before this returns. Then
        the spool's rows that stored evaluations left half done are thinned, here (off the
        lock), never on a sink's sender thread (``Durability.evaluated``)."""
        n = self.finishing.process(max_traces)
        self.durability.thin()
        return n

    def _update_gauges(self) -> None:  # lock held
        asm = self._assembler
        self.metrics.ingest.open_traces(len(asm))
        self.metrics.ingest.pending_spans(asm.open_spans + self.finishing.queued_spans)
        self.metrics.ingest.pending_log_records(asm.open_logs + self.finishing.queued_logs)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="otel-eval-engine", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wake = self.finishing.wake
        try:
            while not self.admission.closing:
                self.tick()
                self.process()
                if self.store_health.gave_up(self.clock()):  # said by serve, in one line
                    self.failure = StoreGaveUp(self.store_health.give_up_line())
                    return
                wake.wait(self.tick_interval_s)
                wake.clear()
            # here, not in shutdown's thread: a store call that blocks (another client's
            # lock, no lock timeout) is then cut by shutdown's deadline, not waited for
            self._last_pass()
        except BaseException as e:  # a dead worker must be loud: health turns red
            log.exception("engine worker died")
            self.failure = e

    def _last_pass(self) -> None:
        """At shutdown: release the runs that have ended, and evaluate and store them with
        what was released before (a run still going stays open: a stop is no verdict)."""
        with self._lock:
            self.finishing.enqueue(self._assembler.release_ended(self.clock(), "shutdown"))
            self._left_open = len(self._assembler)
        self._dropped()
        self.finishing.process()  # no thinning: the rows stay for the next start anyway
        self._last_pass_done = True

    @property
    def healthy(self) -> bool:
        return self.failure is None and self.stage.healthy and (
            self._thread is None or self._thread.is_alive() or self.admission.closing)

    def shutdown(self, deadline_s: float = 30.0) -> None:
        """Stop taking spans; evaluate and store what was released, and the runs that have
        ended (with worker processes: wait for them to store what they were given, within
        the deadline; what they could not store stays in the spool). A run still going is
        left open and unjudged (a stop is no verdict): its requests stay in the spool (its
        Kafka offsets uncommitted), and the next start resumes it with its timers."""
        end = time.monotonic() + deadline_s
        with self._lock:
            self.admission.closing = True
        self.finishing.wake.set()
        if self._thread is not None:
            self._thread.join(deadline_s)
            if self._thread.is_alive():  # blocked in a store call (another client's lock)
                log.error("the engine is still in a store call at the shutdown deadline; "
                          "what it holds stays in the spool and is stored at the next start")
                return
        if not self._last_pass_done:  # no worker thread (driven by hand), or it ended early
            self._last_pass()
        if left := self._left_open:
            log.info("%d run(s) in flight left unjudged: %s", left,
                     "resumed from the spool at the next start" if self.spool is not None
                     else "no spool: spans received over OTLP are lost (Kafka replays its own)")
        if not self.stage.drain(max(0.0, end - time.monotonic())):
            log.error("evaluation workers did not store every trace before the deadline; "
                      "what they hold is replayed from the spool at the next start")
        if kept := self.finishing.queued_traces():
            log.warning("%d trace(s) not stored: %s; they stay in the spool and are stored at "
                        "the next start", kept, self.store_health.describe() or "shutting down")
        self.stopped = True
