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
from typing import Any

from otel_eval.base.results import Evaluation, Finding
from otel_eval.evaluate.predict.features import (
    FEATURE_PREFIX_END,
    FEATURE_PREFIX_PROGRAM,
    FEATURE_PREFIX_TOOL,
    features,
)
from otel_eval.evaluate.predict.modelfile import Model, ModelFileError, agent_key, load_model
from otel_eval.evaluate.predict.text import run_text

__all__ = ["Model", "ModelFileError", "Predictor", "load_model"]


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
        if any(f.detector == "non_termination"
               for f in (evaluation.findings if ending is None else ending)):
            return {"p_success": 0.0, "model": self.model.label}
        text = run_text(evaluation) if self._text else ""
        p = self.model.p_success(features(evaluation, self._end, self._names), text,
                                 agent_key(evaluation.trajectory))
        return {"p_success": round(p, 4), "model": self.model.label}
