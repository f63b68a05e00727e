"""Label values are valid UTF-8 before ``labels()`` (issue 33, finding 2): one series whose
value holds a lone surrogate made prometheus_client fail every scrape."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.telemetry.metrics import Metrics, render


def test_a_lone_surrogate_in_a_label_value_is_written_as_replacement() -> None:
    step = Step(index=0, span_id="01" * 8, parent_span_id=None, kind="llm", name="chat")
    traj = Trajectory(trace_id="ab" * 16, source="otlp", status="complete", steps=[step],
                      service="svc\ud800", agent="\udfffagent")
    finding = Finding("tool_call", "selection", "error", "called it",
                      attributes={"tool": "\ud800x"})
    m = Metrics(CollectorRegistry())
    m.evaluation_stored(Evaluation(traj, [finding], Verdict(False, [])), 0.1, False)
    for accept in (None, "application/openmetrics-text"):
        body, _ = render(m.registry, accept)
        page = body.decode()
        assert 'tool="\ufffdx"' in page and 'agent="\ufffdagent"' in page
