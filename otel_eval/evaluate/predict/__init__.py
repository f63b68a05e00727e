"""Stage: predict. An evaluation -> ``prediction: {p_success, model}`` from a trained model.

    Evaluation -> features (no LLM, outcome-blind)  \
               -> run text -> TF-IDF terms        -> Model (JSON file, plain Python)
      -> {"p_success": 0.83, "model": "success@3f2a9c0e1b7d"}

``Predictor`` is a pure function of the evaluation, so it runs wherever evaluation runs
(``Evaluator.evaluate`` calls it). Training lives in ``otel_eval.evaluate.predict.train`` and
``.regression`` (the only modules importing scikit-learn), online AUC and metrics in
``otel_eval.telemetry.prediction``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from otel_eval.base.results import Evaluation, Finding
from otel_eval.evaluate.predict.features import (
    FEATURE_PREFIX_END,
    FEATURE_PREFIX_PROGRAM,
    FEATURE_PREFIX_TOOL,
    features,
    judge_features,
)
from otel_eval.evaluate.predict.modelfile import Model, ModelFileError, agent_key, load_model
from otel_eval.evaluate.predict.text import run_text

__all__ = ["Model", "ModelFileError", "Predictor", "Reading", "load_model"]


@dataclass(frozen=True)
class Reading:
    """What the predictor read of a run: its features (None: the run did not finish on its
    own terms, p_success 0), its text and its agent. Kept by ``eval --judge`` to predict the
    run again with the judge's scores once its result was cut to the stored bounds."""

    values: dict[str, float] | None
    text: str
    agent: str


class Predictor:
    """A loaded model applied to evaluations."""

    def __init__(self, model: Model) -> None:
        self.model = model
        # a model trained before features version 4 names no end.* feature: they are not
        # computed for it
        names = [n for m in (model, *model.agent_models.values()) for n in m.features]
        self._end = any(n.startswith(FEATURE_PREFIX_END) for n in names)
        # one trained without name_features (regression.HYPERPARAMETERS) names no tool.* or
        # program.* feature: they are not computed for it
        self._names = any(n.startswith((FEATURE_PREFIX_TOOL, FEATURE_PREFIX_PROGRAM))
                          for n in names)
        # the run's text is read when a model reads it
        self._text = any(m.text is not None for m in (model, *model.agent_models.values()))

    @classmethod
    def from_file(cls, path: str) -> Predictor:
        return cls(load_model(path))

    def predict(self, evaluation: Evaluation,
                ending: Sequence[Finding] | None = None) -> dict[str, Any]:
        """The model's ``p_success``; 0 for a run that did not finish on its own terms (a
        ``non_termination`` finding among ``ending``, the findings that say how it ended:
        default its own; it did not end, or it ended raising, with its last model call
        failed, or with an empty answer): it reached no outcome of its own, whatever its
        steps look like, and no model learns that from runs that all finished, as the dev
        half's did."""
        return self.predict_reading(self.read(evaluation, ending))

    def read(self, evaluation: Evaluation,
             ending: Sequence[Finding] | None = None) -> Reading:
        """What ``predict`` reads of ``evaluation`` (see there)."""
        agent = agent_key(evaluation.trajectory)
        if any(f.detector == "non_termination"
               for f in (evaluation.findings if ending is None else ending)):
            return Reading(None, "", agent)
        text = run_text(evaluation) if self._text else ""
        return Reading(features(evaluation, self._end, self._names), text, agent)

    def predict_reading(self, reading: Reading,
                        judge: dict[str, Any] | None = None) -> dict[str, Any]:
        """The prediction of a ``read`` run; with ``judge``, its scores in place of the
        ``judge.*`` features read."""
        if reading.values is None:
            return {"p_success": 0.0, "model": self.model.label}
        values = reading.values if judge is None else {**reading.values,
                                                        **judge_features(judge)}
        p = self.model.p_success(values, reading.text, reading.agent)
        return {"p_success": round(p, 4), "model": self.model.label}
