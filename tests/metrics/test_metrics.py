"""Metrics: names, labels, caps, exemplars, superseded re-evaluations, exposition formats."""

from __future__ import annotations

import dataclasses
import email.message

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from otel_eval.app.admin import AdminApi, make_handler
from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.receive.httpmessage import Request
from otel_eval.telemetry.metrics import OTHER, Metrics, render


def _evaluation(trace_id: str = "ab" * 16, *, agent: str | None = "planner",
                findings: list[Finding] | None = None, passed: bool = True,
                tools: tuple[str, ...] = ("search", "search")) -> Evaluation:
    steps = [Step(index=0, span_id="01" * 8, parent_span_id=None, kind="llm", name="chat",
                  input_tokens=100, output_tokens=20, cost_usd=0.01)]
    for i, tool in enumerate(tools, start=1):
        steps.append(Step(index=i, span_id=f"{i + 1:016x}", parent_span_id="01" * 8,
                          kind="tool", name=f"execute_tool {tool}", tool_name=tool))
    traj = Trajectory(trace_id=trace_id, source="otlp", status="complete", steps=steps,
                      service="svc", agent=agent, start_ns=0, end_ns=3_000_000_000)
    return Evaluation(traj, findings or [], Verdict(passed, []))


def _value(reg: CollectorRegistry, name: str, **labels: str) -> float:
    v = reg.get_sample_value(name, labels)
    return 0.0 if v is None else v


def test_evaluation_stored_derives_every_family() -> None:
    m = Metrics()
    findings = [
        Finding("loop", "repeated_tool_call", "error", "3x search", span_ids=["02" * 8]),
        Finding("loop", "cycle", "warning", "a-b-a-b"),
        Finding("non_termination", "halted", "error", "hit the step cap"),
        Finding("budget", "tokens_exceeded", "error", "over", attributes={"budget": "tokens"}),
        # no overrun: a cost within its budget, partly unpriced (it was counted as one)
        Finding("budget", "cost_unknown", "info", "?", attributes={"budget": "cost_usd"}),
        Finding("tool_call", "runtime", "error", "boom", span_ids=[f"{2:016x}"]),
        Finding("tool_call", "selection", "warning", "?", attributes={"tool": "nope"}),
        Finding("lucky_pass", "lucky_pass", "info", "passed despite errors"),
    ]
    m.evaluation_stored(_evaluation(findings=findings), 0.25, superseded=False)
    r = m.registry
    sa = {"service": "svc", "agent": "planner"}
    assert _value(r, "otel_eval_traces_completed_total", **sa, status="complete") == 1
    assert _value(r, "otel_eval_traces_with_loop_total", **sa) == 1  # one trace, two findings
    assert _value(r, "otel_eval_traces_non_terminated_total", **sa) == 1
    assert _value(r, "otel_eval_traces_budget_overruns_total", **sa, budget="tokens") == 1
    assert _value(r, "otel_eval_traces_budget_overruns_total", **sa, budget="cost_usd") == 0
    assert _value(r, "otel_eval_traces_verdicts_total", **sa, verdict="passed") == 1
    assert _value(r, "otel_eval_traces_lucky_passes_total", **sa) == 1
    # the findings carry the service too, so the dashboard's $service reaches them
    assert _value(r, "otel_eval_detector_findings_total", **sa, detector="loop",
                  kind="cycle", severity="warning") == 1
    assert _value(r, "otel_eval_detector_tool_errors_total", **sa, kind="runtime",
                  tool="search") == 1
    assert _value(r, "otel_eval_detector_tool_errors_total", **sa, kind="selection",
                  tool="nope") == 1
    assert _value(r, "otel_eval_trace_steps_sum", **sa) == 2
    assert _value(r, "otel_eval_trace_tokens_sum", **sa) == 120
    assert _value(r, "otel_eval_trace_cost_usd_sum", **sa) == pytest.approx(0.01)
    assert _value(r, "otel_eval_trace_duration_seconds_sum", **sa) == 3.0
    assert _value(r, "otel_eval_evaluation_completion_to_verdict_seconds_count") == 1



