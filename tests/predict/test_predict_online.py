"""The rolling AUC of the predictor's own predictions: exact, bounded, one entry per trace."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry
from sklearn.metrics import roc_auc_score

from otel_eval.base.configcheck import FieldErrors
from otel_eval.base.results import Evaluation, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.telemetry.auc import RollingAuc, auc
from otel_eval.telemetry.metrics import OTHER, Metrics


def _predicted(i: int, service: str | None, agent: str) -> Evaluation:
    """A stored run of (service, agent) with a prediction and no outcome: serve has seen a
    trace of the pair, so it has series (feedback looks the pair up, never admits it)."""
    traj = Trajectory(trace_id=f"{i:032x}", source="otlp", status="complete", steps=[],
                      service=service, agent=agent)
    evaluation = Evaluation(traj, [], Verdict(True, []))
    evaluation.prediction = {"p_success": 0.5, "model": "m"}
    return evaluation


@pytest.mark.parametrize("seed", range(5))
def test_auc_equals_scikit_learn_with_ties(seed: int) -> None:
    rng = random.Random(seed)
    scores = [rng.choice([0.1, 0.25, 0.5, 0.75, 0.9]) for _ in range(200)]
    labels = [rng.random() < s for s in scores]
    got = auc(scores, labels)
    assert got is not None and got == pytest.approx(roc_auc_score(labels, scores))


def test_auc_needs_both_classes() -> None:
    assert auc([0.2, 0.3], [True, True]) is None
    assert auc([], []) is None
    assert auc([0.2, 0.3], [False, True]) == 1.0


def test_window_is_bounded_and_a_relabelled_trace_replaces_its_entry() -> None:
    window = RollingAuc(window=4, min_per_class=1)
    window.add("a", 0.9, True)
    assert window.value() is None  # one class only
    window.add("b", 0.1, False)
    assert window.value() == 1.0
    window.add("b", 0.1, True)  # corrected label: still one entry, now one class
    assert window.value() is None and len(window) == 2
    for i in range(10):
        window.add(f"t{i}", i / 10, i % 2 == 0)
    assert len(window) == 4  # the last four only: t6..t9
    assert window.value() == auc([0.6, 0.7, 0.8, 0.9], [True, False, True, False])


def test_min_per_class_holds_the_value_back() -> None:
    window = RollingAuc(window=100, min_per_class=3)
    values = []
    for i in range(6):
        window.add(f"t{i}", i / 10, i >= 3)
        values.append(window.value())
    assert values[:5] == [None] * 5 and values[5] == 1.0


def test_gauge_per_agent_appears_with_enough_labels_and_goes_with_them() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry, prediction=PredictionConfig(auc_min_per_class=1))
    m.evaluation_stored(_predicted(1, "shop", "planner"), 0.1, False)
    body = {"trace_id": "ab" * 16, "service": "shop", "agent": "planner",
            "prediction": {"p_success": 0.8}}
    m.prediction.labelled(body, "success")
    assert registry.get_sample_value("otel_eval_prediction_rolling_auc",
                                     {"service": "shop", "agent": "planner"}) is None
    m.prediction.labelled({**body, "trace_id": "cd" * 16,
                           "prediction": {"p_success": 0.3}}, "failure")
    assert registry.get_sample_value("otel_eval_prediction_rolling_auc",
                                     {"service": "shop", "agent": "planner"}) == 1.0
    m.prediction.labelled(body, "failure")  # corrected: both failed, no AUC to report
    assert registry.get_sample_value("otel_eval_prediction_rolling_auc",
                                     {"service": "shop", "agent": "planner"}) is None
    assert registry.get_sample_value("otel_eval_prediction_labelled_total",
                                     {"service": "shop", "agent": "planner",
                                      "outcome": "failure"}) == 2
    m.prediction.labelled({"trace_id": "ef" * 16, "agent": "planner"}, "success")  # none
    assert registry.get_sample_value("otel_eval_prediction_labelled_total",
                                     {"service": "shop", "agent": "planner",
                                      "outcome": "success"}) == 1


def test_labelled_counts_a_trace_once_per_outcome_it_takes() -> None:
    """The same outcome sent again (a retried POST /v1/feedback) is no new label: before, five
    successes then five failures for one trace counted 5 and 5 while the window held 1."""
    registry = CollectorRegistry()
    m = Metrics(registry)
    m.evaluation_stored(_predicted(1, None, "planner"), 0.1, False)
    body = {"trace_id": "ab" * 16, "agent": "planner", "prediction": {"p_success": 0.8}}

    def counted() -> tuple[float | None, ...]:
        return tuple(registry.get_sample_value(
            "otel_eval_prediction_labelled_total",
            {"service": "unknown", "agent": "planner", "outcome": o})
            for o in ("success", "failure"))

    for _ in range(5):
        m.prediction.labelled(body, "success")
    assert counted() == (1, None)
    for _ in range(5):
        m.prediction.labelled(body, "failure")  # corrected: one new label
    assert counted() == (1, 1)
    m.prediction.labelled(body, "success")  # and back
    assert counted() == (2, 1)
    m.prediction.labelled({**body, "trace_id": "cd" * 16}, "success")  # another trace
    assert counted() == (3, 1)


def test_a_run_superseded_under_another_agent_leaves_its_old_window() -> None:
    """Late spans named the agent of a run first evaluated without its root (agent unknown,
    p_success 0: it never ended), after an outcome was recorded for it: the re-evaluation,
    carrying that outcome, labelled it under its agent and the unknown pair's window kept the
    superseded prediction, so one label was counted twice and the old figure stayed in an
    AUC; the trace moves, counted once."""
    registry = CollectorRegistry()
    m = Metrics(registry, prediction=PredictionConfig(auc_min_per_class=1))
    first = _predicted(1, None, "")
    first.prediction = {"p_success": 0.0, "model": "m"}
    m.evaluation_stored(first, 0.1, False)
    m.prediction.labelled({"trace_id": f"{1:032x}", "service": None, "agent": "",
                           "prediction": {"p_success": 0.0}}, "failure")  # feedback
    again = _predicted(1, None, "booker")
    again.verdict = Verdict(False, ["outcome: failure"], outcome="failure")
    again.prediction = {"p_success": 0.84, "model": "m"}
    m.evaluation_stored(again, 0.1, True)  # superseded, the recorded outcome applied

    def counted(agent: str) -> float | None:
        return registry.get_sample_value("otel_eval_prediction_labelled_total", {
            "service": "unknown", "agent": agent, "outcome": "failure"})
    assert (counted("unknown") or 0) + (counted("booker") or 0) == 1
    m.evaluation_stored(_predicted(2, None, ""), 0.1, False)  # a success for the old pair:
    m.prediction.labelled({"trace_id": f"{2:032x}", "service": None, "agent": "",
                           "prediction": {"p_success": 0.9}}, "success")
    assert registry.get_sample_value("otel_eval_prediction_rolling_auc", {
        "service": "unknown", "agent": "unknown"}) is None  # its failure moved to booker


def test_rolling_auc_is_per_service_and_agent() -> None:
    """The windows were keyed by the agent alone: two services' "assistant", the predictor
    right on one and inverted on the other, shared one window and both read 0.5."""
    registry = CollectorRegistry()
    m = Metrics(registry, prediction=PredictionConfig(auc_min_per_class=1))
    m.evaluation_stored(_predicted(1, "shop", "assistant"), 0.1, False)
    m.evaluation_stored(_predicted(2, "bank", "assistant"), 0.1, False)
    for i, ok in enumerate((True, False)):
        for service, p in (("shop", 0.9 if ok else 0.1), ("bank", 0.1 if ok else 0.9)):
            m.prediction.labelled({"trace_id": f"{service}{i:028x}", "service": service,
                                   "agent": "assistant", "prediction": {"p_success": p}},
                                  "success" if ok else "failure")
    for service, want in (("shop", 1.0), ("bank", 0.0)):
        assert registry.get_sample_value("otel_eval_prediction_rolling_auc", {
            "service": service, "agent": "assistant"}) == want


def test_feedback_for_a_pair_without_series_takes_no_place_in_the_budget() -> None:
    """Outcomes sent for stored runs (POST /v1/feedback) admitted their (service, agent)
    pair: after a restart, feedback for retired agents' runs took the first
    ``admin.metrics_max_pairs`` places, and the live agents' traces went to ``_other`` on
    every per-trace metric. The pair budget is taken by the traces seen (docs/metrics.md):
    feedback for a pair with series goes to its window; for any other, to ``_other``'s."""
    registry = CollectorRegistry()
    m = Metrics(registry, max_pairs=1, prediction=PredictionConfig(auc_min_per_class=1))
    for i, outcome in enumerate(("success", "failure")):  # a retired agent's stored runs
        m.prediction.labelled({"trace_id": f"{i:032x}", "service": "shop", "agent": "retired",
                               "prediction": {"p_success": 0.9 - 0.8 * i}}, outcome)
    m.evaluation_stored(_predicted(10, "shop", "live"), 0.1, False)
    live = {"service": "shop", "agent": "live"}
    assert registry.get_sample_value("otel_eval_prediction_p_success_count", live) == 1
    assert registry.get_sample_value("otel_eval_traces_completed_total", {
        **live, "status": "complete"}) == 1
    other = {"service": OTHER, "agent": OTHER}
    assert registry.get_sample_value("otel_eval_prediction_rolling_auc", other) == 1.0
    assert registry.get_sample_value("otel_eval_prediction_rolling_auc", {
        "service": "shop", "agent": "retired"}) is None
    assert registry.get_sample_value("otel_eval_prediction_labelled_total", {
        "service": OTHER, "agent": OTHER, "outcome": "failure"}) == 1
    for i, outcome in enumerate(("success", "failure")):  # the live pair's: its own window
        m.prediction.labelled({"trace_id": f"{20 + i:032x}", **live,
                               "prediction": {"p_success": 0.2 + 0.6 * i}}, outcome)
    assert registry.get_sample_value("otel_eval_prediction_rolling_auc", live) == 0.0


def test_a_class_minimum_that_cannot_fit_in_the_window_is_refused() -> None:
    # auc_min_per_class 600 of each class in a window of 1,000: the gauge could never be
    # reported, and the configuration was taken without a word.
    with pytest.raises(FieldErrors, match=r"auc_min_per_class.*never be reported"):
        PredictionConfig(auc_window=1000, auc_min_per_class=600)
    PredictionConfig(auc_window=1000, auc_min_per_class=500)  # both classes fill it
