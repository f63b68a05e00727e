"""Self-metrics (Prometheus): declared once, on an injected registry; stages call verbs.

One way to declare one, in this package only: a class per subsystem (``ingest.IngestMetrics``
for the receivers and assembly, ``EvaluationMetrics``, ``SinkMetrics``, ``traces.TraceMetrics``,
``judge.JudgeMetrics``, ``kafka.KafkaMetrics``, ``spool.SpoolMetrics``,
``prediction.PredictionMetrics``, ``sessions.SessionMetrics``,
``calibration.CalibrationMetrics``, ``workers.WorkerMetrics``) declares its series in its
constructor through the ``declare.Declarer`` ``Metrics`` hands it (name without the
``otel_eval_`` namespace, help, labels; the registry is the injected one) and offers verbs; a
stage holds ``metrics`` and calls its subsystem's (``metrics.ingest.spans_rejected(...)``,
``metrics.spool.held(...)``). A value known only when Prometheus scrapes (the predictor's
rolling AUC, the judge agreement gauges, the issues job's gauges: ``issues.IssuesCollector``)
is a ``Collector`` of this package registered on the same registry.

Every metric is ``otel_eval_<subsystem>_<what>_<unit>``; label values come only from closed
sets or from capped sets: one budget of (service, agent) pairs for every per-trace metric (the
first ``max_pairs`` distinct pairs; any other pair is service="_other", agent="_other" on all
of them alike, so ratios between them hold; configured agents outside it; idle pairs expire:
``labels.SeriesCap``); tool names: the first ``max_tools_per_agent`` per
(service, agent) pair, the rest ``_other``.
Histograms of per-trace figures carry an exemplar ``{"trace_id": ...}`` (OpenMetrics only), so
a dashboard can jump from a spike to the trace.

Metrics (counters are exposed with the ``_total`` suffix):

    receiver   otel_eval_receiver_spans_received_total{protocol}
               otel_eval_receiver_spans_accepted_total{protocol}
               otel_eval_receiver_spans_rejected_total{protocol,reason}
               otel_eval_receiver_requests_throttled_total{protocol,reason}  grpc|http
               (trace requests), grpc_logs|http_logs (logs requests)
               otel_eval_receiver_requests_refused_total{protocol,reason}  unauthenticated|
               forbidden|receive_timeout|unsupported_content_type|
               unsupported_content_encoding|unsupported_transfer_encoding|length_required|
               unsupported_signal|too_large|malformed_request;
               http|admin: httpserver.REFUSE_REASONS (not HTTP/1.x: request line, headers)
               otel_eval_receiver_connections_closed_total{listener,reason}  http|admin;
               httpserver.CLOSE_REASONS (limits, deadlines, client hang-ups)
               otel_eval_metrics_series_overflow_total{metric}  per-trace metrics hold at most
               max_series_per_metric label combinations; more fold into all-``_other``
               otel_eval_receiver_export_duration_seconds{protocol}  histogram; protocol
               as requests_throttled's
               otel_eval_receiver_log_records_received_total{protocol}
               otel_eval_receiver_log_records_accepted_total{protocol}   GenAI events held
               otel_eval_receiver_log_records_ignored_total{protocol,reason}  other records
               otel_eval_receiver_log_records_rejected_total{protocol,reason}
    assembly   otel_eval_assembly_open_traces, otel_eval_assembly_pending_spans  gauges
               otel_eval_assembly_traces_released_total{status,reason}
               otel_eval_assembly_spans_released_total
               otel_eval_assembly_traces_reopened_total, otel_eval_assembly_late_spans_total,
               otel_eval_assembly_spans_reopened_total
               otel_eval_assembly_spans_handed_over_total  runs in flight of a revoked Kafka
               partition, forgotten unjudged (its next owner replays them)
               otel_eval_assembly_pending_log_records                           gauge
               otel_eval_assembly_log_records_dropped_total{reason}  no_spans|late (the
               store holds the run: it stands)
    traces     otel_eval_traces_completed_total{service,agent,status}
               otel_eval_traces_superseded_total{service,agent}
               otel_eval_traces_with_loop_total{service,agent}
               otel_eval_traces_non_terminated_total{service,agent}
               otel_eval_traces_budget_overruns_total{service,agent,budget}
               otel_eval_traces_over_budget_total{service,agent}  traces with an overrun,
               once however many budgets (what the budget alerts' share counts)
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
               late: traces of spans that came after their run was stored, to a process
               that no longer remembered it (a restart in between; the stored run stands);
               not_a_run: traces made only of setup operations (a create_agent span alone),
               or only of spans taken to pass on (pass-through: every span unevaluable);
               foreign_sender: pass-through, a trace of another sender's spans for a
               released run only, passed on (the run not released again)
               otel_eval_evaluation_spans_skipped_total{reason}  spans taken only to pass on
               (pass-through), never evaluated: trace_too_large (past
               assembly.max_spans_per_trace), invalid_timestamp (a span longer than a
               year or with no start), foreign_sender (another sender's span for a
               released run); without pass-through they are refused
    store      otel_eval_store_write_failures_total{reason}  batches the store refused to
               write (store.failures.WRITE_FAILURE_REASONS: disk_full|read_only|locked|
               unavailable|timeout|error); kept and retried, the receivers throttled
               meanwhile (error: only once trace by trace failed too, see evaluate.stage)
    judge      otel_eval_judge_calls_total{judge,status}       one per LLM call (judge or combined;
               the issue namer's and merger's too: issue_name, issue_merge)
               otel_eval_judge_tokens_total{judge,direction}   input|output
               otel_eval_judge_cost_usd_total{judge}
               otel_eval_judge_usage_implausible_total{judge}  replies whose usage was estimated
               otel_eval_judge_call_duration_seconds{judge}     histogram
               otel_eval_judge_skipped_total{reason}            traces not judged
               otel_eval_judge_score{judge,dimension}           histogram, 0..1
               otel_eval_judge_queue_depth                      gauge
               otel_eval_judge_agreement_{auc,kappa,runs}{service,agent,score}  gauges: the
               judge (and p_success) against the outcomes recorded (otel_eval.telemetry.
               calibration; recomputed from the store at most every 300 s)
    kafka      otel_eval_kafka_spans_consumed_total, otel_eval_kafka_records_poison_total{reason}
               otel_eval_kafka_throttled_total{reason}, otel_eval_kafka_paused  (gauge 0/1)
               otel_eval_kafka_lag_records{topic,partition}      topic: spans|logs (consumed)
               otel_eval_kafka_committed_offset{topic,partition}
               otel_eval_kafka_commit_failures_total{reason}
               otel_eval_kafka_records_published_total{topic}           spans|logs|results
               otel_eval_kafka_publish_dropped_total{topic,reason}
    sessions   otel_eval_sessions_completed_total{service,agent}, otel_eval_sessions_failed_total
               {service,agent}, otel_eval_session_findings_total{service,agent,detector,kind},
               otel_eval_session_turns{service,agent} (histogram, exemplar: last turn's trace),
               otel_eval_sessions_reopened_total{service,agent}, otel_eval_sessions_evicted_total
               {reason}, otel_eval_session_turns_dropped_total{reason}, otel_eval_sessions_open
               (gauge): the session completion job (otel_eval.telemetry.sessions)
    prediction otel_eval_prediction_p_success{service,agent}      histogram, 0..1
               otel_eval_prediction_runs_predicted_to_fail_total{service,agent}  p_success
               below prediction.pass_threshold
               otel_eval_prediction_labelled_total{service,agent,outcome} success|failure
               otel_eval_prediction_rolling_auc{service,agent}  gauge, AUC of the last labelled
               predictions (otel_eval.telemetry.prediction)
    spool      otel_eval_spool_bytes, otel_eval_spool_requests                    gauges
               otel_eval_spool_max_bytes  the bound (store.spool_max_bytes)            gauge
               otel_eval_spool_spans_replayed_total, otel_eval_spool_failures_total{operation}
               otel_eval_spool_log_records_replayed_total, otel_eval_spool_spans_rejected_total
               {reason}, otel_eval_spool_log_records_rejected_total{reason}
    workers    otel_eval_workers_running, otel_eval_workers_inflight_traces{worker}   gauges
               otel_eval_workers_restarts_total{worker}, otel_eval_workers_retried_traces_total
    sink       otel_eval_sink_dropped_total{sink,reason}    items (events, spans) a sink dropped
               otel_eval_forward_spans_sent_total, otel_eval_events_emitted_total

Invariants (in steady state, all counters since start):
- spans_received = spans_accepted + spans_rejected (per protocol: grpc, http, kafka); likewise
  log_records_received = log_records_accepted + log_records_ignored + log_records_rejected;
- sum(spans_accepted) + spool_spans_replayed + assembly_spans_reopened =
  assembly_spans_released + assembly_pending_spans (open or queued; a re-opened trace's spans
  are pending and released again) + assembly_spans_handed_over (a revoked Kafka partition's
  runs in flight: their records go to its next owner);
- traces_completed = sum over verdicts of traces_verdicts (+ traces with no verdict);
- traces_with_loop, traces_non_terminated, traces_over_budget, traces_lucky_passes <=
  traces_completed;
- sum over source of traces_agent_source = traces_completed (per service).

``traces_non_terminated`` counts runs that did not end (``results.NOT_ENDED_KINDS``):
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

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from otel_eval.base.results import Evaluation
from otel_eval.telemetry.calibration import CalibrationMetrics
from otel_eval.telemetry.declare import Declarer
from otel_eval.telemetry.ingest import IngestMetrics
from otel_eval.telemetry.judge import JudgeMetrics
from otel_eval.telemetry.kafka import KafkaMetrics
from otel_eval.telemetry.labels import OTHER, SeriesCap
from otel_eval.telemetry.prediction import AucSettings, PredictionMetrics
from otel_eval.telemetry.sessions import SessionMetrics
from otel_eval.telemetry.spool import SPOOL_OPERATIONS, SpoolMetrics
from otel_eval.telemetry.traces import TOOL_ERROR_KINDS, TraceMetrics
from otel_eval.telemetry.workers import WorkerMetrics

__all__ = ["OTHER", "SPOOL_OPERATIONS", "TOOL_ERROR_KINDS", "EvaluationMetrics", "JudgeMetrics",
           "KafkaMetrics", "Metrics", "SinkMetrics", "SpoolMetrics", "render"]


class Metrics:
    """All otel-eval metrics on ``registry`` (a new private registry when none is given), one
    object per subsystem. They are declared in this order, the order ``/metrics`` lists them."""

    def __init__(self, registry: CollectorRegistry | None = None, *, max_pairs: int = 250,
                 max_tools_per_agent: int = 20, max_series_per_metric: int = 10_000,
                 prediction: AucSettings | None = None,
                 reserved_agents: Iterable[str] = (), metrics_expiration_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        d = Declarer(self.registry)
        self.ingest = IngestMetrics(d)
        self.evaluation = EvaluationMetrics(d)
        self.sinks = SinkMetrics(d)
        cap = SeriesCap(d, max_pairs, max_series_per_metric, reserved_agents,
                        metrics_expiration_s, clock)
        self.traces = TraceMetrics(d, cap, max_tools_per_agent)
        self.sessions = SessionMetrics(d, cap)
        self.judge = JudgeMetrics(d)
        self.kafka = KafkaMetrics(d, self.ingest)
        self.spool = SpoolMetrics(d)
        self.prediction = PredictionMetrics(d, cap, prediction)
        self.calibration = CalibrationMetrics(d, cap)
        self.workers = WorkerMetrics(d)

    def evaluation_stored(self, evaluation: Evaluation, completion_to_verdict_s: float,
                          superseded: bool) -> None:
        """Every per-trace metric of one stored evaluation (see the module docstring), and
        the predictor's when it carries a prediction."""
        service, agent = self.traces.evaluation_stored(evaluation, completion_to_verdict_s,
                                                       superseded)
        self.prediction.predicted(evaluation, service, agent, superseded)


