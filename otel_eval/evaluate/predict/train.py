"""Stage: predict (training). Labelled runs -> a calibrated model file (``otel-eval train``).

    paths -> EvalRun (the same evaluation as ``eval``) -> features (outcome-blind)
      + the run's text (``predict.text``)
      + labels (LABELS files, else the outcome the runs carry: tau-bench ``reward``, the
        outcome attribute)
      -> counts: standardize -> logistic regression
      -> text: TF-IDF over word 1-2-grams -> logistic regression
      -> the two scores stacked (a logistic regression on their out-of-fold values, folds
         grouped by task: calibrated probabilities) -> JSON model file

The only module that imports scikit-learn and numpy (lazily, inside the functions), so
``serve`` and ``eval`` never load them. Hyperparameters are fixed here (``HYPERPARAMETERS``),
never searched on the user's runs: the counts' were declared before any figure was measured;
the text's and ``name_features`` were chosen by task-disjoint cross-validation on the dev half
of the public runs (bench/README.md).

Labels: JSON lines ``{"trace_id": "...", "outcome": true}`` (or ``"task_id"``, for benchmarks
with one run per task; outcome as bool, 1/0 or success/failure), or a SWE-bench results
summary (``{"instances": [{"instance_id", "resolved"}]}``, matched on the task id). A trace id
label wins over a task id label, which wins over the outcome the run carries.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from otel_eval.base.model import Evaluation
from otel_eval.evaluate.evaluator import normalize_outcome
from otel_eval.evaluate.predict.features import (
    FEATURE_PREFIX_FINDING,
    FEATURE_PREFIX_PROGRAM,
    FEATURE_PREFIX_TOOL,
    FEATURES_VERSION,
    features,
)
from otel_eval.evaluate.predict.modelfile import FORMAT, FORMAT_VERSION, Model, write_model
from otel_eval.evaluate.predict.text import TEXT_VERSION, run_text, terms

if TYPE_CHECKING:
    import argparse


class EvalRun(Protocol):
    """What training reads of the offline run (``app.offline.EvalRun`` is one)."""

    failed_files: int

    def evaluations(self) -> Iterator[Evaluation]: ...

# Fixed before measuring; see the module docstring.
HYPERPARAMETERS: dict[str, Any] = {
    "estimator": "LogisticRegression", "penalty": "l2", "C": 1.0, "solver": "lbfgs",
    "max_iter": 1000, "class_weight": None,
    # a finding kind becomes a feature when >= 3 training traces have it
    "min_finding_support": 3,
    # the calls per tool name and per program (tool.*, program.*) are left out: a name means
    # something for one agent only, and on a few hundred runs these sparse counts cost more
    # than they give (task-disjoint AUC, bench/README.md "Third session": tau-bench 0.671 ->
    # 0.714, SWE-bench 0.659 -> 0.667); models trained before read them
    "name_features": False,
    # standardized values are clipped to +-4 (training and prediction): a run far outside
    # the training range (another agent's token counts) does not extrapolate the line
    "clip": 4.0,
    "calibration": "platt on out-of-fold scores", "folds": 5, "fold_groups": "task id",
    # the text model (predict.text): TF-IDF (sublinear tf, l2) over word 1-2-grams seen in
    # >= text_min_df training runs, the text_max_terms most frequent; L2 logistic regression
    # with C = text_C. Chosen by task-disjoint cross-validation on the dev half of tau-bench
    # and SWE-bench (bench/README.md, "Success prediction"); with text, the two scores are
    # standardized on their out-of-fold values, summed and Platt-scaled.
    "text_min_df": 2, "text_max_terms": 8000, "text_C": 10.0,
}
MAX_LABEL_LINE_CHARS = 4096


class TrainError(ValueError):
    """Training cannot go on (bad labels file, too few labelled runs); the message says why."""


@dataclass
class Labels:
    by_trace: dict[str, bool] = field(default_factory=dict)
    by_task: dict[str, bool] = field(default_factory=dict)

    def of(self, evaluation: Evaluation) -> bool | None:
        t = evaluation.trajectory
        if t.trace_id in self.by_trace:
            return self.by_trace[t.trace_id]
        if t.task_id is not None and t.task_id in self.by_task:
            return self.by_task[t.task_id]
        outcome = evaluation.verdict.outcome if evaluation.verdict else None
        return None if outcome is None else outcome == "success"


@dataclass(frozen=True)
class Row:
    """One labelled run: its features, label and fold group (the task, else the trace)."""

    values: dict[str, float]
    label: bool
    group: str
    source: str
    text: str = ""


def _outcome(value: Any, where: str) -> bool:
    outcome = normalize_outcome(value)
    if outcome is None:
        raise TrainError(f"{where}: outcome {value!r} is not true/false, 1/0 or "
                         "success/failure")
    return outcome == "success"


def _summary(doc: dict[str, Any], path: str, labels: Labels) -> None:
    for i, item in enumerate(doc.get("instances") or []):
        if not isinstance(item, dict) or not isinstance(item.get("instance_id"), str):
            raise TrainError(f"{path}: instances[{i}]: expected {{instance_id, resolved}}")
        labels.by_task[item["instance_id"]] = _outcome(item.get("resolved"),
                                                       f"{path}: instances[{i}]")


def _line(text: str, where: str, labels: Labels) -> None:
    if len(text) > MAX_LABEL_LINE_CHARS:
        raise TrainError(f"{where}: longer than {MAX_LABEL_LINE_CHARS} characters")
    try:
        item = json.loads(text)
    except ValueError as e:
        raise TrainError(f"{where}: not JSON ({e})") from None
    if not isinstance(item, dict) or "outcome" not in item:
        raise TrainError(f'{where}: expected {{"trace_id": "...", "outcome": true|false}}')
    value = _outcome(item["outcome"], where)
    if isinstance(item.get("trace_id"), str):
        labels.by_trace[item["trace_id"].lower()] = value
    elif isinstance(item.get("task_id"), str | int):
        labels.by_task[str(item["task_id"])] = value
    else:
        raise TrainError(f"{where}: needs a string trace_id (or task_id)")


def read_labels(paths: Iterable[str]) -> Labels:
    """Labels from JSON-lines files or SWE-bench results summaries (see the docstring)."""
    labels = Labels()
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise TrainError(f"labels file {path}: cannot be read ({e})") from None
        stripped = text.lstrip()
        if stripped.startswith("{") and '"instances"' in stripped[:200]:
            try:
                doc = json.loads(text)
            except ValueError:
                doc = None
            if isinstance(doc, dict):
                _summary(doc, path, labels)
                continue
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                _line(line, f"labels file {path} line {n}", labels)
    return labels


def rows_from(evaluations: Iterable[Evaluation], labels: Labels) -> tuple[list[Row], int]:
    """(labelled rows, number of runs without a label)."""
    rows, unlabelled = [], 0
    for ev in evaluations:
        label = labels.of(ev)
        if label is None or ev.error is not None:
            unlabelled += 1
            continue
        rows.append(row(ev, label))
    return rows, unlabelled


def row(ev: Evaluation, label: bool) -> Row:
    t = ev.trajectory
    return Row(features(ev), label, t.task_id or t.trace_id, t.source, run_text(ev))


def vocabulary(rows: list[Row]) -> list[str]:
    """Feature names: every fixed feature, and the finding kinds (and tool and program names,
    with ``name_features``) seen in enough traces."""
    support: dict[str, int] = {}
    for r in rows:
        for name in r.values:
            support[name] = support.get(name, 0) + 1
    least = HYPERPARAMETERS["min_finding_support"]
    names = (FEATURE_PREFIX_TOOL, FEATURE_PREFIX_PROGRAM)
    return sorted(n for n, k in support.items()
                  if (HYPERPARAMETERS["name_features"] or not n.startswith(names))
                  and (not n.startswith((FEATURE_PREFIX_FINDING, *names)) or k >= least))


def _check(rows: list[Row]) -> None:
    successes = sum(r.label for r in rows)
    if successes < 2 or len(rows) - successes < 2:
        raise TrainError(f"need at least 2 successful and 2 failed labelled runs, got "
                         f"{successes} and {len(rows) - successes} (labels: --labels, a "
                         "tau-bench reward, the outcome attribute)")
    if len({r.group for r in rows}) < 2:
        raise TrainError("need runs of at least 2 tasks (folds are grouped by task)")


def _fit_linear(x: Any, y: Any) -> tuple[Any, Any, Any]:
    """(scaler mean, scaler scale, fitted LogisticRegression) on ``x``, ``y``."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    hp = HYPERPARAMETERS
    lr = LogisticRegression(C=hp["C"], solver=hp["solver"], max_iter=hp["max_iter"],
                            class_weight=hp["class_weight"])
    lr.fit(standardized(x, mean, scale), y)
    return mean, scale, lr


