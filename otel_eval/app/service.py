"""``otel-eval serve``: wires the stages and owns their lifecycle.

    OTLP/gRPC :4317 ─┐
    OTLP/HTTP :4318 ─┼─> Ingest -> Engine [spool -> assembly -> evaluate -> store] -> sinks
    Kafka consumer  ─┘                      (evaluate -> store: in N worker processes with
                                            evaluation.workers > 1, by trace id)
                                           sinks: judge, events, forward, Kafka results topic
    admin :8888 <- /metrics, /healthz, /readyz, /v1/evaluations, /v1/feedback, /v1/issues

With ``kafka.publish`` the receivers' Ingest feeds a ``PublishingEngine`` (records to the
topic) instead. The async stages (judge, Kafka) share one event loop thread (``aio``).

Lifecycle (``otel_eval.app.lifecycle``): every long-running part is a ``Component`` with
``start()`` and ``shutdown(deadline_s)``. ``Service()`` only constructs them (no file, socket
or thread is opened); ``_lifecycle`` lists them in start order (instance locks, store,
spool, event loop, admin, issues job, retention, sinks, Kafka, engine, listeners bound, spool
replay, receivers serving, readiness) and shutdown runs the list backwards with what is left
of one deadline (SIGTERM / SIGINT; a second signal exits at once): receivers stop accepting,
the engine evaluates what was released and the runs that ended and leaves the runs still
going unjudged in the spool (a stop is no verdict; the next start resumes them with their
timers), the Kafka consumer commits what got stored (not the records of those runs), the
judge drains before the events it writes are flushed, the store closes last. Nothing
acknowledged is lost; with the spool (default), not on kill -9 either (Kafka ingest: the topic
and its committed offsets play that part).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry

from otel_eval.app.admin import AdminApi, AdminServer
from otel_eval.app.config import Config, check_exposure
from otel_eval.app.lifecycle import Lifecycle, OnLoop, Step
from otel_eval.app.worker import EvaluatorSections, WorkerSpec
from otel_eval.app.workers import WorkerPool, available_cores
from otel_eval.assemble.engine import Engine, Sink
from otel_eval.assemble.spool import Spool
from otel_eval.assemble.store_health import StoreGaveUp, StoreHealth
from otel_eval.base.aio import LoopThread
from otel_eval.evaluate import calibration
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.feedback import Feedback
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.evaluate.stage import InProcess, store_failed
from otel_eval.receive.grpc import GrpcReceiver
from otel_eval.receive.http import HttpReceiver
from otel_eval.receive.ingest import Ingest
from otel_eval.store import is_postgresql_url, opened, store_at
from otel_eval.store.config import StoreConfig
from otel_eval.store.lock import InstanceLock
from otel_eval.store.retention import Retention
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass
class Options:
    """What the command line adds to the config file."""

    references_path: str | None = None


class Service:
    def __init__(self, config: Config, options: Options | None = None, *,
                 registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        check_exposure(config)
        self.config = config
        self.options = options or Options()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock
        self.metrics = Metrics(self.registry, prediction=config.prediction,
                               max_pairs=config.admin.metrics_max_pairs)
        # Constructed here, opened by the lifecycle (``start``): the locks first, then the
        # store and the spool; nothing here touches a file or a socket.
        self._locks = instance_locks(config.store)
        self.store = store_at(config.store.target)
        self.evaluator = Evaluator(config, references_path=self.options.references_path)
        kc = config.kafka
        needs_loop = config.judge.active or kc.enabled
        self.loop = LoopThread() if needs_loop else None  # started first, stopped last
        self.sinks: list[Any] = self._make_sinks()
        sc = config.store
        spool_file = sc.spool_file()
        self.spool = Spool(spool_file, sc.spool_max_bytes, self.metrics.spool,
                           fsync=sc.spool_fsync) if spool_file else None
        engine_sinks = [s for s in self.sinks if hasattr(s, "export")]
        self.pool = self._make_pool(lean=not engine_sinks)
        self.store_health = StoreHealth(
            self.store.location, initial_interval_s=sc.write_retry_initial_interval_s,
            max_interval_s=sc.write_retry_max_interval_s,
            max_elapsed_s=sc.write_retry_max_elapsed_s, clock=clock)
        stage = self.pool or InProcess(self.evaluator, self.store)
        self.engine = Engine(stage, self.store_health, self.metrics, assembly=config.assembly,
                             sinks=engine_sinks, clock=clock, spool=self.spool)
        self.consumer: Any = None
        self.publisher: Any = None
        submitter: Any = self.engine
        if kc.enabled and self.loop is not None:
            if kc.publish:
                from otel_eval.receive.kafka.frontend import PublishingEngine
                from otel_eval.receive.kafka.publisher import KafkaPublisher
                self.publisher = KafkaPublisher(kc, self.metrics.kafka)
                submitter = PublishingEngine(self.publisher, self.loop)
            else:
                from otel_eval.receive.kafka.consumer import KafkaConsumerStage
                self.consumer = KafkaConsumerStage(kc, self.engine, self.metrics.kafka)
        ingest = Ingest(submitter, self.metrics)
        self.issues = self._make_issues()
        self.retention = Retention(self.store, config.store.retention_days)
        self._feedback = Feedback(self.store, self.evaluator, self.metrics.prediction)
        rc = config.receiver
        self.grpc = GrpcReceiver(rc, ingest) if rc.grpc_endpoint else None
        self.http = HttpReceiver(rc, ingest) if rc.http_endpoint else None
        self.admin = AdminServer(config.admin.endpoint, AdminApi(
            registry=self.registry, query=self.store.query, get=self.store.get,
            feedback=self.feedback, healthy=lambda: self.healthy,
            ready=lambda: self._ready and not self.store_health.failing,
            unready=self._unready,
            issues=self.issues.latest_json if self.issues is not None else lambda: None,
            calibration=self.calibration,
            refused=self.metrics.request_refused,
            redact=Redactor(config.judge.redaction).redact,
            trace_url=config.admin.trace_url,
            connection_closed=lambda reason: self.metrics.connection_closed("admin", reason)),
            config.admin)
        self.metrics.calibration.serve_from(
            lambda: calibration.report(self.store, config.judge))
        self._ready = False
        self._stopped = threading.Event()
        self._lifecycle_: Lifecycle | None = None

    def calibration(self) -> dict[str, Any]:
        """GET /v1/calibration: the judge and the predictor against the recorded outcomes,
        published on the agreement gauges too."""
        found = calibration.report(self.store, self.config.judge)
        self.metrics.calibration.calibrated(found)
        return found

    def _make_sinks(self) -> list[Sink]:
        """Judge first: it drains before the events sink it writes to is flushed."""
        sinks: list[Sink] = []
        ec, jc, kc = self.config.export, self.config.judge, self.config.kafka
        events = None
        if ec.events_endpoint:
            from otel_eval.outputs.events import EvaluationEvents
            events = EvaluationEvents(ec, self.metrics)
        if jc.active and self.loop is not None:
            from otel_eval.evaluate.judge.stage import JudgeStage
            sinks.append(JudgeStage(jc, self.loop, self.store, self.metrics, events,
                                    cache_path=self.config.store.path))
        if events is not None:
            sinks.append(events)
        if ec.forward_endpoint:
            from otel_eval.outputs.forward import Forwarder
            sinks.append(Forwarder(ec, self.metrics))
        if kc.enabled and kc.results_topic and not kc.publish and self.loop is not None:
            from otel_eval.outputs.kafka import ResultsPublisher
            sinks.append(OnLoop(ResultsPublisher(kc, self.metrics.kafka), self.loop))
        return sinks

    def _make_pool(self, lean: bool) -> WorkerPool | None:
        """Worker processes for evaluation when more than one is asked for (0: per core)."""
        ec = self.config.evaluation
        n = ec.workers or available_cores()
        if n <= 1:
            return None
        spec = WorkerSpec(EvaluatorSections.of(self.config), self.config.store.target,
                          self.options.references_path, lean=lean,
                          log_level=logging.getLogger().getEffectiveLevel())
        evaluator, store = self.evaluator, self.store
        return WorkerPool(n, spec, self.metrics.workers,
                          lambda traces, e: store_failed(evaluator, store, traces, e),
                          max_inflight=ec.max_inflight_traces_per_worker,
                          max_attempts=ec.max_attempts,
                          start_timeout_s=ec.worker_start_timeout_s)

    def _start_pool(self) -> None:
        """Start the workers; when they cannot start, evaluate in this process instead."""
        assert self.pool is not None
        try:
            self.pool.start()
        except Exception:
            log.exception("evaluation workers could not start; evaluating in the serving "
                          "process")
            self.pool = None
            self.engine.stage = InProcess(self.evaluator, self.store)

    def _make_issues(self) -> Any:
        """The periodic issue clustering over the stored window (``issues.interval_s``)."""
        ic = self.config.issues
        if ic.interval_s <= 0:
            return None
        from otel_eval.evaluate.judge.namer import judge_namer
        from otel_eval.evaluate.judge.synthesizer import judge_synthesizer
        from otel_eval.outputs.issues.critiques import critique_fields
        from otel_eval.outputs.issues.grafana import GrafanaAnnotator
        from otel_eval.outputs.issues.job import IssuesJob
        grafana = GrafanaAnnotator(ic.grafana) if ic.grafana.url else None
        store = self.store
        return IssuesJob(ic, ic.store_path or self.config.store.target,
                         lambda since_ns: store.since(since_ns, keep=critique_fields),
                         self.registry,
                         annotator=grafana, namer=judge_namer(self.config.judge),
                         synthesizer=judge_synthesizer(self.config.judge))

    def _unready(self) -> str:
        """Why /readyz answers 503."""
        if store := self.store_health.describe():
            return store
        return "not serving (starting or shutting down)"

    @property
    def healthy(self) -> bool:
        consumer_failed = self.consumer is not None and self.consumer.failure is not None
        return self.engine.healthy and not consumer_failed

    # --- lifecycle ---------------------------------------------------------------------------

    def _lifecycle(self, worker: bool) -> Lifecycle:
        """Every long-running part in start order; shutdown runs it backwards. Stopping in
        reverse: receivers stop accepting; the engine stores what was released and the runs
        that ended, and leaves the others open, unjudged, in the spool (the Kafka consumer,
        stopped after it, then commits what got stored; the records of runs left open, and
        those it takes meanwhile, are refused or uncommitted and replayed later); the judge
        drains before the events it writes to are flushed; retention and the issues job stop;
        the admin endpoint answers until the end; the store and spool close last."""
        lc = Lifecycle()
        # one serve per store and spool, before either is opened (a second is refused here)
        lc.add("instance lock", Step(start=self._take_locks,
                                     shutdown=lambda _d: self._release_locks()))
        lc.add("store", Step(start=self._open_store, shutdown=lambda _d: self.store.close()))
        if self.spool is not None:
            spool = self.spool
            lc.add("spool", Step(start=self._open_spool, shutdown=lambda _d: spool.close()))
        if self.loop is not None:
            lc.add("event loop", self.loop)
        lc.add("admin", self.admin)
        # Stopped after the engine, the consumer and the sinks: an issues run in progress
        # must not eat the time they need to evaluate, commit and drain what they hold.
        if self.issues is not None:
            lc.add("issues job", self.issues, start=worker)
        if worker:
            lc.add("retention", self.retention)
        for sink in reversed(self.sinks):  # the judge (first sink) stops before the events
            lc.add(type(getattr(sink, "part", sink)).__name__, sink)
        if self.publisher is not None and self.loop is not None:
            lc.add("kafka publisher", OnLoop(self.publisher, self.loop))
        if self.consumer is not None and self.loop is not None:
            lc.add("kafka consumer", OnLoop(self.consumer, self.loop))
        if self.pool is not None:  # stopped after the engine drained into it
            lc.add("evaluation workers", Step(
                start=self._start_pool,
                shutdown=lambda d: self.pool.shutdown(d) if self.pool is not None else None))
        lc.add("engine", self.engine, start=worker)
        # Every listener bound before the spool is replayed: a serve that cannot have its ports
        # (another one holds them) must stop before it touches what it would replay.
        lc.add("listeners", Step(start=self._bind_listeners, shutdown=self._close_listeners))
        if self.spool is not None:  # before the receivers: replayed spans come first
            engine = self.engine

            def replay() -> None:
                engine.replay()

            lc.add("spool replay", Step(start=replay))
        for name, receiver in (("otlp grpc", self.grpc), ("otlp http", self.http)):
            if receiver is not None:
                lc.add(name, receiver)
        lc.add("readiness", Step(start=lambda: setattr(self, "_ready", True),
                                 shutdown=lambda _d: setattr(self, "_ready", False)))
        return lc

    def _bind_listeners(self) -> None:
        for receiver in (self.grpc, self.http):
            if receiver is not None:
                receiver.bind()

    def _close_listeners(self, deadline_s: float) -> None:
        """Bound but never served (a later step failed); a no-op after their own shutdown."""
        for receiver in (self.http, self.grpc):
            if receiver is not None:
                receiver.shutdown(deadline_s)

    def start(self, worker: bool = True) -> None:
        """``worker=False`` leaves ticking to the caller (tests drive ``engine.tick(now)``)."""
        self._lifecycle_ = self._lifecycle(worker)
        self._lifecycle_.start()
        log.info("otel-eval serving (store %s)", self.store.location)

    def shutdown(self, deadline_s: float = 30.0) -> None:
        """Stop accepting, evaluate everything taken, flush sinks within the deadline: every
        started part, last first, each with what is left of ``deadline_s``."""
        lifecycle, self._lifecycle_ = self._lifecycle_, None
        if self._stopped.is_set() and lifecycle is None:
            return
        if lifecycle is not None:  # else never started: the constructor opened nothing
            lifecycle.shutdown(deadline_s)
        self._stopped.set()
        log.info("otel-eval stopped")

    def _open_store(self) -> None:
        opened(self.store)  # a file that cannot be opened: StartupError naming it

    def _open_spool(self) -> None:
        assert self.spool is not None
        self.spool.open()

    def _take_locks(self) -> None:
        """All or none: a lock held by another serve releases those taken before it."""
        try:
            for lock in self._locks:
                lock.acquire()
        except BaseException:
            self._release_locks()
            raise

    def _release_locks(self) -> None:
        for lock in self._locks:
            lock.release()

    def apply_retention(self, now_ns: int | None = None) -> int:
        """``Retention.apply`` now: evaluations older than ``store.retention_days``."""
        return self.retention.apply(now_ns)

    def run_until_signal(self) -> int:
        """Serve until SIGTERM/SIGINT (exit code 0); a second signal forces an immediate
        exit. A stage that died (the engine's worker, the Kafka consumer, the store refusing
        writes past ``store.write_retry_max_elapsed_s``) stops serve with exit code 1 and one
        line on stderr saying why (a supervisor's ``Restart=on-failure`` restarts it)."""
        stop = threading.Event()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            if stop.is_set():
                log.warning("second signal: exiting without draining")
                raise SystemExit(1)
            log.info("signal %d: shutting down", signum)
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.start()
        failed = False
        while not stop.wait(1.0):
            if not self.healthy:
                failed = True
                if not isinstance(self.engine.failure, StoreGaveUp):
                    log.error("a stage died (engine worker or Kafka consumer); shutting down")
                break
        self.shutdown()
        if isinstance(self.engine.failure, StoreGaveUp):
            print(f"otel-eval: {self.engine.failure}", file=sys.stderr)
        return 1 if failed else 0

    # --- results API -------------------------------------------------------------------------

    def feedback(self, trace_id: str, outcome_value: object) -> dict[str, Any] | None:
        """``POST /v1/feedback``: ``Feedback.record`` (the outcome kept, the verdict
        re-judged)."""
        return self._feedback.record(trace_id, outcome_value)


def instance_locks(sc: StoreConfig) -> list[InstanceLock]:
    """The locks of the local files this serve owns (the SQLite store, the spool), not taken
    yet. A PostgreSQL store is shared by the fleet by design: only its spool is locked."""
    locks = []
    if not is_postgresql_url(sc.target) and sc.target != ":memory:":
        locks.append(InstanceLock(sc.target, "store"))
    if spool := sc.spool_file():
        locks.append(InstanceLock(spool, "spool"))
    return locks
