"""The failure taxonomy's pull on recurring issues (issue 29), on TRAIL GAIA's dev half.

    python bench/issues_taxonomy.py                  10 folds through the whole tracker
    python bench/issues_taxonomy.py --train FILE     the shipped model (all the dev half)

The taxonomy (``otel_eval/outputs/issues/taxonomy.py``) is a logistic regression (C 10) over
TF-IDF of 5-letter stems, trained on the human error descriptions and their categories
(normalized as ``bench/issues.py`` does). Protocol, nothing of a reporting half seen before
it is scored: 5 random halvings of the traces (seeds 0-4), both ways round; on the tuning
half T, the taxonomy is trained on a random half T1 of its traces and the weight and the cut
chosen on the other, T2, by the rule of ``bench/issues.py`` (best AMI among the settings
whose 20 largest issues hold 80 % of the critiques); the reporting half is then clustered by
``IssueTracker.run`` (merge, attachment, carry-over: the shipped pipeline) with a taxonomy
trained on all of T and the chosen settings. Means and standard errors over the 10 folds,
beside the tracker without the taxonomy (its cut chosen on T the same way).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import issues as bench_issues

from otel_eval.outputs.issues.embed import TfidfEmbedder
from otel_eval.outputs.issues.normalize import normalize
from otel_eval.outputs.issues.taxonomy import FORMAT, FORMAT_VERSION

STEM_CHARS = 5
C = 10.0
WEIGHTS = (1.0, 1.5, 2.0, 3.0)
CUTS = [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85]


def train_document(items: list[bench_issues.Item], name: str) -> dict[str, Any]:
    """The taxonomy document trained on ``items``' descriptions and categories."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(analyzer=TfidfEmbedder(stem_chars=STEM_CHARS)._analyzer(),
                          sublinear_tf=True)
    x = vec.fit_transform([normalize(i.text) for i in items])
    model = LogisticRegression(C=C, max_iter=5000).fit(x, [i.category for i in items])
    terms = [str(t) for t in vec.get_feature_names_out()]
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "name": name,
            "stem_chars": STEM_CHARS, "categories": [str(c) for c in model.classes_],
            "terms": terms, "idf": [round(float(v), 6) for v in vec.idf_],
            "coefficients": [[round(float(v), 5) for v in row] for row in model.coef_],
            "intercepts": [round(float(v), 5) for v in model.intercept_],
            "training": {"descriptions": len(items),
                         "traces": len({i.trace_id for i in items}),
                         "source": "TRAIL GAIA dev half (human error descriptions, categories)",
                         "estimator": f"LogisticRegression(C={C}) over TF-IDF of "
                                      f"{STEM_CHARS}-letter stems"}}


def _halves(traces: list[str], seed: int) -> tuple[set[str], set[str]]:
    shuffled = traces[:]
    random.Random(seed).shuffle(shuffled)
    return set(shuffled[: len(shuffled) // 2]), set(shuffled[len(shuffled) // 2:])


def _choose(tune: list[bench_issues.Item], model: str | None) -> tuple[dict[str, Any], Any]:
    """Settings (weight, cut) chosen on ``tune`` by bench/issues.py's rule."""
    grid = ([{"taxonomy_model": model, "taxonomy_weight": w, "distance_threshold": c}
             for w in WEIGHTS for c in CUTS] if model else
            [{"taxonomy_weight": 0.0, "distance_threshold": c} for c in bench_issues.SWEEP])
    runs = [(s, bench_issues.figures(tune, s)) for s in grid]
    covered = [r for r in runs if r[1]["top20_share"] >= bench_issues.COVERAGE] or runs
    return max(covered, key=lambda r: (r[1]["ami"], -r[0]["distance_threshold"]))


def folds(items: list[bench_issues.Item], splits: int, tmp: Path) -> dict[str, Any]:
    traces = sorted({i.trace_id for i in items})
    rows: dict[str, list[dict[str, Any]]] = {"words": [], "taxonomy": []}
    for seed in range(splits):
        for tune_set, report_set in (_halves(traces, seed), _halves(traces, seed)[::-1]):
            tune = [i for i in items if i.trace_id in tune_set]
            report = [i for i in items if i.trace_id in report_set]
            t1, _ = _halves(sorted(tune_set), 100 + seed)
            inner = tmp / f"inner-{seed}-{len(rows['words'])}.json"
            inner.write_text(json.dumps(train_document(
                [i for i in tune if i.trace_id in t1], "inner")))
            chosen, _ = _choose([i for i in tune if i.trace_id not in t1], str(inner))
            whole = tmp / f"tune-{seed}-{len(rows['words'])}.json"
            whole.write_text(json.dumps(train_document(tune, "tune")))
            settings = {**chosen, "taxonomy_model": str(whole)}
            rows["taxonomy"].append({"weight": settings["taxonomy_weight"],
                                     "threshold": settings["distance_threshold"],
                                     **bench_issues.figures(report, settings)})
            words, _ = _choose(tune, None)
            rows["words"].append({"weight": 0.0, "threshold": words["distance_threshold"],
                                  **bench_issues.figures(report, words)})
            print(json.dumps({"fold": len(rows["words"]), "taxonomy": rows["taxonomy"][-1],
                              "words": rows["words"][-1]}), file=sys.stderr, flush=True)
    out: dict[str, Any] = {}
    for name, runs in rows.items():
        out[name] = {}
        for key in ("weight", "threshold", "issues", "top20_share", "in_no_issue", "ami",
                    "ari"):
            values = np.array([r[key] for r in runs], dtype=np.float64)
            out[name][key] = [round(float(values.mean()), 3),
                              round(float(values.std(ddof=1) / np.sqrt(len(values))), 3)]
        out[name]["chosen"] = [(r["weight"], r["threshold"]) for r in runs]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, help="write the model trained on the dev half")
    parser.add_argument("--splits", type=int, default=5)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    items = bench_issues.load_items()
    if args.train:
        doc = train_document(items, "trail-gaia-dev")
        args.train.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(f"wrote {args.train}: {len(doc['categories'])} categories, "
              f"{len(doc['terms'])} stems")
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(folds(items, args.splits, Path(tmp)), indent=1))


if __name__ == "__main__":
    main()
