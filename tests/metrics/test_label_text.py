"""Label values are valid UTF-8 before ``labels()`` (issue 33, finding 2): one series whose
value holds a lone surrogate made prometheus_client fail every scrape."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.calibration import calibrate
from otel_eval.evaluate.predict.config import PredictionConfig
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


def _labelled_run(i: int, service: str, agent: str) -> Evaluation:
    step = Step(index=0, span_id="01" * 8, parent_span_id=None, kind="llm", name="chat")
    traj = Trajectory(trace_id=f"{i:032x}", source="otlp", status="complete", steps=[step],
                      service=service, agent=agent)
    outcome = "success" if i % 2 else "failure"
    evaluation = Evaluation(traj, [], Verdict(i % 2 == 1, [], outcome=outcome))
    evaluation.prediction = {"p_success": 0.1 + 0.2 * (i % 2), "model": "m"}
    return evaluation


def test_the_rolling_auc_and_agreement_gauges_write_a_lone_surrogate_as_replacement() -> None:
    """The gauges computed at scrape time (the predictor's rolling AUC, the judge agreement)
    labelled with the pair as given: one agent name holding a lone surrogate failed every
    scrape (UnicodeEncodeError), though its histogram's labels were made valid."""
    m = Metrics(CollectorRegistry(), prediction=PredictionConfig(auc_min_per_class=1))
    for i in range(4):
        m.evaluation_stored(_labelled_run(i, "svc\ud800", "\udfffagent"), 0.1, False)
    body = {"service": "svc\ud800", "agent": "\udfffagent",
            "prediction": {"p_success": 0.3, "model": "m"}}
    m.calibration.calibrated(calibrate([("success", body), ("failure", {
        **body, "prediction": {"p_success": 0.1, "model": "m"}})]))
    for accept in (None, "application/openmetrics-text"):
        page = render(m.registry, accept)[0].decode()
        assert 'otel_eval_prediction_rolling_auc{agent="\ufffdagent",service="svc\ufffd"} 1.0' \
            in page
        assert ('otel_eval_judge_agreement_auc{agent="\ufffdagent",score="p_success",'
                'service="svc\ufffd"} 1.0') in page


ESC = "\x1b]52;c;cHduZWQ=\x07\r\x1b[2K\x9b2J\u202e"  # OSC 52, CR, erase line, CSI, RLO
SHOWN = "\\x1b]52;c;cHduZWQ=\\x07\\r\\x1b[2K\\x9b2J\\u202e"


def _controls(page: str) -> list[str]:
    """The control characters of a /metrics page (its line breaks aside)."""
    return [c for c in page if c != "\n" and (not c.isprintable() or "\u202a" <= c <= "\u202e")]


def test_control_characters_in_label_values_are_escaped_as_printable_writes_them() -> None:
    """``curl /metrics`` in a terminal: a service, agent or tool name from a sender's span
    carried an OSC 52 clipboard write, a carriage return and a cursor move to the operator's
    terminal (prometheus_client escapes a newline, a quote and a backslash only)."""
    m = Metrics(CollectorRegistry(), prediction=PredictionConfig(auc_min_per_class=1))
    for i in range(4):
        m.evaluation_stored(_labelled_run(i, "svc" + ESC, "agent" + ESC), 0.1, False)
    step = Step(index=0, span_id="01" * 8, parent_span_id=None, kind="llm", name="chat")
    traj = Trajectory(trace_id="ab" * 16, source="otlp", status="complete", steps=[step],
                      service="svc" + ESC, agent="agent" + ESC)
    finding = Finding("tool_call", "selection", "error", "called it",
                      attributes={"tool": "fetch" + ESC})
    m.evaluation_stored(Evaluation(traj, [finding], Verdict(False, [])), 0.1, False)
    for accept in (None, "application/openmetrics-text"):
        page = render(m.registry, accept)[0].decode()
        assert not _controls(page)
        assert f'tool="fetch{SHOWN}"' in page.replace("\\\\", "\\")
        assert (f'otel_eval_prediction_rolling_auc{{agent="agent{SHOWN}",service="svc{SHOWN}"}}'
                in page.replace("\\\\", "\\"))


def test_issue_gauges_escape_control_characters_of_node_title_and_agent() -> None:
    from otel_eval.telemetry.issues import IssueRow, families

    row = IssueRow(("node", "agent" + ESC, "i1", "title" + ESC), 0.5, 3, None,
                   (("svc" + ESC, "agent" + ESC),), None, "high", "new")
    registry = CollectorRegistry()
    registry.register(_Fixed(list(families((row,), {}, {}, None, None, {}))))
    page = render(registry, None)[0].decode()
    assert not _controls(page)
    assert f'node="agent{SHOWN}"' in page.replace("\\\\", "\\")


class _Fixed:
    def __init__(self, found: list[object]) -> None:
        self.found = found

    def collect(self) -> list[object]:
        return self.found
