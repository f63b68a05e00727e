"""``otel-eval serve``: wires the stages and owns their lifecycle.

    OTLP/gRPC :4317 ─┐
    OTLP/HTTP :4318 ─┼─> Ingest -> Engine [spool -> assembly -> evaluate -> store] -> sinks
    Kafka consumer  ─┘                      (evaluate -> store: in N worker processes with
                                            evaluation.workers > 1, by trace id)
                                           sinks: judge, events, forward, Kafka results topic
    admin :8888 <- /metrics, /healthz, /readyz, /v1/evaluations, /v1/feedback, /v1/issues,
                   /v1/calibration, /v1/sessions
    store (sessions table) -> session job (idle sessions: claim, evaluate, complete once)
                              -> metrics, events

Each optional part (the sinks, the Kafka front end, the issues job) comes from the
``build(config, deps)`` next to its code, None when its config leaves it off; the service
iterates what they return. With ``kafka.publish`` the receivers' Ingest feeds a
``PublishingEngine`` (records to the topic) instead: a stateless front end, which starts
only what it uses (the receivers, the publisher, the admin endpoint): no spool (a request is
acknowledged once Kafka has it), no evaluation worker processes, sinks, session or issues
job, retention or engine thread (the workers consuming the topic evaluate), and no SQLite
file (its admin API reads an empty in-memory store; a PostgreSQL ``store.url``, the fleet's,
is read, and with ``kafka.results_topic`` the verdicts its feedback re-judges there are
published to the topic). The async stages (judge, Kafka) share one event loop thread (``aio``).

Lifecycle (``otel_eval.app.lifecycle``): every long-running part is a ``Component`` with
``start()`` and ``shutdown(deadline_s)``. ``Service()`` only constructs them (no file,
socket or thread is opened); ``_lifecycle`` lists them in start order (the judge's
configuration checked, instance locks, admin endpoint (probes and /metrics only, while the
store is opened and migrated), store, spool, event loop, admin API, issues job (stopped
here; its runs start after the sinks, so the judge that names new issues is up), retention,
sinks, session job, Kafka, engine, listeners bound, spool replay, receivers serving,
readiness) and shutdown runs the list backwards with what is left of one deadline (SIGTERM /
SIGINT; a second signal exits at once): receivers stop accepting, the engine evaluates what
was released and the runs that ended and leaves the runs still going unjudged in the spool
(a stop is no verdict; the next start resumes them with their timers), the Kafka consumer
commits what got stored (not the records of those runs), the session job stops before the
judge and events it feeds, the judge drains before the events it writes are flushed, the
store closes last. Nothing acknowledged is lost; with the spool (default), not on kill -9
either (Kafka ingest: the topic and its committed offsets play that part).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import FrameType
from typing import Any, cast

from prometheus_client import CollectorRegistry

from otel_eval.app.admin import AdminApi, AdminServer
from otel_eval.app.config import Config, check_exposure, named_agents
from otel_eval.app.lifecycle import ForcedExit, Lifecycle, Step
from otel_eval.app.worker import EvaluatorSections, WorkerSpec
from otel_eval.app.worker_process import available_cores
from otel_eval.app.workers import WorkerPool
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.spool import Spool
from otel_eval.assemble.store_health import StoreGaveUp, StoreHealth
from otel_eval.base.aio import LoopThread
from otel_eval.base.component import Live, OnLoop, SinkComponent
from otel_eval.base.configcheck import StartupError
from otel_eval.base.printable import printable
from otel_eval.evaluate import calibration, judge
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.feedback import Feedback
from otel_eval.evaluate.judge import namer as judge_naming
from otel_eval.evaluate.judge import synthesizer as judge_synthesis
from otel_eval.evaluate.judge.namer import JudgeCalls, judge_namer
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.evaluate.judge.synthesizer import judge_synthesizer
from otel_eval.evaluate.sessions.job import SessionJob, SessionJudging
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.evaluate.stage import InProcess, store_given_up
from otel_eval.outputs import events as outputs_events
from otel_eval.outputs import forward
from otel_eval.outputs import kafka as results
from otel_eval.outputs.deps import Deps, JudgedResults
from otel_eval.outputs.issues import job as issues_job
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.runs import no_runs
from otel_eval.outputs.issues.synthesis import REPLY_SCHEMA, check_reply
from otel_eval.receive import kafka as kafka_front
from otel_eval.receive.decoding import DecodeBudget
from otel_eval.receive.grpc import GrpcReceiver
from otel_eval.receive.http import HttpReceiver
from otel_eval.receive.ingest import Ingest
from otel_eval.store import is_postgresql_url, opened, store_at
from otel_eval.store.base import HISTORY_EVICTION_REASONS
from otel_eval.store.config import StoreConfig
from otel_eval.store.failures import WRITE_FAILURE_REASONS
from otel_eval.store.lock import InstanceLock
from otel_eval.store.retention import Retention
from otel_eval.telemetry.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass
class Options:
    """What the command line adds to the config file."""

    references_path: str | None = None


def build_sinks(config: Config, deps: Deps) -> list[SinkComponent]:
    """Every sink the config turns on, in the order each evaluation reaches them; the
    lifecycle stops them in reverse, so the judge drains before the events sink it writes to
    is flushed. A new sink: a module with ``build(config, deps)`` and one line here."""
    events = outputs_events.build(config.export, deps)
    published = results.build(config.kafka, deps)
    # the judge writes its judgements to the events and publishes the judged results again
    deps = replace(deps, events=events,
                   results=cast(JudgedResults, published) if published is not None else None)
    sinks = (judge.build(config.judge, deps, config.trajectory),
             events,
             forward.build(config.export, deps),
             published)
    return [sink for sink in sinks if sink is not None]


def issue_call_names(config: IssuesConfig) -> tuple[str, ...]:
    """The ``judge`` label values of the calls the issues job makes through the judge stage
    (declared at 0 with the stage's own: OtelEvalJudgeFailing sees their first failure)."""
    names = [judge_naming.NAME] if config.naming_max_calls > 0 else []
    if config.synthesis_max_issues > 0 and config.synthesis_max_calls > 0:
        names.append(judge_synthesis.NAME)
    return tuple(names)


class Service:
    def __init__(self, config: Config, options: Options | None = None, *,
                 registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        check_exposure(config)
        self.config = config
        self.options = options or Options()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock
        # ``serve --kafka-publish``: receivers that write to the topic, evaluating nothing
        self.front_end = config.kafka.enabled and config.kafka.publish
        self.metrics = Metrics(self.registry, prediction=config.prediction,
                               max_pairs=config.admin.metrics_max_pairs,
                               reserved_agents=named_agents(config),
                               metrics_expiration_s=config.admin.metrics_expiration_s,
                               clock=clock)
        # Constructed here, opened by the lifecycle (``start``): the locks first, then the
        # store and the spool; nothing here touches a file or a socket.
        self._locks = [] if self.front_end else instance_locks(
            config.store, journal=config.judge.active,
            catalogue=config.issues.store_path if config.issues.interval_s > 0 else "")
        self.store = store_at(self._store_target(), config.store.session)
        self.evaluator = Evaluator(config, references_path=self.options.references_path)
        # conversations for GET /v1/sessions: complete ones as the session job stored them,
        # open ones computed on read from their turns in the store
        self.sessions = SessionReader(self.store, config.sessions)
        needs_loop = config.judge.active or config.kafka.enabled
        self.loop = LoopThread() if needs_loop else None  # started first, stopped last
        deps = Deps(self.metrics, self.registry, self.store, config.store.path,
                    config.store.target, self.loop, store_session=config.store.session,
                    clock=clock)
        self.sinks = [] if self.front_end else build_sinks(config, deps)
        # a front end on the fleet's store records outcomes there (POST /v1/feedback): the
        # verdicts they re-judge go to the results topic from it (the workers publish the rest)
        self.feedback_topic = (results.build(config.kafka, deps, front_end=True)
                               if self.front_end and is_postgresql_url(config.store.target)
                               else None)
        # conversations completed once in the fleet, from the store's state (its own thread)
        self.session_job = SessionJob(
            self.store, config.sessions, self.metrics, predictor=self.evaluator.predictor,
            events=next((s for s in self.sinks
                         if isinstance(s, outputs_events.EvaluationEvents)), None),
            judging=next((s for s in self.sinks if isinstance(s, SessionJudging)), None),
            listening=False)  # until the receivers open: a restart is no silence of a
        # conversation, nor is the time it took to start (a migration, a spool replayed)
        self.spool = self._make_spool()
        self.pool = self._make_pool(lean=not self.sinks)
        self.store_health = self._make_store_health()
        stage = self.pool or InProcess(self.evaluator, self.store)
        self.engine = Engine(stage, self.store_health, self.metrics, assembly=config.assembly,
                             sinks=self.sinks, clock=clock, spool=self.spool,
                             stored=self.store.get_stamped)
        # what decoding holds at once, over every door: the receivers and the Kafka consumer
        decoding = DecodeBudget(config.receiver.max_decoding_bytes)
        self.kafka = kafka_front.build(config.kafka, deps, self.engine, decoding)
        jc = config.judge
        # new issues are named (and merged) through the judge stage's client: its budget, its
        # metrics
        lender = next((s for s in self.sinks if isinstance(s, JudgeCalls)), None)
        ask = lender.ask if lender is not None else None
        self.issues = None if self.front_end else issues_job.build(
            config.issues, deps, namer=lambda: judge_namer(jc, ask),
            synthesizer=lambda: judge_synthesizer(jc, REPLY_SCHEMA, check_reply, ask),
            redact=Redactor(jc.redaction).redact)  # titles are critiques' words
        if self.issues is not None and lender is not None:  # their calls are the stage's
            # (the client, which imports litellm, only where a judge is configured)
            from otel_eval.evaluate.judge.client import CALL_STATUSES
            self.metrics.judge.call_statuses(issue_call_names(config.issues), CALL_STATUSES)
        self.retention = Retention(self.store, config.store.retention_days)
        topic = next((s.part for s in [*self.sinks, self.feedback_topic]
                      if isinstance(s, OnLoop) and isinstance(s.part, results.ResultsPublisher)),
                     None)
        self._feedback = Feedback(self.store, self.evaluator, self.metrics.prediction,
                                  recorded=self.metrics.calibration.outcome_recorded,
                                  published=topic)
        # GET /v1/calibration, and the agreement gauges' source (refreshed on scrape)
        predictor = self.evaluator.predictor
        self.calibration = calibration.build(
            config.judge, deps, config.prediction.pass_threshold,
            predictor.model.label if predictor is not None else None,
            opened=lambda: self._opened)  # a scrape during a migration reads no store
        front = self.kafka.submitter if self.kafka is not None else None
        rc = config.receiver
        ingest = Ingest(front if front is not None else self.engine, self.metrics,
                        every_log_record=front is not None,
                        decoding=decoding)
        self.grpc = GrpcReceiver(rc, ingest) if rc.grpc_endpoint else None
        self.http = HttpReceiver(rc, ingest) if rc.http_endpoint else None
        self._opened = False  # the store and what the admin API reads: open
        self.admin = self._make_admin()
        self._ready = False
        self._stopped = threading.Event()
        self._lifecycle_: Lifecycle | None = None

    def _store_target(self) -> str:
        """Where the results live: a front end never writes any, so it creates no SQLite file
        (an in-memory store answers its admin API); a PostgreSQL store is the fleet's."""
        target = self.config.store.target
        return ":memory:" if self.front_end and not is_postgresql_url(target) else target

    def _make_spool(self) -> Spool | None:
        if self.front_end:  # acknowledged once Kafka acknowledged: the topic is the log
            return None
        sc = self.config.store
        spool_file = sc.spool_file()
        return Spool(spool_file, sc.spool_max_bytes, self.metrics.spool,
                     fsync=sc.spool_fsync,
                     max_refused=self.config.assembly.max_tombstones) if spool_file else None

    def _make_store_health(self) -> StoreHealth:
        sc = self.config.store
        # each refusal reason at 0 before the first (OtelEvalStoreRefusingWrites reads
        # increase()): declared here, where the store and the engine meet, since the engine
        # knows the store only by interface and telemetry sits below both
        self.metrics.evaluation.store_write_failure_reasons(WRITE_FAILURE_REASONS)
        self.metrics.evaluation.history_eviction_reasons(HISTORY_EVICTION_REASONS)
        return StoreHealth(
            self.store.location, initial_interval_s=sc.write_retry_initial_interval_s,
            max_interval_s=sc.write_retry_max_interval_s,
            max_elapsed_s=sc.write_retry_max_elapsed_s, clock=self.clock)

    def _make_admin(self) -> AdminServer:
        config = self.config
        return AdminServer(config.admin.endpoint, AdminApi(
            registry=self.registry, query=self.store.query, get=self.store.get,
            feedback=self.feedback, healthy=lambda: self.healthy,
            ready=lambda: (self._ready and not self.store_health.failing
                           and not self.engine.durability.refusing() and self.healthy),
            unready=self._unready,
            issues=self.issues.latest_json if self.issues is not None else lambda: None,
            issue_runs=self.issues.runs if self.issues is not None else no_runs,
            run_issues=self.issues.of_run if self.issues is not None else lambda _t: [],
            calibration=self.calibration,
            refused=self.metrics.ingest.request_refused,
            redact=Redactor(config.judge.redaction).redact,
            trace_url=config.admin.trace_url,
            connection_closed=lambda reason: self.metrics.ingest.connection_closed("admin",
                                                                                   reason),
            sessions=self.sessions.page, session=self.sessions.get,
            pass_threshold=config.prediction.pass_threshold,
            opened=lambda: self._opened),
            config.admin)

    def _make_pool(self, lean: bool) -> WorkerPool | None:
        """Worker processes for evaluation when more than one is asked for (0: per core);
        none with an in-memory store (``:memory:`` is a database of the process opening it:
        a worker's evaluations would be kept where the results API never reads)."""
        ec = self.config.evaluation
        n = ec.workers or available_cores()
        if n <= 1 or self.front_end:  # a front end evaluates nothing
            return None
        if self.config.store.target == ":memory:":
            log.info("store.path is :memory:: evaluating in the serving process "
                     "(evaluation.workers %d ignored)", ec.workers)
            return None
        spec = WorkerSpec(EvaluatorSections.of(self.config), self.config.store.target,
                          self.evaluator.detectors.references, lean=lean,
                          log_level=logging.getLogger().getEffectiveLevel(),
                          store_session=self.config.store.session,
                          model=(self.evaluator.predictor.model
                                 if self.evaluator.predictor is not None else None))
        evaluator, store = self.evaluator, self.store
        return WorkerPool(n, spec, self.metrics.workers,
                          lambda traces, e, since: store_given_up(evaluator, store,
                                                                   traces, e, since),
                          max_inflight=ec.max_inflight_traces_per_worker,
                          max_attempts=ec.max_attempts,
                          start_timeout_s=ec.worker_start_timeout_s,
                          timeout_s=ec.worker_timeout_s)

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

    def _unready(self) -> str:
        """Why /readyz answers 503."""
        if store := self.store_health.describe():
            return store
        if spool := self.engine.durability.refusing():
            return spool
        if dead := self._dead():
            return dead
        return "not serving (starting or shutting down)"

    def _dead(self) -> str | None:
        """The stage that died, as ``healthy`` sees it (serve stops on it: exit code 1)."""
        if self.kafka is not None and (e := self.kafka.failure()) is not None:
            return f"{self.kafka.name} died ({type(e).__name__})"
        if not self.engine.healthy:
            return "the engine died (its worker thread or the evaluation workers)"
        parts = [*self.sinks, *([self.feedback_topic] if self.feedback_topic else [])]
        sink = next((s.name for s in parts if isinstance(s, Live) and not s.healthy), None)
        return None if sink is None else f"the {sink} sink's worker died"

    @property
    def healthy(self) -> bool:
        return self._dead() is None

    # --- lifecycle ---------------------------------------------------------------------------

    def _lifecycle(self, worker: bool) -> Lifecycle:
        """Every long-running part in start order; shutdown runs it backwards. Stopping in
        reverse: receivers stop accepting; the engine stores what was released and the runs
        that ended, and leaves the others open, unjudged, in the spool (the Kafka consumer,
        stopped after it, then commits what got stored; the records of runs left open, and
        those it takes meanwhile, are refused or uncommitted and replayed later); the session
        job stops before the judge and the events it feeds; the judge drains before the
        events it writes to are flushed; retention and the issues job stop;
        the admin endpoint answers until the end; the store and spool close last."""
        lc = Lifecycle()
        if any(isinstance(s, SessionJudging) for s in self.sinks):  # the judge stage's
            # configuration, refused before anything is opened (a store, a spool migrated)
            lc.add("judge check", Step(start=lambda: judge.check(self.config.judge)))
        # one serve per store and spool, before either is opened (a second is refused here)
        lc.add("instance lock", Step(start=self._take_locks,
                                     shutdown=lambda _d: self._release_locks()))
        # Listening before the store is opened and migrated (minutes, for a large one at an
        # upgrade): /healthz answers a live process, /metrics the process's metrics (a 503 is
        # up == 0: OtelEvalDown), /readyz 503, the API 503 until "admin api" (a liveness or
        # startup probe no longer kills a migration halfway, over and over).
        lc.add("admin", self.admin)
        lc.add("store", Step(start=self._open_store, shutdown=lambda _d: self._close_store()))
        if self.spool is not None:
            spool = self.spool
            lc.add("spool", Step(start=self._open_spool, shutdown=lambda _d: spool.close()))
        if self.loop is not None:
            lc.add("event loop", self.loop)
        lc.add("admin api", Step(start=lambda: setattr(self, "_opened", True),
                                 shutdown=lambda _d: setattr(self, "_opened", False)))
        # Stopped after the engine, the consumer and the sinks: an issues run in progress
        # must not eat the time they need to evaluate, commit and drain what they hold.
        # Its runs start after the sinks ("issues runs"): the first names new issues through
        # the judge stage, which must be started by then.
        if self.issues is not None:
            lc.add("issues job", self.issues, start=False)
        if worker and not self.front_end:  # a front end's store holds no evaluations
            lc.add("retention", self.retention)
        for sink in reversed(self.sinks):  # the judge (first sink) stops before the events
            lc.add(type(sink.part if isinstance(sink, OnLoop) else sink).__name__, sink)
        if self.feedback_topic is not None:  # a front end's, for its feedback
            lc.add("ResultsPublisher", self.feedback_topic)
        if self._feedback._published is not None:  # outcomes' records a stopped process
            # owed (handed over, not delivered): published again once the publisher is up
            lc.add("feedback results owed", Step(start=self._replay_feedback))
        # completes sessions idle past sessions.idle_timeout_s (tests tick it by hand). It
        # feeds the judge and the events sink: stopped before them, as the engine is (a
        # completion made while they drain would reach a stopped judge, never judged)
        if not self.front_end:  # it completes the conversations the workers store
            lc.add("session job", self.session_job, start=worker)
        if self.issues is not None:
            lc.add("issues runs", Step(start=self.issues.start), start=worker)
        if self.kafka is not None:  # stopped here (after the engine); started after the replay
            lc.add(self.kafka.name, self.kafka.component, start=False)
        if self.pool is not None:  # stopped after the engine drained into it
            lc.add("evaluation workers", Step(
                start=self._start_pool,
                shutdown=lambda d: self.pool.shutdown(d) if self.pool is not None else None))
        if not self.front_end:  # the receivers feed the publisher instead
            lc.add("engine", self.engine, start=worker)
        # Every listener bound before the spool is replayed: a serve that cannot have its ports
        # (another one holds them) must stop before it touches what it would replay.
        lc.add("listeners", Step(start=self._bind_listeners, shutdown=self._close_listeners))
        if self.spool is not None:  # before the receivers: replayed spans come first
            engine = self.engine

            def replay() -> None:
                engine.replay()

            lc.add("spool replay", Step(start=replay))
        if self.kafka is not None:
            # Only now: a consumer's submits during the replay would compete with replayed runs
            # for open slots, and a run released half replayed (``give_way``) is a verdict on a
            # run that has not ended, whose evaluation deletes its spool rows not replayed yet.
            lc.add(f"{self.kafka.name} start", Step(start=self.kafka.component.start))
        for name, receiver in (("otlp grpc", self.grpc), ("otlp http", self.http)):
            if receiver is not None:
                lc.add(name, receiver)
        lc.add("readiness", Step(start=self._now_ready,
                                 shutdown=lambda _d: setattr(self, "_ready", False)))
        return lc

    def _now_ready(self) -> None:
        """Every receiver open: ready, and listening from now for the session job."""
        self.session_job.listening()
        self._ready = True

    def _replay_feedback(self) -> None:
        """Up to the publisher's queue of them (the rest at a later start)."""
        self._feedback.replay(self.config.kafka.results_queue_size)

    def _close_store(self) -> None:
        """Last: the owed results records delivered meanwhile paid first (``Feedback``)."""
        self._feedback.close()
        self.store.close()

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

    def shutdown(self, deadline_s: float | None = None) -> None:
        """Stop accepting, evaluate everything taken, flush sinks within the deadline: every
        started part, last first, each with what is left of ``deadline_s`` (by default
        ``service.shutdown_timeout_s``)."""
        if deadline_s is None:
            deadline_s = self.config.service.shutdown_timeout_s
        lifecycle, self._lifecycle_ = self._lifecycle_, None
        if self._stopped.is_set() and lifecycle is None:
            return
        if lifecycle is not None:  # else never started: the constructor opened nothing
            lifecycle.shutdown(deadline_s)
        self._stopped.set()
        log.info("otel-eval stopped")

    def _open_store(self) -> None:
        """The store opened, or a ``StartupError`` naming it (one line, no traceback): a file
        that is no store (``opened``), a schema newer than this otel-eval's, a PostgreSQL
        server that cannot be reached or refuses the login (its URL without the password)."""
        from otel_eval.store.migrations import SchemaError

        try:
            opened(self.store)
        except SchemaError as e:
            raise StartupError(f"store {self.store.location}: {e}") from None
        except Exception as e:
            psycopg = sys.modules.get("psycopg")  # imported only for a PostgreSQL store
            if psycopg is None or not isinstance(e, psycopg.Error):
                raise
            raise StartupError(f"store {self.store.location}: {e}") from None

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
                raise ForcedExit(1)  # through startup too (Lifecycle.start)
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
                    log.error("a stage died (%s); shutting down", self._dead())
                break
        self.shutdown()
        if isinstance(self.engine.failure, StoreGaveUp):
            # the driver's message can quote span content (a key in an error's detail):
            # escaped, as every log line is
            print(f"otel-eval: {printable(str(self.engine.failure))}", file=sys.stderr)
        return 1 if failed else 0

    # --- results API -------------------------------------------------------------------------

    def feedback(self, trace_id: str, outcome_value: object) -> dict[str, Any] | None:
        """``POST /v1/feedback``: ``Feedback.record`` (the outcome kept, the verdict
        re-judged)."""
        return self._feedback.record(trace_id, outcome_value)


def instance_locks(sc: StoreConfig, journal: bool = False,
                   catalogue: str = "") -> list[InstanceLock]:
    """The locks of the local files this serve owns (the SQLite store, the spool, with
    ``journal`` (a judge model) the judge's pending-work journal in ``store.path``, and the
    issues job's own SQLite ``catalogue``, ``issues.store_path``: a SQLite catalogue always
    leads, so two serves on one would both run the job over it), not taken yet. A PostgreSQL
    store is shared by the fleet by design: only its local files are locked. With SQLite the
    journal is in the store's file, locked as the store."""
    locks = []
    if not is_postgresql_url(sc.target) and sc.target != ":memory:":
        locks.append(InstanceLock(sc.target, "store"))
    elif journal and sc.path != ":memory:":  # the journal's work is this serve's alone
        locks.append(InstanceLock(sc.path, "judge journal"))
    if spool := sc.spool_file():
        locks.append(InstanceLock(spool, "spool"))
    if catalogue and not is_postgresql_url(catalogue) and catalogue != ":memory:":
        own = InstanceLock(catalogue, "issues catalogue", "issues.store_path")
        if all(lock.path != own.path for lock in locks):  # not a file locked above
            locks.append(own)
    return locks
