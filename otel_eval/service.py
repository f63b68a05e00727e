"""``otel-eval serve``: wires the stages and owns their lifecycle.

    OTLP/gRPC :4317 ─┐
    OTLP/HTTP :4318 ─┼─> Ingest -> Engine [assembly -> evaluate -> store] -> sinks
    (Kafka)         ─┘                                         (events, forward, judge)
    admin :8888 <- /metrics, /healthz, /readyz, /v1/evaluations, /v1/feedback, /v1/issues

Startup: store, metrics, engine, sinks, then receivers, then admin says ready.
Shutdown (SIGTERM / SIGINT; a second signal exits at once): stop accepting (receivers get
the grace period for in-flight calls), release every open trace and evaluate it, flush sinks
with the time left, close the store. Nothing acknowledged is lost.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry

from otel_eval.admin import AdminApi, AdminServer
from otel_eval.config import Config
from otel_eval.evaluator import Evaluator, normalize_outcome
from otel_eval.metrics import Metrics
from otel_eval.pipeline import Engine, Sink
from otel_eval.receiver.grpc import GrpcReceiver
from otel_eval.receiver.http import HttpReceiver
from otel_eval.receiver.ingest import Ingest
from otel_eval.store import Store

log = logging.getLogger(__name__)


@dataclass
class Options:
    """What the command line adds to the config file."""

    budget_overrides: Mapping[str, float] = field(default_factory=dict)
    references_path: str | None = None


class Service:
    def __init__(self, config: Config, options: Options | None = None, *,
                 registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.options = options or Options()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock
        self.metrics = Metrics(self.registry)
        self.store = Store(config.store.path)
        self.evaluator = Evaluator(config, budget_overrides=self.options.budget_overrides,
                                   references_path=self.options.references_path)
        self.sinks: list[Any] = self._make_sinks()
        self.engine = Engine(self.evaluator, self.store, self.metrics,
                             sinks=[s for s in self.sinks if hasattr(s, "export")], clock=clock)
        ingest = Ingest(self.engine, self.metrics)
        rc = config.receiver
        self.grpc = GrpcReceiver(rc, ingest) if rc.grpc_endpoint else None
        self.http = HttpReceiver(rc, ingest) if rc.http_endpoint else None
        self.admin = AdminServer(config.admin.endpoint, AdminApi(
            registry=self.registry, latest=self.store.latest, get=self.store.get,
            feedback=self.feedback, healthy=lambda: self.engine.healthy,
            ready=lambda: self._ready))
        self._ready = False
        self._stopped = threading.Event()

    def _make_sinks(self) -> list[Sink]:
        sinks: list[Sink] = []
        ec = self.config.export
        if ec.events_endpoint:
            from otel_eval.results.events import EvaluationEvents
            sinks.append(EvaluationEvents(ec, self.metrics))
        if ec.forward_endpoint:
            from otel_eval.results.forward import Forwarder
            sinks.append(Forwarder(ec, self.metrics))
        return sinks

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self, worker: bool = True) -> None:
        """``worker=False`` leaves ticking to the caller (tests drive ``engine.tick(now)``)."""
        for sink in self.sinks:
            if hasattr(sink, "start"):
                sink.start()
        if worker:
            self.engine.start()
        if self.grpc is not None:
            self.grpc.start()
        if self.http is not None:
            self.http.start()
        self.admin.start()
        self._ready = True
        log.info("otel-eval serving (store %s)", self.config.store.path)

    def shutdown(self, deadline_s: float = 30.0) -> None:
        """Stop accepting, evaluate everything taken, flush sinks within the deadline."""
        if self._stopped.is_set():
            return
        end = time.monotonic() + deadline_s
        self._ready = False
        if self.grpc is not None:
            self.grpc.stop(grace_s=min(5.0, deadline_s / 3))
        if self.http is not None:
            self.http.stop()
        self.engine.shutdown(max(0.0, end - time.monotonic()))
        for sink in self.sinks:
            if hasattr(sink, "shutdown"):
                sink.shutdown(max(0.0, end - time.monotonic()))
        self.admin.stop()
        self.store.close()
        self._stopped.set()
        log.info("otel-eval stopped")

    def run_until_signal(self) -> None:
        """Serve until SIGTERM/SIGINT; a second signal forces an immediate exit."""
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
        while not stop.wait(1.0):
            if not self.engine.healthy:
                log.error("engine worker died; shutting down")
                break
        self.shutdown()

    # --- results API -------------------------------------------------------------------------

    def feedback(self, trace_id: str, outcome_value: object) -> dict[str, Any] | None:
        """Record a known outcome; re-judge the stored verdict with it."""
        outcome = normalize_outcome(outcome_value)
        if outcome is None:
            raise ValueError(f"outcome {outcome_value!r} is not success/failure (or 1/0)")
        self.store.put_feedback(trace_id, outcome, time.time_ns())
        body = self.store.get(trace_id)
        if body is None:
            return None
        updated = self.evaluator.with_outcome(body, outcome)
        self.store.put_json(updated)
        return updated
