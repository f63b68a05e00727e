"""Self-metrics (Prometheus): declared once, on an injected registry; stages call verbs.

One way to declare one, in this package only: a class per subsystem (``Metrics`` itself for
the receivers, assembly, traces and sinks; ``JudgeMetrics``, ``KafkaMetrics``,
``SpoolMetrics``, ``workers.WorkerMetrics``, ``prediction.PredictionMetrics``,
``calibration.CalibrationMetrics``) declares its
series in its constructor through ``Metrics._counter`` / ``_gauge`` / ``_histogram`` (name
without the ``otel_eval_`` namespace, help, labels; the registry is the injected one) and
offers verbs; a stage holds ``metrics`` and calls them. A value known only when Prometheus
scrapes (the predictor's rolling AUC, the issues job's gauges: ``issues.IssuesCollector``) is
a ``Collector`` of this package registered on the same registry.

Every metric is ``otel_eval_<subsystem>_<what>_<unit>``; label values come only from closed
sets or from capped sets: one budget of (service, agent) pairs for every per-trace metric (the
first ``max_pairs`` distinct pairs; any other pair is service="_other", agent="_other" on all
of them alike, so ratios between them hold); tool names: the first ``max_tools_per_agent`` per
agent, the rest ``_other``.
Histograms of per-trace figures carry an exemplar ``{"trace_id": ...}`` (OpenMetrics only), so
a dashboard can jump from a spike to the trace.

Metrics (counters are exposed with the ``_total`` suffix):

    receiver   otel_eval_receiver_spans_received_total{protocol}
               otel_eval_receiver_spans_accepted_total{protocol}
               otel_eval_receiver_spans_rejected_total{protocol,reason}
               otel_eval_receiver_requests_throttled_total{protocol,reason}
               otel_eval_receiver_requests_refused_total{protocol,reason}  unauthenticated|
               forbidden|receive_timeout
               otel_eval_receiver_connections_closed_total{listener,reason}  http|admin;
               httpserver.CLOSE_REASONS (limits, deadlines, client hang-ups)
               otel_eval_metrics_series_overflow_total{metric}  per-trace metrics hold at most
               max_series_per_metric label combinations; more fold into all-``_other``
               otel_eval_receiver_export_duration_seconds{protocol}            histogram
               otel_eval_receiver_log_records_received_total{protocol}
               otel_eval_receiver_log_records_accepted_total{protocol}   GenAI events held
               otel_eval_receiver_log_records_ignored_total{protocol,reason}  other records
               otel_eval_receiver_log_records_rejected_total{protocol,reason}
    assembly   otel_eval_assembly_open_traces, otel_eval_assembly_pending_spans  gauges
               otel_eval_assembly_traces_released_total{status,reason}
               otel_eval_assembly_spans_released_total
               otel_eval_assembly_traces_reopened_total, otel_eval_assembly_late_spans_total
               otel_eval_assembly_pending_log_records                           gauge
               otel_eval_assembly_log_records_dropped_total{reason}  no_spans
    traces     otel_eval_traces_completed_total{service,agent,status}
               otel_eval_traces_superseded_total{service,agent}
               otel_eval_traces_with_loop_total{service,agent}
               otel_eval_traces_non_terminated_total{service,agent}
               otel_eval_traces_budget_overruns_total{service,agent,budget}
               otel_eval_traces_verdicts_total{service,agent,verdict}           passed|failed
               otel_eval_traces_lucky_passes_total{service,agent}
               otel_eval_traces_agent_source_total{service,source}  span|child_span|
               inferred_history|unknown: where the run's agent name came from
    trace      otel_eval_trace_steps{service,agent}             histogram (a code action once)
               otel_eval_trace_tokens{service,agent}            histogram (input + output)
               otel_eval_trace_cost_usd{service,agent}          histogram (traces with a cost)
               otel_eval_trace_duration_seconds{service,agent}  histogram
    detector   otel_eval_detector_findings_total{service,agent,detector,kind,severity}
               otel_eval_detector_tool_errors_total{service,agent,kind,tool}  selection|
               arguments|runtime (service and agent: the pair budget, like the traces)
    evaluation otel_eval_evaluation_completion_to_verdict_seconds     histogram
               otel_eval_evaluation_failures_total{stage,reason}
               otel_eval_evaluation_skipped_total{reason}  already_evaluated: released traces
               whose content the store already holds an evaluation of (redelivered, replayed);
               not_a_run: traces made only of setup operations (a create_agent span alone)
    store      otel_eval_store_write_failures_total{reason}  batches the store refused to
               write (store.failures.WRITE_FAILURE_REASONS: disk_full|read_only|locked|
               unavailable|error); kept and retried, the receivers throttled meanwhile
    judge      otel_eval_judge_calls_total{judge,status}       one per LLM call (judge or combined)
               otel_eval_judge_tokens_total{judge,direction}   input|output
               otel_eval_judge_cost_usd_total{judge}
               otel_eval_judge_call_duration_seconds{judge}     histogram
               otel_eval_judge_skipped_total{reason}            traces not judged
               otel_eval_judge_score{judge,dimension}           histogram, 0..1
               otel_eval_judge_queue_depth                      gauge
    kafka      otel_eval_kafka_spans_consumed_total, otel_eval_kafka_records_poison_total{reason}
               otel_eval_kafka_throttled_total{reason}, otel_eval_kafka_paused  (gauge 0/1)
               otel_eval_kafka_lag_records{topic,partition}      topic: spans|logs (consumed)
               otel_eval_kafka_committed_offset{topic,partition}
               otel_eval_kafka_commit_failures_total{reason}
               otel_eval_kafka_records_published_total{topic}           spans|logs|results
               otel_eval_kafka_publish_dropped_total{topic,reason}
    prediction otel_eval_prediction_p_success{service,agent}      histogram, 0..1 (with --model)
               otel_eval_prediction_labelled_total{agent,outcome}  success|failure
               otel_eval_prediction_rolling_auc{agent}    gauge, AUC of the last labelled
               predictions (otel_eval.telemetry.prediction)
    spool      otel_eval_spool_bytes, otel_eval_spool_requests                    gauges
               otel_eval_spool_max_bytes  the bound (store.spool_max_bytes)            gauge
               otel_eval_spool_spans_replayed_total, otel_eval_spool_failures_total{operation}
               otel_eval_spool_log_records_replayed_total
    workers    otel_eval_workers_running, otel_eval_workers_inflight_traces{worker}   gauges
               otel_eval_workers_restarts_total{worker}, otel_eval_workers_retried_traces_total
    sink       otel_eval_sink_dropped_total{sink,reason}    items (events, spans) a sink dropped
               otel_eval_forward_spans_sent_total, otel_eval_events_emitted_total

Invariants (in steady state, all counters since start):
- spans_received = spans_accepted + spans_rejected (per protocol: grpc, http, kafka); likewise
  log_records_received = log_records_accepted + log_records_ignored + log_records_rejected;
- sum(spans_accepted) + spool_spans_replayed = assembly_spans_released + assembly_pending_spans
  (open or queued);
- traces_completed = sum over verdicts of traces_verdicts (+ traces with no verdict);
- traces_with_loop, traces_non_terminated, traces_lucky_passes <= traces_completed;
- sum over source of traces_agent_source = traces_completed (per service).

``traces_non_terminated`` counts runs that did not end (``model.NOT_ENDED_KINDS``):
a completed run whose output simply was not recorded is not one.

Re-evaluations: ``evaluation_stored(..., superseded=True)`` (late spans re-opened a trace that
was already counted) counts only ``traces_superseded`` and the completion-to-verdict latency;
every other trace counter reflects the first evaluation of each trace, so rates stay rates of
traces, not of evaluations. The stored evaluation (results API) always holds the latest one.
A released trace whose content the store already holds an evaluation of (redelivered by
Kafka, replayed by the spool) is not evaluated: it counts only ``evaluation_skipped``; so is a
trace that is no agent run (only setup operations: ``trajectory.is_run``), counted neither in
``traces_completed`` nor in any other trace metric.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from otel_eval.base import model
from otel_eval.base.model import NOT_ENDED_KINDS
from otel_eval.telemetry.calibration import CalibrationMetrics
from otel_eval.telemetry.prediction import AucSettings, PredictionMetrics
from otel_eval.telemetry.workers import WorkerMetrics

__all__ = ["OTHER", "TOOL_ERROR_KINDS", "JudgeMetrics", "KafkaMetrics", "Metrics", "SpoolMetrics",
           "render"]

OTHER = "_other"
UNKNOWN = "unknown"
TOOL_ERROR_KINDS = ("selection", "arguments", "runtime")

_STEPS_BUCKETS = (0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233)
_TOKEN_BUCKETS = (100, 300, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000)
_COST_BUCKETS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
_DURATION_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
_LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_EXPORT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class _CappedNames:
    """Admits the first ``cap`` distinct names; later ones map to ``_other``. Thread-safe."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, name: str | None) -> str:
        value = (name or UNKNOWN)[:128]
        if value in self._seen:
            return value
        with self._lock:
            if value in self._seen or len(self._seen) < self._cap:
                self._seen.add(value)
                return value
        return OTHER


