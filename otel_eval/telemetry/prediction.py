"""Self-metrics of the success predictor (``evaluate/predict``) while ``serve`` runs.

    evaluation stored -> p_success histogram per agent; below the pass threshold, the
                         predicted-to-fail counter
    outcome known (outcome attribute at evaluation, or POST /v1/feedback later)
      -> per-(service, agent) window of the last ``auc_window`` labelled predictions
      -> rolling AUC, computed when Prometheus scrapes (absent until each class has
         ``auc_min_per_class`` runs)

Metrics (declared on the ``Metrics`` registry, agent names capped as everywhere else):

    otel_eval_prediction_p_success{service,agent}          histogram, 0..1
    otel_eval_prediction_runs_predicted_to_fail_total{service,agent}
                                                           runs with p_success below
                                                           prediction.pass_threshold
    otel_eval_prediction_labelled_total{service,agent,outcome}
                                                           success|failure, labels entering
                                                           the window: new, or changed (the
                                                           window's pair; _other's declared
                                                           at 0: after a restart, feedback
                                                           for runs of pairs not seen since)
    otel_eval_prediction_rolling_auc{service,agent}        gauge, AUC of the window

Bounded: one window per (service, agent) pair of the pair budget (``labels.SeriesCap``: the
same labels as the histogram; two services' agents of one name have a window each; feedback
only looks its pair up, never admits one), and ``_other``'s, each at
most ``auc_window`` entries; a trace labelled twice (feedback after an outcome attribute, or
corrected feedback) replaces its entry, and is counted again only when its outcome changed
(the same outcome sent again, or re-evaluated with it, is no new label: before, five repeats
counted five); a run re-evaluated under another pair (late spans naming its agent) moves to
that pair's window. The AUC is the Mann-Whitney statistic with tied scores averaged: one sort,
O(n log n) in the window, done at scrape time for the windows that changed since (a label
costs O(1), so runs that all carry an outcome do not pay a sort each). Thread-safe (the
engine's worker, the admin server and the scrape all touch the windows).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from otel_eval.telemetry.auc import AUC_MIN_PER_CLASS, AUC_WINDOW, AucSettings, RollingAuc
from otel_eval.telemetry.declare import Declarer
from otel_eval.telemetry.labels import OTHER, SeriesCap

if TYPE_CHECKING:
    from otel_eval.base.results import Evaluation

P_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
AUC_NAME = "otel_eval_prediction_rolling_auc"
AUC_DOC = ("AUC of the predictor's last labelled predictions (window prediction.auc_window), "
           "per service and agent.")
AUC_LABELS = ["service", "agent"]


OUTCOMES = ("success", "failure")  # the outcome label's values

# p_success below which a run is predicted to fail, when no setting gives it
PASS_THRESHOLD = 0.5


class _AucCollector(Collector):
    """The rolling AUC gauge, computed when scraped."""

    def __init__(self, owner: PredictionMetrics) -> None:
        self._owner = owner

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(AUC_NAME, AUC_DOC, labels=AUC_LABELS)]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(AUC_NAME, AUC_DOC, labels=AUC_LABELS)
        for pair, value in self._owner.rolling_auc().items():
            family.add_metric(list(pair), value)
        yield family


class PredictionMetrics:
    """The predictor's metrics and rolling AUC windows (see the module docstring)."""

    def __init__(self, d: Declarer, cap: SeriesCap, config: AucSettings | None = None) -> None:
        self._cap = cap
        self._window = (config.auc_window, config.auc_min_per_class) if config else (
            AUC_WINDOW, AUC_MIN_PER_CLASS)
        # PredictionConfig.pass_threshold (an AucSettings without one: the default)
        self.pass_threshold = float(getattr(config, "pass_threshold", PASS_THRESHOLD))
        self.h_p = d.histogram("prediction_p_success",
                                "Predicted probability of success per trace (success "
                                "predictor).", ("service", "agent"), P_BUCKETS)
        self.c_fail = d.counter("prediction_runs_predicted_to_fail",
                                "Runs the success predictor expects to fail (p_success below "
                                "prediction.pass_threshold), per agent.", ("service", "agent"))
        self.c_labelled = d.counter("prediction_labelled",
                                     "Predicted traces labelled with an outcome (outcome "
                                     "attribute or feedback), by outcome: once per trace in "
                                     "the AUC window, again only when its outcome changes.",
                                     ("service", "agent", "outcome"))
        for outcome in OUTCOMES:  # where feedback lands after a restart: seen from its first
            self._cap.series(self.c_labelled, OTHER, OTHER, outcome)
        # (service, agent) labels -> window: keyed by the agent alone, two services' agents of
        # one name shared a window (right on one, inverted on the other: 0.5 for both)
        self._windows: dict[tuple[str, str], RollingAuc] = {}
        self._lock = threading.Lock()
        cap.on_expired(self._forget)
        d.collector(_AucCollector(self))

    def predicted(self, evaluation: Evaluation, service: str, agent: str,
                  superseded: bool) -> None:
        """A stored evaluation with a prediction; its outcome too when it carried one."""
        prediction = evaluation.prediction
        if prediction is None:
            return
        p = float(prediction["p_success"])
        t = evaluation.trajectory
        if not superseded:
            self._cap.series(self.h_p, service, agent).observe(p, {"trace_id": t.trace_id})
            if p < self.pass_threshold:
                self._cap.series(self.c_fail, service, agent).inc()
        outcome = evaluation.verdict.outcome if evaluation.verdict else None
        if outcome is not None:
            self._label((service, agent), t.trace_id, p, outcome == "success", superseded)

    def labelled(self, body: dict[str, Any], outcome: str) -> None:
        """An outcome learnt later (POST /v1/feedback) for a stored per-trace object. Its pair
        is only looked up, as the agreement gauges do: a pair with series (a trace seen) gets
        its window; any other (a retired agent's stored run, after a restart) counts under
        ``_other`` and takes no place in the budget (it took the live agents' places)."""
        prediction = body.get("prediction")
        if not isinstance(prediction, dict) or "p_success" not in prediction:
            return
        pair = self._cap.admitted(body.get("service"), body.get("agent")) or (OTHER, OTHER)
        self._label(pair, str(body["trace_id"]), float(prediction["p_success"]),
                    outcome == "success")

    def _forget(self, pairs: set[tuple[str, str]]) -> None:
        """Expired pairs' windows go with their series (their AUC gauge with them)."""
        with self._lock:
            for pair in pairs:
                self._windows.pop(pair, None)

    def rolling_auc(self) -> dict[tuple[str, str], float]:
        """(service, agent) -> AUC of its window, for the pairs that have one."""
        with self._lock:
            values = {pair: w.value() for pair, w in self._windows.items()}
        return {pair: v for pair, v in values.items() if v is not None}

    def _label(self, pair: tuple[str, str], trace_id: str, p: float, success: bool,
               superseded: bool = False) -> None:
        with self._lock:
            # a re-evaluation (late spans) may name another pair (the agent its root names):
            # the superseded prediction leaves the window it was labelled in, and the label
            # it carries there is no new one
            moved = self._moved(pair, trace_id) if superseded else None
            window = self._windows.get(pair)
            if window is None:
                window = self._windows[pair] = RollingAuc(*self._window)
            new = window.add(trace_id, p, success) and moved is not success
        if new:  # a repeat of the label the window holds is not counted again
            self._cap.series(self.c_labelled, *pair, "success" if success else "failure").inc()

    def _moved(self, pair: tuple[str, str], trace_id: str) -> bool | None:
        """Under the lock: ``trace_id``'s entry taken out of every window but ``pair``'s; the
        outcome it held (None: in none). A superseded evaluation only (rare: late spans), so
        a label pays no look-up in every window."""
        moved = None
        for other, window in self._windows.items():
            if other != pair:
                held = window.remove(trace_id)
                moved = held if held is not None else moved
        return moved
