"""What runs in each evaluation worker process, and the compact form traces travel in.

    pool (main process) --conn: ("batch", id, [packed traces], retried)-->  run()
        -> unpack -> stage.evaluate_and_store (its own Evaluator and Store connection)
        <--conn: ("done", id, [Outcome])--

The process is a fresh interpreter started by ``workers.WorkerPool`` (``worker_process.ENTRY``: the
parent's ``sys.path``, then the ``WorkerSpec``, arrive on the pipe first). It imports only what
evaluating and storing needs: the spec carries the ``EvaluatorSections`` of the config, not
the top-level ``Config`` (YAML, the admin API and every stage's settings).

Promises: a batch is answered only after its evaluations are committed to the store; the
process starts by opening the store and answering ("ready", pid) (or ("error", why)), and
exits when told to (``None``) or when the main process goes away (the pipe hung up, seen at
once, in the middle of a batch too: ``_exit_with_parent``; the main process holds every
trace until it is answered, and the spool holds what it acknowledged).
SIGINT and SIGTERM are ignored here: the main process drains its workers on shutdown.

Traces travel as tuples of plain values (spans with their lazily decoded attributes as the
protobuf bytes they arrived in): pickling ``Span`` objects costs about twice as much.
Evaluations travel as pickles whose dataclasses are rebuilt by their constructors from a
tuple of field values (``ForkingPickler.register``, multiprocessing's own pickler only): a
slotted dataclass's default ``__getstate__``/``__setstate__`` run per field in Python and
cost 2-3x as much (~260 -> ~100 us per 11-step evaluation, there and back).
With ``lean`` (no sink reads the evaluation), the returned trajectory keeps only what the
metrics read: its message text, tool arguments and results are left behind.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import operator
import os
import select
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any

from otel_eval.base.model import LogEvent, Span, SpanEvent, Trace
from otel_eval.base.printable import configure_logging
from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, ToolCall, Trajectory
from otel_eval.evaluate.config import EvaluatorSettings, TrajectoryConfig
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.store.base import SessionLimits

if TYPE_CHECKING:
    from otel_eval.evaluate.detectors import ReferenceSet
    from otel_eval.evaluate.predict import Model

log = logging.getLogger(__name__)

PackedSpan = tuple[Any, ...]
PackedTrace = tuple[str, str, str, int, str, list[PackedSpan], list[Any], str, bool]


@dataclass(frozen=True)
class EvaluatorSections:
    """The sections of the config an ``Evaluator`` reads (``EvaluatorSettings``)."""

    trajectory: TrajectoryConfig
    detectors: DetectorsConfig
    prediction: PredictionConfig

    @classmethod
    def of(cls, config: EvaluatorSettings) -> EvaluatorSections:
        return cls(config.trajectory, config.detectors, config.prediction)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs to start (pickled to it once)."""

    config: EvaluatorSections
    store_target: str  # the store it opens its own connection to (file path or URL)
    # the references the serving process loaded, handed over as they are: a worker started
    # later (a restart after a crash) matches against them, never against what the
    # references file holds by then (a golden set edited in place since serve started)
    references: ReferenceSet
    lean: bool  # return lean evaluations (no sink reads them)
    log_level: int
    # Test seam, off (None) outside tests: a worker handed a trace with a span of this name
    # kills itself with SIGKILL before evaluating it, as an out-of-memory kill would (the
    # poison-isolation tests use it; nothing in serve's config sets it).
    poison_span_name: str | None = None
    # Test seam as poison_span_name: a worker handed such a span hangs (alive, never answers).
    hang_span_name: str | None = None
    # the limits of its store session (PostgreSQL statement_timeout, lock_timeout)
    store_session: SessionLimits = field(default_factory=SessionLimits)
    # the success model the serving process loaded (None: no prediction), handed over as it
    # is: a worker started later (a restart after a crash) predicts with it, never with what
    # prediction.model_path holds by then (a model retrained in place since serve started)
    model: Model | None = None


def _by_constructor(cls: type) -> Callable[[Any], tuple[type, tuple[Any, ...]]]:
    names = [f.name for f in dataclasses.fields(cls)]
    get = operator.attrgetter(*names)
    return lambda obj: (cls, get(obj))


for _cls in (Evaluation, Trajectory, Step, ToolCall, Finding, Verdict, LogEvent, SpanEvent):
    ForkingPickler.register(_cls, _by_constructor(_cls))


def pack_span(s: Span) -> PackedSpan:
    return (s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns, s.kind,
            s.status, s.status_message, s.resource, s.scope, s._attributes, s._events,
            s._lazy, s.nbytes, s.parent_remote)