class _Pairs:
    """The one label budget of every per-trace metric: admits the first ``cap`` distinct
    (service, agent) pairs; any other pair is (``_other``, ``_other``) on every metric alike,
    so a ratio of two metrics (loops / completed) stays right for each pair and in sum.
    Thread-safe."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._admitted: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def __call__(self, service: str | None, agent: str | None) -> tuple[str, str]:
        pair = ((service or UNKNOWN)[:128], (agent or UNKNOWN)[:128])
        if pair in self._admitted:
            return pair
        with self._lock:
            if pair in self._admitted or len(self._admitted) < self._cap:
                self._admitted.add(pair)
                return pair
        return OTHER, OTHER


class Metrics:
    """All otel-eval metrics on ``registry`` (a new private registry when none is given)."""

    def __init__(self, registry: CollectorRegistry | None = None, *, max_pairs: int = 250,
                 max_tools_per_agent: int = 20, max_series_per_metric: int = 10_000,
                 prediction: AucSettings | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        # a backstop per per-trace metric, past the pair budget: the other labels come from
        # closed sets (statuses, finding kinds, budgets, 20 tools per agent), so only a
        # pathological mix reaches it; the overflow is counted
        self._max_series = max_series_per_metric
        self._combos: dict[int, dict[tuple[str, ...], Any]] = {}  # metric -> series -> child
        self._combos_lock = threading.Lock()
        # (service, agent) pairs with series of their own: capping each label separately
        # (100 x 100) let each metric admit different pairs (3,000 pairs: 50,157 series)
        self._pairs = _Pairs(max_pairs)
        self._max_tools = max_tools_per_agent
        self._tools: dict[str, _CappedNames] = {}
        self._tools_lock = threading.Lock()
        self._declare_ingest()
        self._declare_traces()
        self.judge = JudgeMetrics(self)
        self.kafka = KafkaMetrics(self)
        self.spool = SpoolMetrics(self)
        self.prediction = PredictionMetrics(self, prediction)
        self.calibration = CalibrationMetrics(self)
        self.registry.register(self.calibration)
        self.workers = WorkerMetrics(self)

    # --- declarations -------------------------------------------------------------------

    def _counter(self, name: str, doc: str, labels: Iterable[str] = ()) -> Counter:
        return Counter(name, doc, list(labels), namespace="otel_eval", registry=self.registry)

    def _gauge(self, name: str, doc: str, labels: Iterable[str] = ()) -> Gauge:
        return Gauge(name, doc, list(labels), namespace="otel_eval", registry=self.registry)

    def _histogram(self, name: str, doc: str, labels: Iterable[str],
                   buckets: Iterable[float]) -> Histogram:
        return Histogram(name, doc, list(labels), namespace="otel_eval",
                         registry=self.registry, buckets=tuple(buckets))

    def _declare_ingest(self) -> None:
        c, g = self._counter, self._gauge
        self.c_received = c("receiver_spans_received", "Spans received.", ["protocol"])
        self.c_accepted = c("receiver_spans_accepted", "Spans acknowledged.", ["protocol"])
        self.c_rejected = c("receiver_spans_rejected", "Spans rejected, by reason.",
                            ["protocol", "reason"])
        self.c_throttled = c("receiver_requests_throttled",
                             "Export requests refused with a retryable error, by reason.",
                             ["protocol", "reason"])
        self.c_refused = c("receiver_requests_refused",
                           "Requests refused before reading them (unauthenticated, forbidden).",
                           ["protocol", "reason"])
        self.c_conn_closed = c("receiver_connections_closed",
                               "HTTP connections closed before an answer (limits, deadlines, "
                               "failed TLS handshakes) or by the client mid-request, by "
                               "reason.", ["listener", "reason"])
        self.h_export = self._histogram("receiver_export_duration_seconds",
                                        "Time to handle one Export request.", ["protocol"],
                                        _EXPORT_BUCKETS)
        self.g_open = g("assembly_open_traces", "Traces being assembled.")
        self.g_pending = g("assembly_pending_spans", "Spans accepted and not yet evaluated.")
        self.c_released = c("assembly_traces_released", "Traces released for evaluation.",
                            ["status", "reason"])
        self.c_released_spans = c("assembly_spans_released", "Spans in released traces.")
        self.c_reopened = c("assembly_traces_reopened", "Released traces re-opened by late spans.")
        self.c_late = c("assembly_late_spans", "Late spans that re-opened a released trace.")
        self.c_logs_received = c("receiver_log_records_received", "Log records received.",
                                 ["protocol"])
        self.c_logs_accepted = c("receiver_log_records_accepted",
                                 "GenAI event log records held for their span.", ["protocol"])
        self.c_logs_ignored = c("receiver_log_records_ignored",
                                "Log records that are not GenAI events of a span, by reason.",
                                ["protocol", "reason"])
        self.c_logs_rejected = c("receiver_log_records_rejected",
                                 "Log records rejected, by reason.", ["protocol", "reason"])
        self.g_pending_logs = g("assembly_pending_log_records",
                                "GenAI event log records held and not yet evaluated.")
        self.c_logs_dropped = c("assembly_log_records_dropped",
                                "Held log records dropped, by reason.", ["reason"])
        self.c_eval_failed = c("evaluation_failures", "Evaluations that failed, by stage.",
                               ["stage", "reason"])
        self.c_skipped = c("evaluation_skipped",
                           "Released traces not evaluated, by reason (already_evaluated, "
                           "not_a_run).", ["reason"])
        for reason in ("already_evaluated", "not_a_run"):
            self.c_skipped.labels(reason)  # 0, not absent, until the first one
        self.c_store_failed = c("store_write_failures",
                                "Batches of evaluations the store refused to write, by reason "
                                "(kept and retried).", ["reason"])
        self.c_sink_dropped = c("sink_dropped", "Items a result sink dropped, by reason.",
                                ["sink", "reason"])
        self.c_forwarded = c("forward_spans_sent", "Spans forwarded downstream.")
        self.c_events = c("events_emitted", "Evaluation events (log records) exported.")
        self.c_series_overflow = c("metrics_series_overflow",
                                   "Observations folded into the _other series of a metric "
                                   "whose label combinations reached the cap.", ["metric"])

    def _declare_traces(self) -> None:
        c, sa = self._counter, ("service", "agent")
        self.c_completed = c("traces_completed", "Traces evaluated.", [*sa, "status"])
        self.c_superseded = c("traces_superseded",
                              "Re-evaluations of an already counted trace (late spans).", sa)
        self.c_loop = c("traces_with_loop", "Traces with a loop finding.", sa)
        self.c_nonterm = c("traces_non_terminated",
                           "Traces of runs that did not end (non-termination findings).", sa)
        self.c_budget = c("traces_budget_overruns", "Budget overrun findings, by budget.",
                          [*sa, "budget"])
        self.c_verdicts = c("traces_verdicts", "Verdicts, passed or failed.", [*sa, "verdict"])
        self.c_lucky = c("traces_lucky_passes", "Passed traces flagged as lucky passes.", sa)
        self.c_agent_source = c("traces_agent_source",
                                "Traces evaluated, by where their agent's name came from "
                                "(span, child_span, inferred_history, unknown).",
                                ["service", "source"])
        self.c_findings = c("detector_findings", "Detector findings.",
                            [*sa, "detector", "kind", "severity"])
        self.c_tool_errors = c("detector_tool_errors", "Tool-call errors, by kind and tool.",
                               [*sa, "kind", "tool"])
        h = self._histogram
        self.h_steps = h("trace_steps", "Steps per trace (a code action once).", sa, _STEPS_BUCKETS)
        self.h_tokens = h("trace_tokens", "Input + output tokens per trace.", sa, _TOKEN_BUCKETS)
        self.h_cost = h("trace_cost_usd", "Cost per trace, USD.", sa, _COST_BUCKETS)
        self.h_duration = h("trace_duration_seconds", "Duration of the agent run.", sa,
                            _DURATION_BUCKETS)
        self.h_verdict_latency = h("evaluation_completion_to_verdict_seconds",
                                   "Trace release to stored verdict.", (), _LATENCY_BUCKETS)

    def _series(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, or its all-``_other`` series once the metric holds
        ``max_series_per_metric`` label combinations (counted per metric)."""
        seen = self._combos.get(id(metric))
        child = seen.get(values) if seen is not None else None
        if child is not None:  # the admitted series' child, kept: labels() costs ~1 us
            return child
        with self._combos_lock:
            seen = self._combos.setdefault(id(metric), {})
            if values not in seen:
                if len(seen) >= self._max_series:
                    self.c_series_overflow.labels(metric.describe()[0].name).inc()
                    values = (OTHER,) * len(values)
                if values not in seen:
                    seen[values] = metric.labels(*values)
            return seen[values]

    # --- receiver / assembly verbs --------------------------------------------------------

    def spans_received(self, protocol: str, n: int) -> None:
        self.c_received.labels(protocol).inc(n)

    def spans_accepted(self, protocol: str, n: int) -> None:
        self.c_accepted.labels(protocol).inc(n)

    def spans_rejected(self, protocol: str, reason: str, n: int) -> None:
        self.c_rejected.labels(protocol, reason).inc(n)

    def spans_ingested(self, protocol: str, accepted: int, rejected: Mapping[str, int]) -> None:
        """The one ingest accounting, for every source (grpc, http, kafka): spans offered =
        accepted + rejected with a reason (decode, UTF-8 salvage, assembly)."""
        self.spans_received(protocol, accepted + sum(rejected.values()))
        self.spans_accepted(protocol, accepted)
        for reason, n in rejected.items():
            self.spans_rejected(protocol, reason, n)

    def request_throttled(self, protocol: str, reason: str) -> None:
        self.c_throttled.labels(protocol, reason).inc()

    def request_refused(self, protocol: str, reason: str) -> None:
        """``protocol``: grpc | http | admin; ``reason``: unauthenticated | forbidden |
        receive_timeout (gRPC: no message within grpc_receive_timeout_s)."""
        self.c_refused.labels(protocol, reason).inc()

    def connection_closed(self, listener: str, reason: str) -> None:
        """``listener``: http | admin; ``reason``: one of ``httpserver.CLOSE_REASONS``."""
        self.c_conn_closed.labels(listener, reason).inc()

    def export_duration(self, protocol: str, seconds: float) -> None:
        self.h_export.labels(protocol).observe(seconds)

    def log_records(self, protocol: str, accepted: int, ignored: dict[str, int],
                    rejected: dict[str, int]) -> None:
        """One logs Export request's accounting (received = accepted + ignored + rejected)."""
        total = accepted + sum(ignored.values()) + sum(rejected.values())
        self.c_logs_received.labels(protocol).inc(total)
        self.c_logs_accepted.labels(protocol).inc(accepted)
        for reason, n in ignored.items():
            self.c_logs_ignored.labels(protocol, reason).inc(n)
        for reason, n in rejected.items():
            self.c_logs_rejected.labels(protocol, reason).inc(n)

    def pending_log_records(self, n: int) -> None:
        self.g_pending_logs.set(n)

    def log_records_dropped(self, reason: str, n: int) -> None:
        self.c_logs_dropped.labels(reason).inc(n)

    def open_traces(self, n: int) -> None:
        self.g_open.set(n)

    def pending_spans(self, n: int) -> None:
        self.g_pending.set(n)

    def trace_released(self, status: str, reason: str, n_spans: int) -> None:
        self.c_released.labels(status, reason or UNKNOWN).inc()
        self.c_released_spans.inc(n_spans)

    def trace_reopened(self, n_late_spans: int) -> None:
        self.c_reopened.inc()
        self.c_late.inc(n_late_spans)

    # --- evaluation verbs -----------------------------------------------------------------

    def pair(self, service: str | None, agent: str | None) -> tuple[str, str]:
        """The (service, agent) labels of a trace: its own when the pair is within the
        budget (``max_pairs``), else (``_other``, ``_other``)."""
        return self._pairs(service, agent)

    def evaluation_stored(self, evaluation: model.Evaluation, completion_to_verdict_s: float,
                          superseded: bool) -> None:
        """Derive every per-trace metric from one stored evaluation (see module docstring)."""
        t = evaluation.trajectory
        exemplar = {"trace_id": t.trace_id}
        self.h_verdict_latency.observe(max(0.0, completion_to_verdict_s), exemplar)
        service, agent = self.pair(t.service, t.agent)
        self.prediction.predicted(evaluation, service, agent, superseded)
        if superseded:
            self._series(self.c_superseded, service, agent).inc()
            return
        self._series(self.c_completed, service, agent, t.status).inc()
        self._series(self.c_agent_source, service, t.agent_source).inc()
        self._count_findings(evaluation, service, agent, exemplar)
        verdict = evaluation.verdict
        if verdict is not None:
            outcome = "passed" if verdict.passed else "failed"
            self._series(self.c_verdicts, service, agent, outcome).inc()
        self._observe_trace(t, service, agent, exemplar)

    def _count_findings(self, evaluation: model.Evaluation, service: str, agent: str,
                        exemplar: dict[str, str]) -> None:
        detectors: set[str] = set()
        not_ended = False
        for f in evaluation.findings:
            detectors.add(f.detector)
            not_ended = not_ended or (f.detector == "non_termination"
                                      and f.kind in NOT_ENDED_KINDS)
            self._series(self.c_findings, service, agent, f.detector, f.kind,
                         f.severity).inc()
            if f.detector == "budget":
                budget = str(f.attributes.get("budget") or f.kind or UNKNOWN)[:64]
                self._series(self.c_budget, service, agent, budget).inc(exemplar=exemplar)
            elif f.detector == "tool_call" and f.kind in TOOL_ERROR_KINDS:
                tool = self._tool(agent, self._tool_name(evaluation.trajectory, f))
                self._series(self.c_tool_errors, service, agent, f.kind, tool).inc()
        if "loop" in detectors:
            self._series(self.c_loop, service, agent).inc(exemplar=exemplar)
        if not_ended:
            self._series(self.c_nonterm, service, agent).inc(exemplar=exemplar)
        if "lucky_pass" in detectors:
            self._series(self.c_lucky, service, agent).inc(exemplar=exemplar)

    def _observe_trace(self, t: model.Trajectory, service: str, agent: str,
                       exemplar: dict[str, str]) -> None:
        usage = t.usage()
        self._series(self.h_steps, service, agent).observe(len(t.action_steps), exemplar)
        self._series(self.h_tokens, service, agent).observe(
            usage["input_tokens"] + usage["output_tokens"], exemplar)
        if usage["cost_usd"] is not None:
            self._series(self.h_cost, service, agent).observe(usage["cost_usd"], exemplar)
        self._series(self.h_duration, service, agent).observe(t.duration_s, exemplar)

    @staticmethod
    def _tool_name(t: model.Trajectory, f: model.Finding) -> str | None:
        name = f.attributes.get("tool") or f.attributes.get("tool_name")
        if isinstance(name, str) and name:
            return name
        by_span = {s.span_id: s for s in t.steps}
        for sid in f.span_ids:
            step = by_span.get(sid)
            if step is not None and step.tool_name:
                return step.tool_name
        for i in f.step_indexes:
            if 0 <= i < len(t.steps) and t.steps[i].tool_name:
                return t.steps[i].tool_name
        return None

    def _tool(self, agent: str, tool: str | None) -> str:
        capped = self._tools.get(agent)
        if capped is None:
            with self._tools_lock:
                capped = self._tools.setdefault(agent, _CappedNames(self._max_tools))
        return capped(tool)

    def evaluation_failed(self, stage: str, reason: str) -> None:
        self.c_eval_failed.labels(stage, reason).inc()

    def evaluation_skipped(self, reason: str) -> None:
        self.c_skipped.labels(reason).inc()

    def store_write_failed(self, reason: str) -> None:
        self.c_store_failed.labels(reason).inc()

    # --- sink verbs -----------------------------------------------------------------------

    def sink_dropped(self, sink: str, reason: str, n: int) -> None:
        self.c_sink_dropped.labels(sink, reason).inc(n)

    def forwarded(self, n_spans: int) -> None:
        self.c_forwarded.inc(n_spans)

    def events_emitted(self, n: int) -> None:
        self.c_events.inc(n)