def test_a_trace_over_several_budgets_is_one_trace_over_budget() -> None:
    """A runaway run overruns steps, tokens and cost at once: three findings, one trace. The
    budget alerts page on the share of traces over a budget; counted per finding, 4 % of
    runs over three budgets read as 12 % and paged past the 10 % threshold."""
    m = Metrics()
    over = [Finding("budget", f"{b}_exceeded", "error", "over", attributes={"budget": b})
            for b in ("steps", "input_tokens", "cost_usd")]
    m.evaluation_stored(_evaluation(findings=over), 0.1, superseded=False)
    unpriced = Finding("budget", "cost_unknown", "info", "?", attributes={"budget": "cost_usd"})
    m.evaluation_stored(_evaluation("cd" * 16, findings=[unpriced]), 0.1, superseded=False)
    sa = {"service": "svc", "agent": "planner"}
    assert _value(m.registry, "otel_eval_traces_over_budget_total", **sa) == 1
    assert sum(_value(m.registry, "otel_eval_traces_budget_overruns_total", **sa, budget=b)
               for b in ("steps", "input_tokens", "cost_usd")) == 3


def test_a_run_whose_tokens_no_span_recorded_is_no_zero_token_run() -> None:
    """An instrumentation that records no usage (an OpenAI stream asked without usage, the
    tau-bench files): the run's ``usage`` says unknown (None), not 0, and the tokens
    histogram does not observe it, as the cost histogram does not observe an unknown cost.
    A run with some calls counted sums those."""
    m = Metrics()
    silent = _evaluation()
    silent.trajectory.steps[0].input_tokens = silent.trajectory.steps[0].output_tokens = None
    silent.trajectory.steps[0].cost_usd = None
    assert silent.trajectory.usage() == {"input_tokens": None, "output_tokens": None,
                                         "cost_usd": None}
    m.evaluation_stored(silent, 0.25, superseded=False)
    sa = {"service": "svc", "agent": "planner"}
    assert _value(m.registry, "otel_eval_trace_duration_seconds_count", **sa) == 1
    assert _value(m.registry, "otel_eval_trace_tokens_count", **sa) == 0
    some = _evaluation("cd" * 16)
    some.trajectory.steps.append(dataclasses.replace(some.trajectory.steps[0], index=3,
                                                     input_tokens=None, output_tokens=7))
    assert some.trajectory.usage()["input_tokens"] == 100
    assert some.trajectory.usage()["output_tokens"] == 27
    m.evaluation_stored(some, 0.25, superseded=False)
    assert _value(m.registry, "otel_eval_trace_tokens_sum", **sa) == 127


def test_only_runs_that_did_not_end_count_as_non_terminated() -> None:
    m = Metrics()
    for kind in ("no_output", "root_error"):  # the run ended: silent or failed
        m.evaluation_stored(_evaluation(findings=[
            Finding("non_termination", kind, "warning", "x")]), 0.1, superseded=False)
    sa = {"service": "svc", "agent": "planner"}
    assert _value(m.registry, "otel_eval_traces_non_terminated_total", **sa) == 0
    m.evaluation_stored(_evaluation(findings=[
        Finding("non_termination", "incomplete", "error", "x")]), 0.1, superseded=False)
    assert _value(m.registry, "otel_eval_traces_non_terminated_total", **sa) == 1

def test_superseded_evaluation_is_not_double_counted() -> None:
    m = Metrics()
    loop = [Finding("loop", "cycle", "error", "x")]
    m.evaluation_stored(_evaluation(findings=loop), 0.1, superseded=False)
    m.evaluation_stored(_evaluation(findings=loop, passed=False), 0.1, superseded=True)
    r, sa = m.registry, {"service": "svc", "agent": "planner"}
    assert _value(r, "otel_eval_traces_completed_total", **sa, status="complete") == 1
    assert _value(r, "otel_eval_traces_with_loop_total", **sa) == 1
    assert _value(r, "otel_eval_traces_verdicts_total", **sa, verdict="failed") == 0
    assert _value(r, "otel_eval_traces_superseded_total", **sa) == 1
    assert _value(r, "otel_eval_trace_steps_count", **sa) == 1
    assert _value(r, "otel_eval_evaluation_completion_to_verdict_seconds_count") == 2


