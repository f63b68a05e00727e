"""Success predictor designs compared, task-disjoint, on the dev half (issue 28 B).

    python bench/predictor_designs.py [--datasets DIR] [--cache FILE] [--only tau,swe,pooled]
                                      [--seeds 3]

Each design is scored by 5-fold cross-validation grouped by task (``GroupKFold``; the task
order shuffled by each seed, AUC of the pooled held-out scores, mean over the seeds). Runs
are evaluated once (the offline path of ``eval``, default configuration, no model) and cached
in ``--cache``; every TF-IDF is refitted inside each training fold (document frequencies,
the most frequent terms, idf: what ``TfidfVectorizer`` fitted on the fold gives), so nothing
of a held-out run reaches its model. Families of text:

- ``cur``: ``predict.text.run_text`` (final output, last 3 replies, errors, result tails);
- ``whole``: the whole run in order (every reply, call, result and error, each cut to head +
  tail; at most 40,000 characters), as the cited study (arXiv 2606.09863) reads it;
- ``says``: the agent's replies only.

Analyzers: ``w12`` word 1-2-grams (``predict.text.terms``), ``ch25`` character 2-5-grams
inside words (``char_wb``), ``one`` both in one vocabulary. Scores of several parts are each
divided by their spread and summed (``w_counts``: the counts' weight; ``nested``: the weight
0, 1/2 or 1 chosen by inner grouped folds of the training part; ``--counts-c``: the C of the
counts' logistic regression, 1 as in ``train``). Slow on a shared machine
(character n-grams of the SWE-bench runs: minutes).
"""

from __future__ import annotations

import argparse
import pickle
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold
from sklearn.preprocessing import normalize

from otel_eval.app.config import Config
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.evaluate.predict.labels import Labels, read_labels, row
from otel_eval.evaluate.predict.text import terms
from otel_eval.receive.loaders import load_path

ROOT = Path(__file__).resolve().parents[1]
TAU_RUNS = Path("tau-bench/airline/gpt-4o-airline.runs.json")
SWE = Path("swe-bench-mini-swe-agent")
WEIGHTS = (0.0, 0.5, 1.0)
COUNTS_C = [1.0]  # C of the counts' logistic regression (``--counts-c``; train's is 1)


def _cut(text: str, n: int, head: float = 0.3) -> str:
    if len(text) <= n:
        return text
    h = int(n * head)
    return text[:h] + " ... " + text[-(n - h):]


def _steps(ev: Any) -> list[dict[str, Any]]:
    out = []
    for s in ev.trajectory.steps:
        out.append({"kind": s.kind, "tool": s.tool_name, "status": s.status,
                    "error": s.error or "", "result": _cut(s.result or "", 6000, 0.5),
                    "answer": _cut(s.answer or "", 8000, 0.5),
                    "calls": [(c.name, str(c.arguments)[:5000]) for c in s.tool_calls]})
    return out


def load(datasets: Path) -> dict[str, list[dict[str, Any]]]:
    evaluator = Evaluator(Config(prediction=PredictionConfig(model_path="")))
    swe = datasets / SWE
    trajs = sorted(next(p.glob("*.traj.json*")) for p in (swe / "trajs").iterdir()
                   if p.is_dir())
    sets = {"tau": ([datasets / TAU_RUNS], Labels()),
            "swe": (trajs, read_labels([str(swe / "results_summary.json")]))}
    out: dict[str, list[dict[str, Any]]] = {}
    for name, (paths, labels) in sets.items():
        out[name] = []
        for path in paths:
            for trace in load_path(path):
                ev = evaluator.evaluate(trace)
                label = labels.of(ev)
                if label is not None:
                    output = ev.trajectory.output
                    out[name].append({"row": row(ev, label), "steps": _steps(ev),
                                      "output": output if isinstance(output, str) else ""})
    return out


def whole(d: dict[str, Any]) -> str:
    out = []
    for s in d["steps"]:
        if s["kind"] == "llm":
            if s["answer"]:
                out.append("[say] " + _cut(s["answer"], 1500))
            out.extend(f"[call] {n} {_cut(a, 600)}" for n, a in s["calls"])
        elif s["kind"] == "tool" and s["status"] == "error":
            out.append("[error] " + _cut(s["error"] + " " + s["result"], 600))
        elif s["kind"] == "tool":
            out.append(f"[result {s['tool']}] " + _cut(s["result"], 600))
    if d["output"]:
        out.append("[final] " + _cut(d["output"], 2000))
    return _cut("\n".join(out), 40000, 0.25)


def says(d: dict[str, Any]) -> str:
    return _cut("\n".join(_cut(s["answer"], 1500) for s in d["steps"]
                          if s["kind"] == "llm" and s["answer"]), 30000, 0.25)


def _both(text: str) -> list[str]:
    chars = CountVectorizer(analyzer="char_wb", ngram_range=(2, 5)).build_analyzer()
    return terms(text) + ["#" + g for g in chars(text)]


TEXTS: dict[str, Callable[[dict[str, Any]], str]] = {
    "cur": lambda d: d["row"].text, "whole": whole, "says": says}
ANALYZERS: dict[str, dict[str, Any]] = {
    "w12": {"analyzer": terms}, "ch25": {"analyzer": "char_wb", "ngram_range": (2, 5)},
    "one": {"analyzer": _both}}


