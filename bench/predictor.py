"""Success predictor quality on the public runs with outcomes (issue 13.3).

    python bench/predictor.py [--datasets DIR] [--json FILE] [--orders N]
    python bench/quality.py --only predictor          (the same figures, as a section)

- Within a dataset: 5-fold cross-validation GROUPED BY TASK (GroupKFold: no task in both the
  training and the test part; tau-bench airline has 4 runs per task, SWE-bench one). Each
  fold trains exactly what ``otel-eval train`` trains (``predict.train.fit``: its own inner
  folds for the Platt scaling, on the training part only) and predicts the held-out runs with
  the model file's plain-Python predictor. Figures pool the held-out predictions: AUC,
  Brier score, a reliability table, and the per-fold AUCs.
- Across datasets: train on all of one dataset, test on all of the other (and both pooled,
  grouped by task; ``pooled_auc_within``: one model trained on both, as the shipped default
  is, and AUC within each dataset's held-out runs).
- ``--orders N``: the same within-dataset and pooled figures repeated over N task orders
  (the task ids mapped to a permutation drawn with seeds 0..N-1 before GroupKFold, which
  otherwise assigns the tasks to folds in one fixed order), as their mean and per order
  (``orders``). A difference smaller than the spread between orders is noise.
- Baseline: the reference-free score ``1 / (1 + errors + warnings / 2)`` over the same
  outcome-blind findings, on the same runs (no fitting).

Labels: tau-bench ``reward`` (1 = success), SWE-bench ``results_summary.json`` ``resolved``.
Evaluation uses the default configuration (default budgets, no references, no judge): what a
user without benchmark files has. Hyperparameters are ``predict.regression.HYPERPARAMETERS``,
fixed before these figures were first measured, but for the counts' C, which ``fit`` chooses
from its declared grid on each training part's own inner folds (nested: the held-out part
plays no part in it); nothing here is searched on the outer folds.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import brier_score_loss, roc_auc_score
from sklearn.model_selection import GroupKFold

from otel_eval.app.config import Config
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.evaluate.predict.features import blind_findings
from otel_eval.evaluate.predict.labels import Labels, Row, read_labels, row
from otel_eval.evaluate.predict.modelfile import from_document
from otel_eval.evaluate.predict.regression import HYPERPARAMETERS
from otel_eval.evaluate.predict.train import fit
from otel_eval.receive.loaders import load_path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASETS = ROOT.parent / "shared" / "datasets"
TAU_RUNS = Path("tau-bench/airline/gpt-4o-airline.runs.json")
SWE = Path("swe-bench-mini-swe-agent")
FOLDS = 5
BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def baseline(findings: Sequence[tuple[str, str, str]]) -> float:
    """Declared before looking at the labels: 1 / (1 + error findings + warnings / 2)."""
    errors = sum(sev == "error" for *_, sev in findings)
    warnings = sum(sev == "warning" for *_, sev in findings)
    return 1.0 / (1.0 + errors + 0.5 * warnings)


def _rows(paths: list[Path], labels: Labels) -> tuple[list[Row], list[float]]:
    evaluator = Evaluator(Config(prediction=PredictionConfig(model_path="")))
    rows, scores = [], []
    for path in paths:
        for trace in load_path(path):
            ev = evaluator.evaluate(trace)
            label = labels.of(ev)
            if label is None:
                continue
            rows.append(row(ev, label))
            scores.append(baseline(blind_findings(ev.findings)))
    return rows, scores


def datasets_rows(datasets: Path) -> dict[str, tuple[list[Row], list[float]]]:
    swe = datasets / SWE
    trajs = sorted(next(p.glob("*.traj.json*")) for p in (swe / "trajs").iterdir()
                   if p.is_dir())
    return {"tau_airline": _rows([datasets / TAU_RUNS], Labels()),
            "swe_mini_swe_agent": _rows(trajs, read_labels([str(swe / "results_summary.json")]))}


def predict(train: list[Row], test: list[Row]) -> list[float]:
    """Train as ``otel-eval train`` does; predict ``test`` with the model file's predictor."""
    doc = fit(train)
    model = from_document({**doc, "version": "bench"})
    return [model.p_success(r.values, r.text, r.agent) for r in test]


def _figures(labels: list[int], p: list[float], base: list[float]) -> dict[str, Any]:
    y = np.array(labels)
    return {"runs": len(y), "successes": int(y.sum()),
            "auc": round(float(roc_auc_score(y, p)), 3),
            "brier": round(float(brier_score_loss(y, p)), 3),
            "brier_of_base_rate": round(float(y.mean() * (1 - y.mean())), 3),
            "baseline_auc": round(float(roc_auc_score(y, base)), 3),
            "reliability": reliability(labels, p)}


def reliability(labels: list[int], p: list[float]) -> list[dict[str, Any]]:
    """Per bin of predicted p_success: runs, mean prediction, observed success rate."""
    out = []
    for lo, hi in itertools.pairwise(BINS):
        idx = [i for i, v in enumerate(p) if lo <= v < hi or (hi == 1.0 and v == 1.0)]
        if idx:
            out.append({"bin": f"{lo:.1f}-{hi:.1f}", "runs": len(idx),
                        "mean_predicted": round(sum(p[i] for i in idx) / len(idx), 3),
                        "observed": round(sum(labels[i] for i in idx) / len(idx), 3)})
    return out