def test_agent_and_tool_labels_are_capped() -> None:
    m = Metrics(max_pairs=2, max_tools_per_agent=1)
    for i, agent in enumerate(["a", "b", "c", None]):
        m.evaluation_stored(_evaluation(f"{i + 1:032x}", agent=agent), 0.0, superseded=False)
    r = m.registry
    got = {s.labels["agent"] for s in r.collect() if s.name == "otel_eval_traces_completed"
           for s in s.samples}
    assert got == {"a", "b", OTHER}
    for tool in ("t1", "t2"):
        f = Finding("tool_call", "arguments", "error", "bad", attributes={"tool": tool})
        m.evaluation_stored(_evaluation(findings=[f]), 0.0, superseded=False)
    assert _value(r, "otel_eval_detector_tool_errors_total", service=OTHER, agent=OTHER,
                  kind="arguments", tool="t1") == 1
    assert _value(r, "otel_eval_detector_tool_errors_total", service=OTHER, agent=OTHER,
                  kind="arguments", tool=OTHER) == 1


def test_ingest_verbs_and_invariant() -> None:
    m = Metrics()
    m.ingest.spans_received("grpc", 10)
    m.ingest.spans_accepted("grpc", 8)
    m.ingest.spans_rejected("grpc", "invalid_trace_id", 2)
    m.ingest.request_throttled("http", "pending_spans")
    m.ingest.export_duration("grpc", 0.002)
    m.ingest.open_traces(3)
    m.ingest.pending_spans(5)
    m.ingest.trace_released("complete", "root_ended", 3)
    m.ingest.trace_reopened(1, 2)
    m.evaluation.failed("judge", "timeout")
    m.sinks.dropped("forward", "queue_full", 4)
    m.sinks.forwarded(7)
    m.sinks.events_emitted(6)
    r = m.registry
    received = _value(r, "otel_eval_receiver_spans_received_total", protocol="grpc")
    accepted = _value(r, "otel_eval_receiver_spans_accepted_total", protocol="grpc")
    rejected = _value(r, "otel_eval_receiver_spans_rejected_total", protocol="grpc",
                      reason="invalid_trace_id")
    assert received == accepted + rejected
    assert accepted == (_value(r, "otel_eval_assembly_spans_released_total")
                        + _value(r, "otel_eval_assembly_pending_spans"))
    assert _value(r, "otel_eval_receiver_requests_throttled_total", protocol="http",
                  reason="pending_spans") == 1
    assert _value(r, "otel_eval_receiver_export_duration_seconds_count", protocol="grpc") == 1
    assert _value(r, "otel_eval_assembly_open_traces") == 3
    assert _value(r, "otel_eval_assembly_traces_released_total", status="complete",
                  reason="root_ended") == 1
    assert _value(r, "otel_eval_assembly_late_spans_total") == 2
    assert _value(r, "otel_eval_evaluation_failures_total", stage="judge", reason="timeout") == 1
    assert _value(r, "otel_eval_sink_dropped_total", sink="forward", reason="queue_full") == 4
    assert _value(r, "otel_eval_forward_spans_sent_total") == 7
    assert _value(r, "otel_eval_events_emitted_total") == 6


def test_every_name_follows_the_convention() -> None:
    m = Metrics()
    names = [f.name for f in m.registry.collect()]
    assert names and all(n.startswith("otel_eval_") for n in names)
    assert len(names) == len(set(names))


def test_render_openmetrics_carries_trace_id_exemplars() -> None:
    m = Metrics()
    m.evaluation_stored(_evaluation("cd" * 16), 0.5, superseded=False)
    body, ctype = render(m.registry, "application/openmetrics-text; version=1.0.0")
    assert ctype.startswith("application/openmetrics-text")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    exemplars = [s.exemplar for s in families["otel_eval_trace_duration_seconds"].samples
                 if s.exemplar is not None]
    assert exemplars and exemplars[0].labels == {"trace_id": "cd" * 16}
    text, ctype = render(m.registry, "text/plain")
    assert ctype.startswith("text/plain")
    assert b"otel_eval_traces_completed_total" in text and b"trace_id" not in text
    _, ctype = render(m.registry, None)
    assert ctype.startswith("text/plain")


@pytest.mark.parametrize("accept", [
    "application/openmetrics-text; version=abc", "text/plain; version=x.y",
    "application/openmetrics-text; version=1.0.0-rc1", "text/plain; version=1.0." + "9" * 5000],
    ids=["abc", "x.y", "rc1", "5000-digits"])