class JudgeMetrics:
    """The judge's ``JudgeObserver`` (otel_eval.evaluate.judge.observer) over Prometheus metrics."""

    def __init__(self, m: Metrics) -> None:
        c, h = m._counter, m._histogram
        self.c_calls = c("judge_calls", "LLM judge calls, by judge and status.",
                         ["judge", "status"])
        self.c_tokens = c("judge_tokens", "Judge tokens, by direction.", ["judge", "direction"])
        self.c_cost = c("judge_cost_usd", "Judge spend, USD (litellm's accounting).", ["judge"])
        self.h_latency = h("judge_call_duration_seconds", "Judge call latency.", ["judge"],
                           _LATENCY_BUCKETS)
        self.c_skipped = c("judge_skipped", "Traces not judged, by reason.", ["reason"])
        self.h_score = h("judge_score", "Judge scores (0..1), by judge and dimension.",
                         ["judge", "dimension"], tuple(i / 10 for i in range(1, 11)))
        self.g_queue = m._gauge("judge_queue_depth", "Evaluations waiting for the judge.")

    def call(self, judge: str, status: str, input_tokens: int, output_tokens: int,
             cost_usd: float, latency_s: float) -> None:
        self.c_calls.labels(judge, status).inc()
        self.c_tokens.labels(judge, "input").inc(input_tokens)
        self.c_tokens.labels(judge, "output").inc(output_tokens)
        self.c_cost.labels(judge).inc(cost_usd)
        self.h_latency.labels(judge).observe(latency_s)

    def skip(self, reason: str) -> None:
        self.c_skipped.labels(reason).inc()

    def score(self, judge: str, dimension: str, value: float) -> None:
        self.h_score.labels(judge, dimension).observe(value)

    def queue_depth(self, n: int) -> None:
        self.g_queue.set(n)


