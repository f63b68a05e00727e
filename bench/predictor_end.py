"""Success predictor, third session (issue 28): the trajectory's end and nested choice of C.

    python bench/predictor_end.py [--datasets DIR] [--cache FILE] [--seeds 3]

Same protocol as ``bench/predictor_designs.py`` (whose loader and cache it reads; a cache written
before features version 4 has no ``end.*`` features: delete it): 5 folds
grouped by task, the task order shuffled by each of ``--seeds`` seeds, AUC of the pooled
held-out scores, mean over the seeds; every TF-IDF and scaler refitted inside the training
part; the counts' and the text's scores each divided by their spread and summed (w 1, as
``train``). Designs:

- ``shipped``: counts without the ``end.*`` features (C 1) + run_text word 1-2-grams
  (C 10), as ``train`` fitted them before;
- ``end``: the counts plus the ``end.*`` features of ``predict.features`` (version 4): how
  the run ends, read the same way for any agent (the last reply is a question; how often
  the last replies and the final output say the agent failed or succeeded; tool calls since
  the last text reply; steps since the last failed step);
- ``nested``: the counts' C (0.03, 0.1, 0.3, 1) and the text's C (1, 10) chosen by 4 inner
  folds grouped by task inside each training part (what ``train`` could do on a user's runs);
- ``end+nested``: both;
- ``end3``: ``end`` plus a third summed score, a logistic regression on how the run ends
  alone (``end.*``, ``last.*``, ``output.*``, ``errors.last_*``);
- a design ending in ``-names`` (``end-names``): without the calls per tool name and per
  program.
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold

sys.path.insert(0, str(Path(__file__).resolve().parent))
from predictor_designs import Data, _lr, _sum, load

COUNTS_CS = (0.03, 0.1, 0.3, 1.0)
TEXT_CS = (1.0, 10.0)


def without_names(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs' features without the calls per tool name and program (``tool.*``,
    ``program.*``: names that mean something for one agent only)."""
    return [{**d, "row": dataclasses.replace(d["row"], values={
        k: v for k, v in d["row"].values.items() if not k.startswith(("tool.", "program."))})}
        for d in runs]


def without_end(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs' features without the end.* ones (features version 3, as shipped before)."""
    return [{**d, "row": dataclasses.replace(d["row"], values={
        k: v for k, v in d["row"].values.items() if not k.startswith("end.")})}
        for d in runs]


def _fold(data: Data, tr: Any, te: Any, cc: float, tc: float) -> tuple[Any, Any]:
    a, b = data.counts_fold(tr, te)
    zc = _lr(a, data.y[tr], b, cc)
    a, b = data.tfidf_fold("cur", "w12", tr, te, max_terms=8000)
    return zc, _lr(a, data.y[tr], b, tc)


END_GROUP = ("end.", "last.", "output.", "errors.last")


def _end_score(data: Data, tr: Any, te: Any) -> Any:
    """A third score: a logistic regression (C 1) on how the run ends alone (end.*, last.*,
    output.*, errors.last_*), standardized on the training part."""
    cols = [i for i, n in enumerate(data.names) if n.startswith(END_GROUP)]
    a, b = data.x[tr][:, cols], data.x[te][:, cols]
    mean, scale = a.mean(0), a.std(0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    return _lr(np.clip((a - mean) / scale, -4, 4), data.y[tr],
               np.clip((b - mean) / scale, -4, 4), 1.0)


def _choose(data: Data, tr: Any, groups: Any) -> tuple[float, float]:
    """(counts' C, text's C) whose summed score separates 4 inner grouped folds best."""
    scores: dict[tuple[float, float], Any] = {}
    inner = list(GroupKFold(4).split(tr, data.y[tr], groups[tr]))
    zc = {c: np.zeros(len(tr)) for c in COUNTS_CS}
    zt = {c: np.zeros(len(tr)) for c in TEXT_CS}
    for itr, ite in inner:
        a, b = data.counts_fold(tr[itr], tr[ite])
        for c in COUNTS_CS:
            zc[c][ite] = _lr(a, data.y[tr[itr]], b, c)
        a, b = data.tfidf_fold("cur", "w12", tr[itr], tr[ite], max_terms=8000)
        for c in TEXT_CS:
            zt[c][ite] = _lr(a, data.y[tr[itr]], b, c)
    y = data.y[tr]
    for cc in COUNTS_CS:
        for tc in TEXT_CS:
            scores[(cc, tc)] = roc_auc_score(y, _sum(zc[cc], zt[tc], 1.0))
    return max(scores, key=lambda k: scores[k])


def evaluate(data: Data, seeds: int, nested: bool, sources: Any = None,
             third: bool = False) -> dict[str, Any]:
    unique = sorted(set(data.groups))
    aucs, chosen = [], []
    for seed in range(seeds):
        order = dict(zip(unique, np.random.RandomState(seed).permutation(len(unique)),
                         strict=True))
        groups = np.array([order[g] for g in data.groups])
        oof = np.zeros(len(data.y))
        for tr, te in GroupKFold(5).split(data.y, data.y, groups):
            cc, tc = _choose(data, tr, groups) if nested else (1.0, 10.0)
            chosen.append((cc, tc))
            oof[te] = _sum(*_fold(data, tr, te, cc, tc), 1.0)
            if third:
                ze = _end_score(data, tr, te)
                oof[te] += ze / (np.std(ze) or 1.0)
        parts = [slice(None)] if sources is None else [sources == s for s in (0, 1)]
        aucs.append([roc_auc_score(data.y[p], oof[p]) for p in parts])
    per_seed = np.round(np.array(aucs), 3)
    return {"auc": np.round(per_seed.mean(0), 3).tolist(), "per_seed": per_seed.tolist(),
            "chosen": sorted({str(c) for c in chosen}) if nested else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", type=Path, default=Path("../shared/datasets"))
    ap.add_argument("--cache", type=Path, default=Path("/tmp/predictor_designs.pkl"))
    ap.add_argument("--only", default="tau,swe,pooled")
    ap.add_argument("--designs", default="shipped,end,nested,end+nested")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.cache.exists():
        runs = pickle.loads(args.cache.read_bytes())  # our own cache (predictor_designs)
    else:
        runs = load(args.datasets)
        args.cache.write_bytes(pickle.dumps(runs))
    for name in args.only.split(","):
        rows = runs["tau"] + runs["swe"] if name == "pooled" else runs[name]
        sources = (np.array([0] * len(runs["tau"]) + [1] * len(runs["swe"]))
                   if name == "pooled" else None)
        for design in args.designs.split(","):
            kept = rows if design.startswith("end") else without_end(rows)
            data = Data(without_names(kept) if design.endswith("-names") else kept)
            print(name, design, evaluate(data, args.seeds, "nested" in design, sources,
                                         third="3" in design), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
