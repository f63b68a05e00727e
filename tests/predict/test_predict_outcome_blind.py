"""Outcome-blind features: what the detectors write only because the outcome is known (the
outcome attribute, or feedback applied when the engine re-evaluates) never reaches them."""

from __future__ import annotations

from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.detectors import Detectors
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.predict.features import features


def _trajectory() -> Trajectory:
    root = Step(index=0, span_id="0" * 16, parent_span_id=None, kind="agent", name="run")
    failed = Step(index=1, span_id="0" * 15 + "1", parent_span_id="0" * 16, kind="tool",
                  name="execute_tool edit_file", tool_name="edit_file",
                  arguments={"path": "a"}, result="Error: permission denied",
                  status="error", error="IOError", start_ns=1, end_ns=2)
    answer = Step(index=2, span_id="0" * 15 + "2", parent_span_id="0" * 16, kind="llm",
                  name="chat", output_text="done", finish_reasons=["stop"], start_ns=3,
                  end_ns=4)
    return Trajectory("ab" * 16, "otlp", "complete", [root, failed, answer], output="done",
                      agent="agent", start_ns=0, end_ns=5)


def test_a_known_success_does_not_lower_the_error_count_of_an_unrecovered_failure() -> None:
    """With the outcome success the recovery detector reports ``unrecovered`` (severity
    warning) where it reports ``gave_up`` (error) without one; the features read it as
    ``gave_up``, and so must its severity: the same run, labelled or not, the same features
    (before, a labelled success had one error fewer and one warning more: the label leaked
    into ``findings.error`` / ``findings.warning``)."""
    detectors = Detectors(DetectorsConfig())
    t = _trajectory()
    known, _ = detectors.evaluate(t, "success")
    unknown, _ = detectors.evaluate(t, None)
    assert ("recovery", "unrecovered") in {(f.detector, f.kind) for f in known}
    assert features(Evaluation(t, known)) == features(Evaluation(t, unknown))