class KafkaMetrics:
    """The Kafka stages' ``KafkaMetrics`` protocol (otel_eval.base.kafka.stats) over Prometheus."""

    def __init__(self, m: Metrics) -> None:
        c, g = m._counter, m._gauge
        self._m = m  # spans from records are accounted as the receivers' are (protocol kafka)
        self.c_consumed = c("kafka_spans_consumed", "Spans taken from Kafka records.")
        self.c_poison = c("kafka_records_poison", "Records skipped as not OTLP, by reason.",
                          ["reason"])
        self.c_throttled = c("kafka_throttled", "Records the engine refused (retried).",
                             ["reason"])
        self.g_paused = g("kafka_paused", "1 while the consumer pauses for backpressure.")
        self.g_lag = g("kafka_lag_records", "Consumer lag per partition, records.",
                       ["topic", "partition"])
        self.g_committed = g("kafka_committed_offset", "Last committed offset per partition.",
                             ["topic", "partition"])
        self.c_commit_failed = c("kafka_commit_failures", "Offset commits that failed.",
                                 ["reason"])
        self.c_published = c("kafka_records_published", "Records written, by topic kind.",
                             ["topic"])
        self.c_publish_dropped = c("kafka_publish_dropped", "Records not written, by reason.",
                                   ["topic", "reason"])

    def record_consumed(self, n_spans: int) -> None:
        self.c_consumed.inc(n_spans)

    def record_poison(self, reason: str) -> None:
        self.c_poison.labels(reason).inc()

    def spans_ingested(self, accepted: int, rejected: Mapping[str, int]) -> None:
        self._m.spans_ingested("kafka", accepted, rejected)

    def log_records_ingested(self, accepted: int, ignored: Mapping[str, int],
                             rejected: Mapping[str, int]) -> None:
        self._m.log_records("kafka", accepted, dict(ignored), dict(rejected))

    def throttled(self, reason: str) -> None:
        self.c_throttled.labels(reason).inc()

    def paused(self, paused: bool) -> None:
        self.g_paused.set(1 if paused else 0)

    def lag(self, partition: int, records: int, topic: str = "spans") -> None:
        self.g_lag.labels(topic, str(partition)).set(records)

    def committed(self, partition: int, offset: int, topic: str = "spans") -> None:
        self.g_committed.labels(topic, str(partition)).set(offset)

    def commit_failed(self, reason: str) -> None:
        self.c_commit_failed.labels(reason).inc()

    def published(self, topic_kind: str, n_records: int) -> None:
        self.c_published.labels(topic_kind).inc(n_records)

    def publish_dropped(self, topic_kind: str, reason: str, n: int) -> None:
        self.c_publish_dropped.labels(topic_kind, reason).inc(n)