def standardized(x: Any, mean: Any, scale: Any) -> Any:
    """(x - mean) / scale, clipped to +-clip (as ``Model.p_success`` does)."""
    import numpy as np

    clip = HYPERPARAMETERS["clip"]
    return np.clip((x - mean) / scale, -clip, clip)


def _fit_text(texts: list[str], y: Any) -> tuple[Any, Any] | None:
    """(fitted TfidfVectorizer, LogisticRegression) on the runs' texts; None when no term
    is frequent enough (a few short runs)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    hp = HYPERPARAMETERS
    vectorizer = TfidfVectorizer(analyzer=terms, min_df=hp["text_min_df"],
                                 max_features=hp["text_max_terms"], sublinear_tf=True)
    try:
        m = vectorizer.fit_transform(texts)
    except ValueError:  # empty vocabulary
        return None
    lr = LogisticRegression(C=hp["text_C"], max_iter=hp["max_iter"]).fit(m, y)
    return vectorizer, lr


def _out_of_fold(x: Any, y: Any, groups: list[str],
                 texts: list[str]) -> tuple[Any, Any, Any]:
    """Out-of-fold decision values of the counts and of the text (folds grouped by task;
    the text's are 0 where its fold had no vocabulary) and which rows got one."""
    import numpy as np
    from sklearn.model_selection import GroupKFold

    z, zt = np.zeros(len(y)), np.zeros(len(y))
    done = np.zeros(len(y), dtype=bool)
    folds = min(HYPERPARAMETERS["folds"], len(set(groups)))
    for train, test in GroupKFold(n_splits=folds).split(x, y, groups):
        if len(set(y[train].tolist())) < 2:
            continue  # a fold whose training part holds one class predicts nothing
        mean, scale, lr = _fit_linear(x[train], y[train])
        z[test] = lr.decision_function(standardized(x[test], mean, scale))
        text = _fit_text([texts[i] for i in train], y[train])
        if text is not None:
            zt[test] = text[1].decision_function(text[0].transform([texts[i] for i in test]))
        done[test] = True
    return z, zt, done


def _stack(z: Any, zt: Any, y: Any) -> tuple[list[float], float, dict[str, Any]]:
    """The two scores combined: each standardized by its out-of-fold spread and summed with
    equal weights (on runs this few, weights learned on the folds' scores overfit), then
    Platt-scaled: ([a_counts, a_text], b), and the out-of-fold figures of each and of both."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import brier_score_loss, roc_auc_score

    if len(set(y.tolist())) < 2:
        return [1.0, 0.0], 0.0, {"calibrated": False}
    spread = [float(np.std(v)) or 1.0 for v in (z, zt)]
    both = (z / spread[0] + zt / spread[1]).reshape(-1, 1)
    platt = LogisticRegression(C=1e6, max_iter=1000).fit(both, y)
    p = platt.predict_proba(both)[:, 1]
    k = float(platt.coef_[0][0])
    return [k / spread[0], k / spread[1]], float(platt.intercept_[0]), {
        "calibrated": True, "runs": len(y), "auc": round(float(roc_auc_score(y, p)), 4),
        "auc_counts": round(float(roc_auc_score(y, z)), 4),
        "auc_text": round(float(roc_auc_score(y, zt)), 4),
        "brier": round(float(brier_score_loss(y, p)), 4),
        "note": "out-of-fold on the training runs; Brier is after the Platt fit on the same "
                "scores (slightly optimistic)"}


def _platt(z: Any, y: Any) -> tuple[float, float, dict[str, Any]]:
    """Platt scaling (a, b) fitted on out-of-fold scores ``z``, and the out-of-fold figures;
    (1, 0) when the folds did not give both classes."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import brier_score_loss, roc_auc_score

    if len(set(y.tolist())) < 2:
        return 1.0, 0.0, {"calibrated": False}
    platt = LogisticRegression(C=1e6, max_iter=1000).fit(z.reshape(-1, 1), y)
    p = platt.predict_proba(z.reshape(-1, 1))[:, 1]
    return float(platt.coef_[0][0]), float(platt.intercept_[0]), {
        "calibrated": True, "runs": len(y), "auc": round(float(roc_auc_score(y, z)), 4),
        "brier": round(float(brier_score_loss(y, p)), 4),
        "note": "out-of-fold on the training runs; Brier is after the Platt fit on the same "
                "scores (slightly optimistic)"}


def fit(rows: list[Row], name: str = "success") -> dict[str, Any]:
    """The model document (as ``write_model`` takes it) trained on ``rows``."""
    import numpy as np
    import sklearn

    _check(rows)
    names = vocabulary(rows)
    x = np.array([[r.values.get(n, 0.0) for n in names] for r in rows], dtype=float)
    y = np.array([int(r.label) for r in rows])
    groups = [r.group for r in rows]
    mean, scale, lr = _fit_linear(x, y)
    texts = [r.text for r in rows]
    text = _fit_text(texts, y)
    z, zt, done = _out_of_fold(x, y, groups, texts)
    doc: dict[str, Any] = {}
    if text is None:
        a, b, cv = _platt(z[done], y[done])
        doc["calibration"] = {"method": "platt", "a": a, "b": b}
    else:
        coefs, b, cv = _stack(z[done], zt[done], y[done])
        doc["calibration"] = {"method": "stack", "a": coefs, "b": b}
        doc["text"] = _text_document(*text)
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "name": name,
        "features_version": FEATURES_VERSION, "features": names,
        "scaler": {"mean": [float(v) for v in mean], "scale": [float(v) for v in scale],
                   "clip": HYPERPARAMETERS["clip"]},
        "coefficients": [float(v) for v in lr.coef_[0]],
        "intercept": float(lr.intercept_[0]),
        **doc,
        "training": {
            "runs": len(rows), "successes": int(y.sum()), "tasks": len(set(groups)),
            "sources": sorted({r.source for r in rows})[:20],
            "hyperparameters": HYPERPARAMETERS, "cross_validation": cv,
            "scikit_learn": sklearn.__version__,
            "trained_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        },
    }


def _text_document(vectorizer: Any, lr: Any) -> dict[str, Any]:
    vocabulary = sorted(vectorizer.vocabulary_.items(), key=lambda kv: kv[1])
    return {"text_version": TEXT_VERSION, "terms": [t for t, _ in vocabulary],
            "idf": [float(vectorizer.idf_[i]) for _, i in vocabulary],
            "coefficients": [float(lr.coef_[0][i]) for _, i in vocabulary],
            "intercept": float(lr.intercept_[0])}


def train(run: EvalRun, labels: Labels, out: str, name: str) -> tuple[Model, int]:
    """Evaluate the runs, fit, write ``out``: (the model, runs left out without a label)."""
    rows, unlabelled = rows_from(run.evaluations(), labels)
    return write_model(fit(rows, name), out), unlabelled


def cmd_train(args: argparse.Namespace, run: EvalRun, out: TextIO) -> int:
    try:
        labels = read_labels(args.labels)
        model, unlabelled = train(run, labels, args.out, args.name)
    except (TrainError, ValueError) as e:
        print(f"otel-eval train: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the model file cannot be written
        print(f"otel-eval train: {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    t = model.training
    cv = t.get("cross_validation", {})
    figures = (f"; out-of-fold AUC {cv['auc']}, Brier {cv['brier']}"
               if cv.get("calibrated") else "; not calibrated (too few runs per fold)")
    out.write(f"wrote {args.out}: {model.label}, {t['runs']} labelled runs "
              f"({t['successes']} successes) of {t['tasks']} tasks, "
              f"{len(model.features)} features{figures}\n")
    if unlabelled:
        print(f"otel-eval train: {unlabelled} runs without a label were left out",
              file=sys.stderr)
    return 1 if run.failed_files else 0
