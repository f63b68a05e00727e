"""Stage: predict (training). Labelled runs -> a calibrated model file (``otel-eval train``).

    paths -> EvalRun (the same evaluation as ``eval``) -> features (outcome-blind)
      + the run's text (``predict.text``)
      + labels (LABELS files, else the outcome the runs carry: tau-bench ``reward``, the
        outcome attribute)
      -> counts: standardize (by each agent's own runs when several) -> logistic regression
      -> text: TF-IDF over word 1-2-grams -> logistic regression
      -> the two scores stacked (a logistic regression on their out-of-fold values, folds
         grouped by task: calibrated probabilities) -> JSON model file

Here: the command, which features a model reads (``vocabulary``), the pooled model and the
agents' own, each assembled into the model document. The regressions, their out-of-fold
figures and the hyperparameters (``HYPERPARAMETERS``, C chosen from ``C_grid``):
``predict.regression``. These two are the only modules that import scikit-learn and numpy
(lazily, inside the functions), so ``serve`` and ``eval`` never load them.

Labels and the training rows (a run's features, label, fold group and text): ``predict.labels``.
"""

from __future__ import annotations

import datetime
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from otel_eval.base.documents import MAX_NAME_CHARS
from otel_eval.base.printable import clipped, printable
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.predict.features import (
    FEATURE_PREFIX_FINDING,
    FEATURE_PREFIX_PROGRAM,
    FEATURE_PREFIX_TOOL,
    FEATURES_VERSION,
)
from otel_eval.evaluate.predict.labels import (
    Labels,
    Row,
    TrainError,
    TrainingRows,
    read_labels,
    rows_from,
    with_feedback,
)
from otel_eval.evaluate.predict.modelfile import (
    FORMAT,
    FORMAT_VERSION,
    MAX_AGENT_MODELS,
    MAX_AGENTS,
    Model,
    parameters_version,
    write_model,
)
from otel_eval.evaluate.predict.regression import (
    HYPERPARAMETERS,
    Linear,
    Scaler,
    calibrate,
    choose_c,
    fit_counts,
    fit_text,
    out_of_fold,
)
from otel_eval.evaluate.predict.text import TEXT_VERSION

if TYPE_CHECKING:
    import argparse

    from otel_eval.store.base import EvaluationStore


class EvalRun(Protocol):
    """What training reads of the offline run (``app.offline.EvalRun`` is one)."""

    failed_files: int

    def evaluations(self) -> Iterator[Evaluation]: ...


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
                         f"{successes} and {len(rows) - successes} (labels: --labels, the "
                         "outcomes recorded in --feedback STORE, a tau-bench reward, the "
                         "outcome attribute)")
    if len({r.group for r in rows}) < 2:
        raise TrainError("need runs of at least 2 tasks (folds are grouped by task)")


def _kept_agents(table: dict[str, Any], agents: list[str]) -> dict[str, Any]:
    """The entries of the agents with most runs (at most MAX_AGENTS; a name too long to
    store is left out: its runs get the pooled values)."""
    runs = Counter(agents)
    most = sorted((a for a in table if len(a) <= MAX_NAME_CHARS),
                  key=lambda a: (-runs[a], a))[:MAX_AGENTS]
    return {a: table[a] for a in sorted(most)}


def fit(rows: list[Row], name: str = "success") -> dict[str, Any]:
    """The model document (as ``write_model`` takes it) trained on ``rows``: the pooled
    model, and with runs of several agents a model of each agent's own runs where it has
    enough (``agent_models``)."""
    doc = _fit(rows, name)
    own = _agent_models(rows, name)
    return {**doc, "agent_models": own} if own else doc


def _agent_models(rows: list[Row], name: str) -> dict[str, Any]:
    """``agent_key`` -> the model document of that agent's runs alone, for the agents with
    ``min_agent_model_runs`` runs and ``min_agent_model_class`` of each outcome (at most
    ``MAX_AGENT_MODELS``, those with most runs); none when every run is one agent's."""
    hp = HYPERPARAMETERS
    by_agent: dict[str, list[Row]] = {}
    for r in rows:
        by_agent.setdefault(r.agent, []).append(r)
    if not hp["agent_models"] or len(by_agent) < 2:
        return {}
    enough = [a for a, own in by_agent.items() if len(own) >= hp["min_agent_model_runs"]
              and len(a) <= MAX_NAME_CHARS and min(
                  sum(r.label for r in own), sum(not r.label for r in own),
              ) >= hp["min_agent_model_class"] and len({r.group for r in own}) >= 2]
    out = {}
    for agent in sorted(enough, key=lambda a: (-len(by_agent[a]), a))[:MAX_AGENT_MODELS]:
        doc = _fit(by_agent[agent], name)
        doc["training"] = {k: doc["training"][k] for k in (
            "runs", "successes", "tasks", "cross_validation")} | {
            "C": doc["training"]["hyperparameters"]["C"]}
        out[agent] = {**doc, "version": parameters_version(doc)}
    return dict(sorted(out.items()))