class SpoolMetrics:
    """The spool (``otel_eval.assemble.spool``): what it holds, what it replayed, what failed."""

    def __init__(self, m: Metrics) -> None:
        self.g_bytes = m._gauge("spool_bytes", "Bytes of OTLP requests held until evaluated.")
        self.g_requests = m._gauge("spool_requests", "OTLP requests held until evaluated.")
        self.g_max_bytes = m._gauge("spool_max_bytes", "The spool's bound "
                                    "(store.spool_max_bytes): past it, exports are refused "
                                    "with spool_full.")
        self.c_replayed = m._counter("spool_spans_replayed",
                                     "Spans replayed from the spool at start (not received).")
        self.c_replayed_logs = m._counter(
            "spool_log_records_replayed",
            "GenAI event log records replayed from the spool at start (not received).")
        self.c_failed = m._counter("spool_failures", "Spool writes that failed, by operation.",
                                   ["operation"])

    def held(self, n_requests: int, n_bytes: int) -> None:
        self.g_requests.set(n_requests)
        self.g_bytes.set(n_bytes)

    def bound(self, max_bytes: int) -> None:
        self.g_max_bytes.set(max_bytes)

    def replayed(self, n_spans: int) -> None:
        self.c_replayed.inc(n_spans)

    def replayed_logs(self, n_records: int) -> None:
        self.c_replayed_logs.inc(n_records)

    def failed(self, operation: str) -> None:
        self.c_failed.labels(operation).inc()


def render(registry: CollectorRegistry, accept_header: str | None) -> tuple[bytes, str]:
    """The /metrics body and Content-Type: OpenMetrics (with exemplars) when the client asks
    for ``application/openmetrics-text`` (Prometheus does by default), else text format 0.0.4."""
    encoder, content_type = choose_encoder(accept_header or "")
    return encoder(registry), content_type