class EvaluationMetrics:
    """The evaluation stage's outcomes besides the traces: failures, skips, store refusals."""

    def __init__(self, d: Declarer) -> None:
        c = d.counter
        self.c_eval_failed = c("evaluation_failures", "Evaluations that failed, by stage.",
                               ["stage", "reason"])
        self.c_skipped = c("evaluation_skipped",
                           "Released traces not evaluated, by reason (already_evaluated, "
                           "late, not_a_run, foreign_sender, unstorable).", ["reason"])
        for reason in ("already_evaluated", "late", "not_a_run", "foreign_sender",
                       "unstorable"):
            self.c_skipped.labels(reason)  # 0, not absent, until the first one
        self.c_spans_skipped = c(
            "evaluation_spans_skipped",
            "Spans taken only to pass on (pass-through) and not evaluated, by reason "
            "(trace_too_large: past assembly.max_spans_per_trace; invalid_timestamp: longer "
            "than a year or no start; foreign_sender: a sender other than the one that "
            "opened a released run).", ["reason"])
        for reason in ("trace_too_large", "invalid_timestamp", "foreign_sender"):
            self.c_spans_skipped.labels(reason)
        self.c_store_failed = c("store_write_failures",
                                "Batches of evaluations the store refused to write, by reason "
                                "(kept and retried).", ["reason"])
        self.c_history_evicted = c(
            "agent_history_evicted",
            "Agent history rows deleted to keep a bound, by reason (max_service_rows: a "
            "service's least recently seen past its cap; max_rows: past the rows in all, of "
            "the services holding the most; max_age: not seen for 30 days).", ["reason"])

    def failed(self, stage: str, reason: str) -> None:
        self.c_eval_failed.labels(stage, reason).inc()

    def skipped(self, reason: str) -> None:
        self.c_skipped.labels(reason).inc()

    def spans_skipped(self, reason: str, n: int) -> None:
        self.c_spans_skipped.labels(reason).inc(n)

    def store_write_failed(self, reason: str) -> None:
        self.c_store_failed.labels(reason).inc()

    def history_evicted(self, reason: str, rows: int) -> None:
        self.c_history_evicted.labels(reason).inc(rows)

    def history_eviction_reasons(self, reasons: Iterable[str]) -> None:
        """Declare each reason's series at 0 (``reasons``: store.base.HISTORY_EVICTION_REASONS,
        given by the stage that counts them)."""
        for reason in reasons:
            self.c_history_evicted.labels(reason)

    def store_write_failure_reasons(self, reasons: Iterable[str]) -> None:
        """Declare each reason's series at 0 (``reasons``: store.failures.WRITE_FAILURE_REASONS,
        given by the stage that counts them: this package sits below the store). A series
        born at 1 hides its first refusal from increase(), and OtelEvalStoreRefusingWrites
        with it."""
        for reason in reasons:
            self.c_store_failed.labels(reason)


