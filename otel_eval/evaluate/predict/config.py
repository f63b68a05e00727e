"""Configuration of the success predictor (stage: predict).

On by default with the model shipped in the package (``model_path: default``: trained on
the public dev runs, docs/prediction.md says on what and how well); a path names a model
file written by ``otel-eval train`` (your own labelled runs); empty turns prediction off (no
trace then gets a ``prediction``, never a default value). Set it in YAML, with ``${ENV}``
substitution (``model_path: ${OTEL_EVAL_MODEL:-default}``), or with ``--model`` on ``serve``
and ``eval``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from otel_eval.base.configcheck import validate
from otel_eval.telemetry.auc import AUC_MIN_PER_CLASS, AUC_WINDOW

DEFAULT_MODEL = "default"
# The model shipped in the package (bench/README.md, "Success prediction": how it was trained).
DEFAULT_MODEL_FILE = Path(__file__).resolve().parent / "models" / "default.model.json"


@dataclass(frozen=True)
class PredictionConfig:
    # The success model: `default` (shipped in the package, trained on the public dev runs of
    # tau-bench airline and SWE-bench mini-swe-agent), a model file written by `otel-eval
    # train` (JSON, versioned; never code), or empty for no prediction. Checked at startup: a
    # file that cannot be used stops `serve` with the reason. Default: default.
    model_path: str = DEFAULT_MODEL
    # Labelled predictions (outcome attribute or POST /v1/feedback) kept per agent for the
    # rolling AUC gauge, most recent first; memory is O(window x agents). Default 1000.
    auc_window: int = AUC_WINDOW
    # Fewest labelled predictions of each class (success, failure) in the window before the
    # rolling AUC is reported; below it the gauge is absent, not a guess. At most half of
    # auc_window (more could never be reported). Default 10.
    auc_min_per_class: int = AUC_MIN_PER_CLASS

    # Probability of success at and above which a run is predicted to pass: below it the
    # run counts in otel_eval_prediction_runs_predicted_to_fail_total and the web view marks
    # it; p_success's kappa in GET /v1/calibration is taken at it (0-1). Default 0.5.
    pass_threshold: float = 0.5

    def __post_init__(self) -> None:
        unreachable = (isinstance(self.auc_window, int) and isinstance(self.auc_min_per_class, int)
                       and 2 * self.auc_min_per_class > self.auc_window)
        validate(self, minimum={"auc_window": 2, "auc_min_per_class": 1,
                                "pass_threshold": 0.0},
                 maximum={"pass_threshold": 1.0}, finite=("pass_threshold",),
                 problems={"auc_min_per_class": (
                     f"{self.auc_min_per_class} of each class cannot fit in auc_window "
                     f"{self.auc_window}: the rolling AUC would never be reported "
                     f"(at most {self.auc_window // 2})")} if unreachable else None)

    @property
    def enabled(self) -> bool:
        return bool(self.model_path)

    @property
    def model_file(self) -> str:
        """The file ``model_path`` names (the packaged one for ``default``)."""
        return str(DEFAULT_MODEL_FILE) if self.model_path == DEFAULT_MODEL else self.model_path