class Data:
    """One set of runs: labels, groups, count features, and term counts per text design."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.y = np.array([int(d["row"].label) for d in rows])
        self.groups = np.array([d["row"].group for d in rows])
        self.names = sorted({k for d in rows for k in d["row"].values})
        self.x = np.array([[d["row"].values.get(n, 0.0) for n in self.names] for d in rows])
        self._terms: dict[tuple[str, str], Any] = {}

    def term_counts(self, text: str, analyzer: str) -> Any:
        key = (text, analyzer)
        if key not in self._terms:
            cv = CountVectorizer(**ANALYZERS[analyzer])
            docs = [TEXTS[text](d) for d in self.rows]
            self._terms[key] = cv.fit_transform(docs).tocsr().astype(float)
        return self._terms[key]

    def counts_fold(self, tr: Any, te: Any) -> tuple[Any, Any]:
        """Standardized, clipped counts as ``train`` makes them (kinds seen in >= 3 runs)."""
        support = (self.x[tr] != 0).sum(0)
        cols = [i for i, n in enumerate(self.names)
                if not n.startswith(("finding.", "tool.", "program.")) or support[i] >= 3]
        a, b = self.x[tr][:, cols], self.x[te][:, cols]
        mean, scale = a.mean(0), a.std(0)
        scale = np.where(scale > 1e-12, scale, 1.0)
        return np.clip((a - mean) / scale, -4, 4), np.clip((b - mean) / scale, -4, 4)

    def tfidf_fold(self, text: str, analyzer: str, tr: Any, te: Any,
                   max_terms: int = 20000) -> tuple[Any, Any]:
        """TF-IDF (min_df 2, the most frequent terms, smooth idf, sublinear tf, l2) fitted on
        the training rows only."""
        m = self.term_counts(text, analyzer)
        df = np.asarray((m[tr] > 0).sum(0)).ravel()
        keep = np.where(df >= 2)[0]
        if len(keep) > max_terms:
            total = np.asarray(m[tr][:, keep].sum(0)).ravel()
            keep = keep[np.argsort(-total, kind="stable")[:max_terms]]
        idf = np.log((1 + len(tr)) / (1 + df[keep])) + 1

        def weigh(rows: Any) -> Any:
            w = m[rows][:, keep].copy()
            w.data = 1 + np.log(w.data)
            return normalize(w.multiply(idf).tocsr())
        return weigh(tr), weigh(te)


def _lr(a: Any, y: Any, b: Any, c: float) -> Any:
    return LogisticRegression(C=c, max_iter=3000).fit(a, y).decision_function(b)


def _scores(data: Data, text: str, analyzer: str, tr: Any, te: Any) -> tuple[Any, Any]:
    a, b = data.counts_fold(tr, te)
    zc = _lr(a, data.y[tr], b, COUNTS_C[0])
    a, b = data.tfidf_fold(text, analyzer, tr, te)
    return zc, _lr(a, data.y[tr], b, 10.0)


def _sum(zc: Any, zt: Any, w: float) -> Any:
    return zt / (np.std(zt) or 1.0) + w * zc / (np.std(zc) or 1.0)


def _nested(data: Data, text: str, analyzer: str, tr: Any, groups: Any) -> float:
    """The counts' weight whose sum separates inner grouped folds of ``tr`` best."""
    ic, it = np.zeros(len(tr)), np.zeros(len(tr))
    for itr, ite in GroupKFold(4).split(tr, data.y[tr], groups[tr]):
        ic[ite], it[ite] = _scores(data, text, analyzer, tr[itr], tr[ite])
    y = data.y[tr]
    return max(WEIGHTS[::-1], key=lambda w: roc_auc_score(y, _sum(ic, it, w)))


def design(data: Data, text: str, analyzer: str, seeds: int,
           sources: Any = None) -> dict[str, Any]:
    """AUC per counts' weight (and nested), mean over seeds; per source when pooled."""
    keys: list[Any] = [*WEIGHTS, "nested"]
    got: dict[Any, list[Any]] = {k: [] for k in keys}
    unique = sorted(set(data.groups))
    for seed in range(seeds):
        order = dict(zip(unique, np.random.RandomState(seed).permutation(len(unique)),
                         strict=True))
        groups = np.array([order[g] for g in data.groups])
        oof = {k: np.zeros(len(data.y)) for k in keys}
        for tr, te in GroupKFold(5).split(data.y, data.y, groups):
            zc, zt = _scores(data, text, analyzer, tr, te)
            for w in WEIGHTS:
                oof[w][te] = _sum(zc, zt, w)
            if sources is None:
                oof["nested"][te] = oof[_nested(data, text, analyzer, tr, groups)][te]
        for k in keys:
            parts = [slice(None)] if sources is None else [sources == s for s in (0, 1)]
            if (sources is None and k == "nested") or k != "nested":
                got[k].append([roc_auc_score(data.y[p], oof[k][p]) for p in parts])
    return {str(k): np.round(np.mean(v, axis=0), 3).tolist() for k, v in got.items() if v}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", type=Path, default=ROOT.parent / "shared" / "datasets")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/predictor_designs.pkl"))
    ap.add_argument("--only", default="tau,swe,pooled")
    ap.add_argument("--designs", default="cur:w12,cur:ch25,cur:one,whole:w12,whole:ch25,"
                                         "says:w12")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--counts-c", type=float, default=1.0)
    args = ap.parse_args(argv)
    COUNTS_C[0] = args.counts_c
    warnings.filterwarnings("ignore")
    if args.cache.exists():
        runs = pickle.loads(args.cache.read_bytes())  # our own cache, written below
    else:
        runs = load(args.datasets)
        args.cache.write_bytes(pickle.dumps(runs))
    for name in args.only.split(","):
        pooled = name == "pooled"
        data = Data(runs["tau"] + runs["swe"] if pooled else runs[name])
        sources = np.array([0] * len(runs["tau"]) + [1] * len(runs["swe"])) if pooled else None
        for spec in args.designs.split(","):
            text, analyzer = spec.split(":")
            print(name, spec, design(data, text, analyzer, args.seeds, sources), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