class SinkMetrics:
    """What the sinks sent and dropped (events, pass-through)."""

    def __init__(self, d: Declarer) -> None:
        c = d.counter
        self.c_sink_dropped = c("sink_dropped", "Items a result sink dropped, by reason.",
                                ["sink", "reason"])
        self.c_forwarded = c("forward_spans_sent", "Spans forwarded downstream.")
        self.c_events = c("events_emitted", "Evaluation events (log records) exported.")

    def dropped(self, sink: str, reason: str, n: int) -> None:
        self.c_sink_dropped.labels(sink, reason).inc(n)

    def forwarded(self, n_spans: int) -> None:
        self.c_forwarded.inc(n_spans)

    def events_emitted(self, n: int) -> None:
        self.c_events.inc(n)


def render(registry: CollectorRegistry, accept_header: str | None) -> tuple[bytes, str]:
    """The /metrics body and Content-Type: OpenMetrics (with exemplars) when the client asks
    for ``application/openmetrics-text`` (Prometheus does by default), else text format
    0.0.4, also when its version is unreadable (/metrics is public: anyone picks the Accept)."""
    try:
        encoder, content_type = choose_encoder(accept_header or "")
    except (TypeError, ValueError):  # a version that is no dotted number ("version=abc"),
        # which prometheus_client compares with ints: the default format, never a 500
        encoder, content_type = choose_encoder("")
    return encoder(registry), content_type