def task_order(rows: list[Row], seed: int | None) -> list[Any]:
    """The rows' fold groups: their task ids (seed None: GroupKFold's own order), or the
    tasks renumbered by a permutation drawn with ``seed`` (GroupKFold assigns groups to
    folds by size, then by their sorted value: a new numbering is a new task order)."""
    groups = [r.group for r in rows]
    if seed is None:
        return groups
    unique = sorted(set(groups))
    order = dict(zip(unique, np.random.RandomState(seed).permutation(len(unique)).tolist(),
                     strict=True))
    return [order[g] for g in groups]


def cross_validated(rows: list[Row], base: list[float],
                    seed: int | None = None) -> dict[str, Any]:
    groups = task_order(rows, seed)
    labels = [int(r.label) for r in rows]
    p = [0.0] * len(rows)
    per_fold = []
    for train, test in GroupKFold(n_splits=FOLDS).split(rows, labels, groups):
        assert not {groups[i] for i in train} & {groups[i] for i in test}
        got = predict([rows[i] for i in train], [rows[i] for i in test])
        for i, v in zip(test, got, strict=True):
            p[i] = v
        fold_y = [labels[i] for i in test]
        per_fold.append(round(float(roc_auc_score(fold_y, got)), 3)
                        if len(set(fold_y)) == 2 else None)
    return {**_figures(labels, p, base), "tasks": len(set(groups)), "folds": FOLDS,
            "auc_per_fold": per_fold}


def pooled_within(parts: dict[str, tuple[list[Row], list[float]]],
                  seed: int | None = None) -> dict[str, Any]:
    """The default model's design: one model trained on every dataset's runs (grouped 5-fold
    by task over all of them), AUC within each dataset's held-out runs."""
    rows = [r for rs, _ in parts.values() for r in rs]
    groups = task_order(rows, seed)
    labels = [int(r.label) for r in rows]
    p = [0.0] * len(rows)
    for train, test in GroupKFold(n_splits=FOLDS).split(rows, labels, groups):
        got = predict([rows[i] for i in train], [rows[i] for i in test])
        for i, v in zip(test, got, strict=True):
            p[i] = v
    out, start = {}, 0
    for name, (rs, base) in parts.items():
        end = start + len(rs)
        out[name] = _figures(labels[start:end], p[start:end], base)
        start = end
    return out


def transfer(train: list[Row], test: list[Row], base: list[float]) -> dict[str, Any]:
    return _figures([int(r.label) for r in test], predict(train, test), base)


def figures(datasets: Path, orders: int | None = None) -> dict[str, Any]:
    data = datasets_rows(datasets)
    (tau, tau_base), (swe, swe_base) = data["tau_airline"], data["swe_mini_swe_agent"]
    blind = {name: ([dataclasses.replace(r, text="") for r in rows], base)
             for name, (rows, base) in data.items()}
    return {
        "hyperparameters": HYPERPARAMETERS,
        "within": {name: cross_validated(rows, base) for name, (rows, base) in data.items()},
        "within_without_text": {name: cross_validated(rows, base)
                                for name, (rows, base) in blind.items()},
        "across": {"train_tau_test_swe": transfer(tau, swe, swe_base),
                   "train_swe_test_tau": transfer(swe, tau, tau_base),
                   "pooled_grouped_by_task": cross_validated(tau + swe, tau_base + swe_base),
                   "pooled_auc_within": pooled_within(data)},
        **({"orders": over_orders(data, orders)} if orders else {}),
    }


def over_orders(data: dict[str, tuple[list[Row], list[float]]], orders: int
                ) -> dict[str, Any]:
    """Within-dataset and pooled figures over task orders 0..orders-1: per dataset the mean
    AUC and Brier over the orders and each order's AUC."""
    within = [{name: cross_validated(rows, base, seed) for name, (rows, base) in data.items()}
              for seed in range(orders)]
    pooled = [pooled_within(data, seed) for seed in range(orders)]

    def summary(per_order: list[dict[str, Any]]) -> dict[str, Any]:
        return {name: {"auc": round(float(np.mean([o[name]["auc"] for o in per_order])), 3),
                       "brier": round(float(np.mean([o[name]["brier"] for o in per_order])), 3),
                       "auc_per_order": [o[name]["auc"] for o in per_order]}
                for name in data}

    return {"orders": orders, "seeds": list(range(orders)), "within": summary(within),
            "pooled_auc_within": summary(pooled)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--datasets", type=Path, default=DEFAULT_DATASETS)
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    ap.add_argument("--orders", type=int, metavar="N",
                    help="also the within-dataset and pooled figures over N task orders "
                         "(seeds 0..N-1), as their mean and per order")
    args = ap.parse_args(argv)
    if args.orders is not None and args.orders < 1:
        ap.error("--orders: at least 1")
    results = figures(args.datasets, args.orders)
    print(json.dumps(results, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
