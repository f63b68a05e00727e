"""Configuration of the success predictor (stage: predict).

Off unless ``model_path`` names a model file written by ``otel-eval train``: without a model
no trace gets a ``prediction`` (never a default value). Set it in YAML, with ``${ENV}``
substitution (``model_path: ${OTEL_EVAL_MODEL:-}``), or with ``--model`` on ``serve`` and
``eval``.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_eval.base.configcheck import validate
from otel_eval.telemetry.auc import AUC_MIN_PER_CLASS, AUC_WINDOW


@dataclass(frozen=True)
class PredictionConfig:
    # Model file written by `otel-eval train` (JSON, versioned; never code). Empty: no
    # prediction. Checked at startup: a file that cannot be used stops `serve` with the reason.
    model_path: str = ""
    # Labelled predictions (outcome attribute or POST /v1/feedback) kept per agent for the
    # rolling AUC gauge, most recent first; memory is O(window x agents). Default 1000.
    auc_window: int = AUC_WINDOW
    # Fewest labelled predictions of each class (success, failure) in the window before the
    # rolling AUC is reported; below it the gauge is absent, not a guess. Default 10.
    auc_min_per_class: int = AUC_MIN_PER_CLASS

    def __post_init__(self) -> None:
        validate(self, minimum={"auc_window": 2, "auc_min_per_class": 1})

    @property
    def enabled(self) -> bool:
        return bool(self.model_path)