def unpack_span(p: PackedSpan) -> Span:
    (tid, sid, pid, name, start, end, kind, status, message, resource, scope, attrs, events,
     lazy, nbytes, remote) = p
    return Span(tid, sid, pid, name, start, end, kind=kind, status=status,
                status_message=message, attributes=attrs, events=events, resource=resource,
                scope=scope, lazy=lazy, nbytes=nbytes, parent_remote=remote)


def pack_trace(t: Trace) -> PackedTrace:
    """Everything ``evaluate_and_store`` reads (``late_if_stored`` too: what decides a
    straggler of a row stored before span ids were kept); not the waiters (callbacks stay
    in the main process) nor the spans only passed on (never evaluated)."""
    return (t.trace_id, t.status, t.source, t.revision, t.release_reason,
            [pack_span(s) for s in t.spans], t.logs, t.digest, t.late_if_stored)


def unpack_trace(p: PackedTrace) -> Trace:
    tid, status, source, revision, reason, spans, logs, digest, late = p
    return Trace(tid, [unpack_span(s) for s in spans], status,  # type: ignore[arg-type]
                 source=source, revision=revision, release_reason=reason, logs=logs,
                 digest=digest, late_if_stored=late)


def lean(ev: Evaluation) -> Evaluation:
    """``ev`` without what only sinks read (message text, tool arguments and results)."""
    t = ev.trajectory
    t.input = t.output = t.task = t.answer = None
    t.input_messages = t.output_messages = None
    t.tools, t.root_attributes = {}, {}
    for s in t.steps:
        s.arguments = s.result = s.input_text = s.output_text = s.reply = None
        s.prompt = s.answer = None
        s.tool_calls = []
    ev.bounded = None  # the stored object as cut (up to trajectory.max_result_bytes)
    ev.encoded = None  # its text as stored
    ev.span_ids = None  # stored with it; only the store reads it
    return ev


def run(conn: Connection, spec: WorkerSpec, index: int) -> None:
    """The worker process's entry point (``worker_process.ENTRY`` calls it), until told to stop or
    the pipe breaks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    configure_logging(spec.log_level,
                      f"%(asctime)s %(levelname)s %(name)s[worker {index}]: %(message)s")
    try:
        from otel_eval.evaluate.evaluator import Evaluator
        from otel_eval.store import open_store
        evaluator = Evaluator(spec.config, references=spec.references, model=spec.model)
        store = open_store(spec.store_target, spec.store_session)
    except Exception as e:  # said to the pool, which reports it and does not use us
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    # as serve's main process does (cli._tune_gc): per-trace objects are acyclic
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    conn.send(("ready", os.getpid()))
    threading.Thread(target=_exit_with_parent, args=(conn.fileno(),), daemon=True,
                     name="otel-eval-worker-lifeline").start()
    try:
        _serve(conn, spec, evaluator, store)
    finally:
        store.close()


def _exit_with_parent(fd: int) -> None:
    """Exit as soon as the main process is gone (its end of the pipe closed), even in the
    middle of a batch: the loop below sees EOF only between two, so a worker busy or hung on
    a trace outlived a killed serve (ignoring SIGTERM), writing the store the next serve
    owns. Nothing is lost: no one is left to answer, and the spool holds what serve
    acknowledged. Watches for the peer's hang-up only (POLLRDHUP), never reads the pipe."""
    rdhup = getattr(select, "POLLRDHUP", 0)
    if not rdhup:  # not Linux: EOF between batches only
        return
    poller = select.poll()
    poller.register(fd, rdhup)
    while True:
        for _, events in poller.poll():
            if events & select.POLLNVAL:  # closed here: this process is exiting anyway
                return
            if events & (rdhup | select.POLLHUP | select.POLLERR):
                os.write(2, b"otel-eval evaluation worker: the main process is gone; exiting\n")
                os._exit(1)


def _serve(conn: Connection, spec: WorkerSpec, evaluator: Any, store: Any) -> None:
    from otel_eval.evaluate.stage import evaluate_and_store
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the main process is gone: nothing to answer to
            return
        if msg is None:
            return
        _, msg_id, packed, retried = msg
        traces = [unpack_trace(p) for p in packed]
        if spec.poison_span_name is not None and any(
                sp.name == spec.poison_span_name for t in traces for sp in t.spans):
            os.kill(os.getpid(), signal.SIGKILL)
        if spec.hang_span_name is not None and any(
                sp.name == spec.hang_span_name for t in traces for sp in t.spans):
            threading.Event().wait()
        outcomes = evaluate_and_store(evaluator, store, traces, retried)
        if spec.lean:
            for out in outcomes:
                if out.evaluation is not None:
                    lean(out.evaluation)
        try:
            conn.send(("done", msg_id, outcomes))
        except (BrokenPipeError, OSError):
            return