def test_an_accept_version_that_is_no_number_gets_the_metrics_not_a_500(accept: str) -> None:
    """/metrics is public (no token): whoever reaches the admin port chooses its Accept. A
    version prometheus_client cannot compare (``abc``, ``1.0.0-rc1``) raised TypeError in
    ``choose_encoder``: a 500 with a traceback logged per request. Now the default text format."""
    m = Metrics()
    m.evaluation_stored(_evaluation("cd" * 16), 0.5, superseded=False)
    body, ctype = render(m.registry, accept)
    assert ctype.startswith(("text/plain", "application/openmetrics-text"))
    assert b"otel_eval_traces_completed_total" in body
    admin = AdminApi(m.registry, lambda q: None,  # type: ignore[arg-type,return-value]
                     lambda t: None, lambda t, o: None, lambda: True, lambda: True)
    headers = email.message.Message()
    headers["Host"] = "localhost"
    headers["Accept"] = accept
    answer = make_handler(admin)(Request("GET", "/metrics", "", headers, "127.0.0.1",
                                         lambda _limit: b""))
    assert answer.status == 200 and b"otel_eval_traces_completed_total" in answer.body


def test_a_released_kafka_partition_drops_its_lag_and_offset() -> None:
    """After a rebalance the partition's new owner reports it; the old owner's last lag stayed
    exported, and the dashboard's sum by partition counted the partition twice."""
    registry = CollectorRegistry()
    kafka = Metrics(registry).kafka
    kafka.lag(3, 900, "spans")
    kafka.committed(3, 41, "spans")
    kafka.lag(4, 7, "spans")
    kafka.released(3, "spans")
    kafka.released(9, "logs")  # never reported: nothing to drop, no error
    assert registry.get_sample_value("otel_eval_kafka_lag_records",
                                     {"topic": "spans", "partition": "3"}) is None
    assert registry.get_sample_value("otel_eval_kafka_committed_offset",
                                     {"topic": "spans", "partition": "3"}) is None
    assert registry.get_sample_value("otel_eval_kafka_lag_records",
                                     {"topic": "spans", "partition": "4"}) == 7


def test_a_run_whose_evaluation_failed_observes_no_steps() -> None:
    """Its stand-in (``Evaluator.failed``: ``bare_trajectory``) has no steps: unknown, not a
    0-step run in ``otel_eval_trace_steps`` (its tokens were already not observed)."""
    from otel_eval.app.config import Config
    from otel_eval.base.model import Span, Trace
    from otel_eval.evaluate.evaluator import Evaluator

    spans = [Span("cd" * 16, f"{i:016x}", None if i == 1 else f"{1:016x}", f"s{i}",
                  1_000_000_000, 5_000_000_000) for i in (1, 2)]
    failed = Evaluator(Config()).failed(Trace("cd" * 16, spans, "complete"), RuntimeError("x"))
    m = Metrics()
    m.evaluation_stored(failed, 0.1, superseded=False)
    m.evaluation_stored(_evaluation(), 0.1, superseded=False)
    unknown = {"service": "unknown", "agent": "unknown"}
    assert _value(m.registry, "otel_eval_trace_steps_count", **unknown) == 0
    assert _value(m.registry, "otel_eval_traces_completed_total", **unknown,
                  status="complete") == 1  # counted, not observed
    assert _value(m.registry, "otel_eval_trace_steps_count", service="svc",
                  agent="planner") == 1


def test_tool_label_budget_is_per_service_and_agent() -> None:
    """Two services' agents of one name are two agents: the first one's tools do not spend
    the other's tool label budget (keyed by the agent alone, svc-b's planner had every tool
    error labelled tool="_other" once svc-a's planner had named max_tools_per_agent tools)."""
    m = Metrics(max_tools_per_agent=1)
    for i, (service, tool) in enumerate([("svc-a", "t1"), ("svc-b", "t9")]):
        ev = _evaluation(f"{i + 1:032x}", findings=[
            Finding("tool_call", "arguments", "error", "bad", attributes={"tool": tool})])
        ev.trajectory.service = service
        m.evaluation_stored(ev, 0.0, superseded=False)
    r = m.registry
    assert _value(r, "otel_eval_detector_tool_errors_total", service="svc-a",
                  agent="planner", kind="arguments", tool="t1") == 1
    assert _value(r, "otel_eval_detector_tool_errors_total", service="svc-b",
                  agent="planner", kind="arguments", tool="t9") == 1
