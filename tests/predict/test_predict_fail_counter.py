"""``otel_eval_prediction_runs_predicted_to_fail_total``: runs whose ``p_success`` is below
``prediction.pass_threshold``, per (service, agent); a re-evaluation of the same trace
(superseded) is not counted twice, and a run without a prediction never."""

from __future__ import annotations

import pytest

from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.telemetry.metrics import Metrics

NAME = "otel_eval_prediction_runs_predicted_to_fail_total"


def _evaluation(n: int, p: float | None) -> Evaluation:
    t = Trajectory(trace_id=f"{n:032x}", source="otlp", status="complete", steps=[],
                   service="travel", agent="booker")
    return Evaluation(t, prediction=None if p is None else {"p_success": p, "model": "m"})


def _count(m: Metrics, service: str = "travel", agent: str = "booker") -> float | None:
    return m.registry.get_sample_value(NAME, {"service": service, "agent": agent})


@pytest.mark.parametrize(("threshold", "failing"), [(0.6, 2), (0.5, 1), (0.0, 0), (1.0, 4)])
def test_runs_below_the_pass_threshold_are_counted(threshold: float, failing: int) -> None:
    m = Metrics(prediction=PredictionConfig(pass_threshold=threshold))
    for n, p in enumerate((0.2, 0.59, 0.6, 0.61)):
        m.prediction.predicted(_evaluation(n, p), "travel", "booker", superseded=False)
    assert (_count(m) or 0) == failing


def test_a_superseded_evaluation_and_a_run_without_prediction_are_not_counted() -> None:
    m = Metrics(prediction=PredictionConfig(pass_threshold=0.5))
    m.prediction.predicted(_evaluation(1, 0.1), "travel", "booker", superseded=False)
    m.prediction.predicted(_evaluation(1, 0.1), "travel", "booker", superseded=True)
    m.prediction.predicted(_evaluation(2, None), "travel", "booker", superseded=False)
    assert _count(m) == 1
    assert _count(m, "travel", "other") is None


def test_the_threshold_is_checked_with_the_config() -> None:
    from otel_eval.base.configcheck import FieldErrors

    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(FieldErrors, match="pass_threshold"):
            PredictionConfig(pass_threshold=bad)
