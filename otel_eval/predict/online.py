"""Stage: predict (online). The predictor's own metrics while ``serve`` runs.

    evaluation stored -> p_success histogram per agent
    outcome known (outcome attribute at evaluation, or POST /v1/feedback later)
      -> per-agent window of the last ``auc_window`` labelled predictions
      -> rolling AUC gauge (absent until each class has ``auc_min_per_class`` runs)

Metrics (declared on the ``Metrics`` registry, agent names capped as everywhere else):

    otel_eval_prediction_p_success{service,agent}          histogram, 0..1
    otel_eval_prediction_labelled_total{agent,outcome}     success|failure, predictions labelled
    otel_eval_prediction_rolling_auc{agent}                gauge, AUC of the window

Bounded: one window per (capped) agent, each at most ``auc_window`` entries; a trace labelled
twice (feedback after an outcome attribute, or corrected feedback) replaces its entry. The
AUC is the Mann-Whitney statistic with tied scores averaged: one sort, O(n log n) per label.
Thread-safe (the engine's worker and the admin server both report).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from otel_eval.predict.config import PredictionConfig

if TYPE_CHECKING:
    from otel_eval.metrics import Metrics
    from otel_eval.model import Evaluation

P_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def auc(scores: list[float], labels: list[bool]) -> float | None:
    """Area under the ROC curve (ties count half); None without both classes."""
    positives = sum(labels)
    negatives = len(labels) - positives
    if not positives or not negatives:
        return None
    order = sorted(range(len(scores)), key=scores.__getitem__)
    rank_sum, i = 0.0, 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        mid_rank = (i + j) / 2 + 1  # ranks i+1 .. j+1, averaged over the tie
        rank_sum += mid_rank * sum(labels[order[k]] for k in range(i, j + 1))
        i = j + 1
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


class RollingAuc:
    """The last ``window`` labelled predictions of one agent, by trace id."""

    def __init__(self, window: int, min_per_class: int) -> None:
        self.window, self.min_per_class = window, min_per_class
        self._items: OrderedDict[str, tuple[float, bool]] = OrderedDict()

    def add(self, trace_id: str, p: float, success: bool) -> float | None:
        """Record a labelled prediction; the AUC of the window now (None: too few)."""
        self._items.pop(trace_id, None)
        self._items[trace_id] = (p, success)
        while len(self._items) > self.window:
            self._items.popitem(last=False)
        labels = [y for _, y in self._items.values()]
        successes = sum(labels)
        if min(successes, len(labels) - successes) < self.min_per_class:
            return None
        return auc([p for p, _ in self._items.values()], labels)

    def __len__(self) -> int:
        return len(self._items)


class PredictionMetrics:
    """The predictor's metrics and rolling AUC windows (see the module docstring)."""

    def __init__(self, m: Metrics, config: PredictionConfig | None = None) -> None:
        self._m = m
        self._config = config or PredictionConfig()
        self.h_p = m._histogram("prediction_p_success",
                                "Predicted probability of success per trace (success "
                                "predictor).", ("service", "agent"), P_BUCKETS)
        self.c_labelled = m._counter("prediction_labelled",
                                     "Predictions whose outcome became known, by outcome.",
                                     ("agent", "outcome"))
        from prometheus_client import Gauge
        self.g_auc = Gauge("prediction_rolling_auc",
                           "AUC of the predictor's last labelled predictions (window "
                           "prediction.auc_window), per agent.", ["agent"],
                           namespace="otel_eval", registry=m.registry)
        self._windows: dict[str, RollingAuc] = {}
        self._lock = threading.Lock()

    def predicted(self, evaluation: Evaluation, service: str, agent: str,
                  superseded: bool) -> None:
        """A stored evaluation with a prediction; its outcome too when it carried one."""
        prediction = evaluation.prediction
        if prediction is None:
            return
        p = float(prediction["p_success"])
        t = evaluation.trajectory
        if not superseded:
            self._m._series(self.h_p, service, agent).observe(p, {"trace_id": t.trace_id})
        outcome = evaluation.verdict.outcome if evaluation.verdict else None
        if outcome is not None:
            self._label(agent, t.trace_id, p, outcome == "success")

    def labelled(self, body: dict[str, Any], outcome: str) -> None:
        """An outcome learnt later (POST /v1/feedback) for a stored per-trace object."""
        prediction = body.get("prediction")
        if not isinstance(prediction, dict) or "p_success" not in prediction:
            return
        self._label(self._m._agent(body.get("agent")), str(body["trace_id"]),
                    float(prediction["p_success"]), outcome == "success")

    def _label(self, agent: str, trace_id: str, p: float, success: bool) -> None:
        self._m._series(self.c_labelled, agent, "success" if success else "failure").inc()
        with self._lock:
            window = self._windows.get(agent)
            if window is None:
                cfg = self._config
                window = self._windows[agent] = RollingAuc(cfg.auc_window,
                                                           cfg.auc_min_per_class)
            value = window.add(trace_id, p, success)
            if value is not None:
                self.g_auc.labels(agent).set(value)
            else:  # too few of a class (again: a corrected label): no stale value
                with contextlib.suppress(KeyError):
                    self.g_auc.remove(agent)