def _fit(rows: list[Row], name: str) -> dict[str, Any]:
    """One model document trained on ``rows`` (``fit`` without the agents' own models)."""
    import numpy as np
    import sklearn

    _check(rows)
    names = vocabulary(rows)
    x = np.array([[r.values.get(n, 0.0) for n in names] for r in rows], dtype=float)
    y = np.array([int(r.label) for r in rows])
    groups = [r.group for r in rows]
    agents = [r.agent for r in rows]
    texts = [r.text for r in rows]
    z, odds, zt, done = out_of_fold(x, y, groups, texts, agents)
    j, losses = choose_c(odds[done], y[done])
    c = HYPERPARAMETERS["C_grid"][j]
    scaler, lr = fit_counts(x, y, agents, c)
    text = fit_text(texts, y, agents)
    kept = [a for a, d in zip(agents, done, strict=True) if d]
    scores = [z[done, j]] if text is None else [z[done, j], zt[done]]
    a, b, offsets, cv = calibrate(scores, y[done], kept)
    if losses:
        cv["counts_log_loss_by_C"] = losses
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "name": name,
        "features_version": FEATURES_VERSION, "features": names,
        "scaler": _scaler_document(scaler, agents),
        "coefficients": [float(v) for v in lr.coefficients],
        "intercept": lr.intercept,
        "calibration": _calibration_document(a, b, offsets, agents, text is not None),
        **({"text": _text_document(*text)} if text is not None else {}),
        "training": {
            "runs": len(rows), "successes": int(y.sum()), "tasks": len(set(groups)),
            "agents": len(set(agents)),
            "sources": sorted({r.source for r in rows})[:20],
            "hyperparameters": {**HYPERPARAMETERS, "C": c}, "cross_validation": cv,
            "scikit_learn": sklearn.__version__,
            "trained_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        },
    }


def _scaler_document(scaler: Scaler, agents: list[str]) -> dict[str, Any]:
    """The counts' standardization as the file keeps it (the kept agents' own with it)."""
    own = _kept_agents({k: {"mean": [float(v) for v in m], "scale": [float(v) for v in s]}
                        for k, (m, s) in scaler.agents.items()}, agents)
    return {"mean": [float(v) for v in scaler.mean],
            "scale": [float(v) for v in scaler.scale],
            "clip": HYPERPARAMETERS["clip"], **({"agents": own} if own else {})}


def _calibration_document(a: list[float], b: float, offsets: dict[str, float],
                          agents: list[str], stacked: bool) -> dict[str, Any]:
    """``calibrate``'s result as the file keeps it: Platt on the counts' score, or the stack
    of the counts' and the text's; the kept agents' offsets with it."""
    calibration: dict[str, Any] = ({"method": "platt", "a": a[0], "b": b} if not stacked
                                   else {"method": "stack", "a": a, "b": b})
    if offsets:
        calibration["agents"] = _kept_agents(offsets, agents)
    return calibration


def _text_document(vectorizer: Any, lr: Linear) -> dict[str, Any]:
    vocabulary = sorted(vectorizer.vocabulary_.items(), key=lambda kv: kv[1])
    return {"text_version": TEXT_VERSION, "terms": [t for t, _ in vocabulary],
            "idf": [float(vectorizer.idf_[i]) for _, i in vocabulary],
            "coefficients": [float(lr.coefficients[i]) for _, i in vocabulary],
            "intercept": lr.intercept}


def train(run: EvalRun, labels: Labels, out: str, name: str,
          feedback: EvaluationStore | None = None) -> tuple[Model, TrainingRows]:
    """Evaluate the runs, fit, write ``out``: (the model, the rows with the runs left out).
    ``feedback``: a store whose recorded outcomes label the runs (``with_feedback``)."""
    evaluations: Iterable[Evaluation] = run.evaluations()
    if feedback is not None:
        evaluations = with_feedback(evaluations, feedback.feedback_many, labels)
    rows = rows_from(evaluations, labels)
    return write_model(fit(rows.rows, name), out), rows


def _feedback_store(target: str | None) -> EvaluationStore | None:
    """``--feedback``'s store, opened read only (a clear ``TrainError`` when it cannot be)."""
    from otel_eval.store import is_postgresql_url, open_store, redact_url

    if target is None:
        return None
    if not is_postgresql_url(target) and not Path(target).is_file():
        raise TrainError(f"--feedback: no store at {target}")
    try:
        return open_store(target, read_only=True)
    except Exception as e:  # a server down, a wrong password, not a store: say so
        raise TrainError(f"--feedback: cannot open the store at {redact_url(target)}: "
                         f"{e}") from None


def cmd_train(args: argparse.Namespace, run: EvalRun, out: TextIO) -> int:
    store = None
    try:
        labels = read_labels(args.labels)
        store = _feedback_store(getattr(args, "feedback", None))
        model, rows = train(run, labels, args.out, args.name, store)
    except (TrainError, ValueError) as e:
        print(f"otel-eval train: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the model file cannot be written
        print(f"otel-eval train: {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    finally:
        if store is not None:
            store.close()
    t = model.training
    cv = t.get("cross_validation", {})
    figures = (f"; out-of-fold AUC {cv['auc']}, Brier {cv['brier']}"
               if cv.get("calibrated") else "; not calibrated (too few runs per fold)")
    out.write(f"wrote {args.out}: {model.label}, {t['runs']} labelled runs "
              f"({t['successes']} successes) of {t['tasks']} tasks, "
              f"{len(model.features)} features{figures}"
              + (f"; own models for {len(model.agent_models)} agents"
                 if model.agent_models else "") + "\n")
    if rows.unlabelled:
        print(f"otel-eval train: {rows.unlabelled} runs without a label were left out",
              file=sys.stderr)
    if rows.unreadable:  # an error, like a file that could not be loaded: exit 1
        n, first = len(rows.unreadable), printable(clipped(rows.unreadable[0]))
        print(f"otel-eval train: {n} labelled run(s) left out, their features could not be "
              f"computed (the first: {first})", file=sys.stderr)
    return 1 if run.failed_files or rows.unreadable else 0
