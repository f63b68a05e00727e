"""The rolling AUC is the serving model's (docs/prediction.md: "trust it as far as its own
rolling AUC says"). Outcomes arrive late: after a retrain and a restart with ``--model``, POST
/v1/feedback for runs stored before the swap carries the old model's ``p_success``. Before,
those entered the new model's window, so for days the gauge was the old model's AUC (or a
mix of both) under the new model's name; now a stored prediction of another model is
recorded (verdict, feedback table) but enters no window."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config
from otel_eval.base.results import Evaluation, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.feedback import Feedback
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

AGENT = {"service": "shop", "agent": "assistant"}


def _stored(i: int, p: float, model: str) -> Evaluation:
    traj = Trajectory(trace_id=f"{i:032x}", source="otlp", status="complete", steps=[],
                      service="shop", agent="assistant")
    evaluation = Evaluation(traj, [], Verdict(True, []), evaluated_at_ns=1)
    evaluation.prediction = {"p_success": p, "model": model}
    return evaluation


def test_feedback_for_another_models_prediction_enters_no_window(tmp_path: Path) -> None:
    evaluator = Evaluator(Config())  # the default model serves
    assert evaluator.predictor is not None
    serving = evaluator.predictor.model.label
    registry = CollectorRegistry()
    metrics = Metrics(registry, prediction=PredictionConfig(auc_min_per_class=1))
    store = Store(str(tmp_path / "s.db"))
    # runs the old model predicted (right on both), stored before the restart
    old = [_stored(1, 0.9, "success@0123456789ab"), _stored(2, 0.1, "success@0123456789ab")]
    # runs the serving model predicted (wrong on both)
    new = [_stored(3, 0.2, serving), _stored(4, 0.8, serving)]
    store.put_many(old + new)
    metrics.evaluation_stored(new[0], 0.1, False)  # serve saw a trace of the pair
    feedback = Feedback(store, evaluator, metrics.prediction)
    for ev, outcome in zip(old + new, ("success", "failure") * 2, strict=True):
        assert feedback.record(ev.trace_id, outcome) is not None
        assert store.feedback(ev.trace_id) == outcome
    # the serving model ranks its runs wrong: 0, not the old model's 1 nor a mix (0.5)
    assert registry.get_sample_value("otel_eval_prediction_rolling_auc", AGENT) == 0.0
    store.close()
