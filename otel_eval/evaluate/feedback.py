"""Stage: evaluate, known outcomes sent after the fact (``POST /v1/feedback``).

    outcome -> [store.get -> Evaluator.with_outcome -> store.put_feedback_and_verdict
               (only onto the revision read; re-read and again when it was re-evaluated)]
            -> the predictor's rolling AUC (PredictionMetrics.labelled; a prediction of the
               serving model only: one stored before a model swap enters no window)
            -> ``recorded()``: the cached calibration report is stale (GET /v1/calibration
               and the agreement gauges count the outcome at their next read)
            -> ``published.publish_stored(body, evaluated_at_ns)``: the stored object, its
               verdict re-judged (read back and handed over under ``published.ordered()``),
               to the Kafka results topic (``outputs.kafka``), the last record of its key

The one writer of the feedback table and of a stored row's findings and verdict after the
fact (the engine applies a stored outcome itself when it re-evaluates). The outcome's row and
the verdict re-judged with it are one write: of two outcomes sent for a trace at once, the
last to commit wrote both, so the verdict never contradicts the feedback table (which
calibration, the engine and training read). Runs on the admin server's request threads,
never on the event loop.
"""

from __future__ import annotations

import reprlib
import time
from collections.abc import Callable
from typing import Any

from otel_eval.evaluate.evaluator import Evaluator, normalize_outcome
from otel_eval.outputs.deps import JudgedResults
from otel_eval.store.base import EvaluationStore
from otel_eval.telemetry.prediction import PredictionMetrics

# Re-reads when the trace was re-evaluated between reading and writing its verdict.
FEEDBACK_ATTEMPTS = 5


class Feedback:
    def __init__(self, store: EvaluationStore, evaluator: Evaluator,
                 metrics: PredictionMetrics, *,
                 wall_clock_ns: Callable[[], int] = time.time_ns,
                 recorded: Callable[[], None] = lambda: None,
                 published: JudgedResults | None = None) -> None:
        """``published``: where the stored object goes again once the outcome re-judged its
        verdict (the Kafka results topic, when on: ``publish_stored``)."""
        self.store = store
        self._published = published
        self.evaluator = evaluator
        self.metrics = metrics
        self._recorded = recorded
        self._wall_clock_ns = wall_clock_ns

    def record(self, trace_id: str, outcome_value: object) -> dict[str, Any] | None:
        """Record a known outcome for an evaluated trace and re-judge its stored verdict.

        A trace not evaluated yet gets None (404) and nothing is recorded: an outcome sent
        ahead of its trace would decide the verdict of spans nobody has seen (anyone holding
        the id from a ``traceparent`` could pre-empt it). Send it once the trace is stored.
        """
        outcome = normalize_outcome(outcome_value)
        if outcome is None:
            # reprlib: a bounded quote of whatever JSON the sender put there (the API's 400)
            raise ValueError(f"outcome {reprlib.repr(outcome_value)} is not success/failure "
                             "(or 1/0)")
        store = self.store
        written = False
        for _ in range(FEEDBACK_ATTEMPTS):
            # the evaluation's time before its body: a replay (by another worker, or after a
            # restart) evaluates a trace at the same revision again, and the write lands only
            # on the evaluation read (a body newer than the time read is refused, read again)
            stamp = store.stamp(trace_id)
            body = store.get(trace_id) if stamp is not None else None
            if stamp is None or body is None:
                return None  # nothing recorded: see the docstring
            updated = self.evaluator.with_outcome(body, outcome)
            if store.put_feedback_and_verdict(trace_id, body["revision"], outcome,
                                              self._wall_clock_ns(), updated["findings"],
                                              updated["verdict"], evaluated_at_ns=stamp[1]):
                written = True
                break
            # re-evaluated since it was read: nothing written, read the new revision
        else:  # re-evaluated at every attempt: keep the outcome, the engine's next
            # re-evaluation of the trace applies it
            store.put_feedback(trace_id, outcome, self._wall_clock_ns())
        self._recorded()  # the outcome's row is written: the calibration report is stale
        if written and self._published is not None:  # the verdict changed: what the
            with self._published.ordered():  # results API returns now, read after our
                got = store.get_versioned(trace_id)  # write, handed over in read order
                if got is not None:
                    self._published.publish_stored(*got)
        else:
            got = store.get_versioned(trace_id)  # with whatever the judge wrote meanwhile
        stored = got[0] if got is not None else None
        if stored is not None and self._serving_model(stored):
            self.metrics.labelled(stored, outcome)  # the predictor's rolling AUC
        return stored

    def _serving_model(self, body: dict[str, Any]) -> bool:
        """Whether ``body``'s prediction is the serving model's: the rolling AUC is that
        model's, and a run predicted before a model swap (stored before a restart with
        another ``--model``, or another otel-eval's default) would put the old model's
        ranking in the new model's window."""
        predictor = self.evaluator.predictor
        prediction = body.get("prediction")
        return predictor is not None and isinstance(prediction, dict) \
            and prediction.get("model") == predictor.model.label
