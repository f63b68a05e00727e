"""Benchmark of recurring-issue discovery (otel_eval.issues) on TRAIL GAIA annotations.

    python bench/issues.py                 quality sweep (TF-IDF, and MiniLM if installed)
    python bench/issues.py --scale 100000  time and peak memory of one run on N critiques

Quality: every human error ``description`` of TRAIL GAIA is a critique; its node is the
agent span enclosing the annotated span (``openinference.span.kind`` == AGENT, its
``span_name``; "root" outside any agent). Critiques are normalized, embedded and clustered
with the stage's own functions; clusters are scored against the human ``category`` labels
(normalized: case, "Errors"/"Issues" suffixes, plurals) with NMI and ARI. Both pooled (one
group, as categories are not per node) and per node (what the tracker does).
Scale: N critiques synthesized by sampling the descriptions and perturbing them (word drops,
numbers, ids, paths), clustered by one ``IssueTracker.run`` in a fresh process.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import resource
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import (
    adjusted_mutual_info_score,
    adjusted_rand_score,
    f1_score,
    normalized_mutual_info_score,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from otel_eval.issues.cluster import Linkage, cluster  # noqa: E402
from otel_eval.issues.embed import Embedder, make_embedder, minilm_available  # noqa: E402
from otel_eval.issues.normalize import normalize  # noqa: E402

TRAIL = ROOT.parent / "shared" / "datasets" / "trail" / "GAIA"
THRESHOLDS = [round(0.2 + 0.05 * i, 2) for i in range(17)]  # 0.20 .. 1.00
LINKAGES: tuple[Linkage, ...] = ("average", "complete", "single")


@dataclass(frozen=True)
class Item:
    trace_id: str
    node: str
    text: str
    category: str


def load_json_tolerant(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # one TRAIL file has a trailing comma
        return json.loads(re.sub(r",\s*([}\]])", r"\1", text))


def normalize_category(category: str) -> str:
    c = category.strip().lower()
    c = re.sub(r"\s+(errors?|issues?)$", "", c)
    return re.sub(r"failures$", "failure", c)


def span_nodes(trace_path: Path) -> dict[str, str]:
    """span id -> name of the nearest enclosing AGENT span (the span itself included)."""
    with gzip.open(trace_path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    out: dict[str, str] = {}
    stack: list[tuple[dict[str, Any], str]] = [(s, "root") for s in data["spans"]]
    while stack:
        span, node = stack.pop()
        if (span.get("span_attributes") or {}).get("openinference.span.kind") == "AGENT":
            node = span["span_name"]
        out[span["span_id"]] = node
        stack.extend((c, node) for c in span.get("child_spans") or ())
    return out


def load_items() -> list[Item]:
    items: list[Item] = []
    for path in sorted((TRAIL / "annotations").glob("*.json")):
        nodes = span_nodes(TRAIL / "traces" / f"{path.stem}.json.gz")
        for err in load_json_tolerant(path).get("errors", []):
            if err.get("description"):
                items.append(Item(path.stem, nodes.get(err.get("location", ""), "root"),
                                  err["description"], normalize_category(err["category"])))
    return items


def macro_f1_majority(truth: list[str], labels: np.ndarray) -> float:
    """Each cluster predicts its majority category (optimistic: uses the labels)."""
    majority: dict[int, str] = {}
    for lab in set(labels.tolist()):
        majority[lab] = Counter(t for t, l2 in zip(truth, labels, strict=True)
                                if l2 == lab).most_common(1)[0][0]
    pred = [majority[int(lab)] for lab in labels]
    return float(f1_score(truth, pred, average="macro"))


def score(truth: list[str], labels: np.ndarray) -> dict[str, float]:
    sizes = Counter(labels.tolist())
    return {"nmi": round(normalized_mutual_info_score(truth, labels), 3),
            "ami": round(adjusted_mutual_info_score(truth, labels), 3),
            "ari": round(adjusted_rand_score(truth, labels), 3),
            "clusters": len(sizes),
            "issues": sum(1 for s in sizes.values() if s >= 2),  # clusters of 2 or more
            "covered": round(sum(s for s in sizes.values() if s >= 2) / len(labels), 3),
            "f1_majority": round(macro_f1_majority(truth, labels), 3)}


def per_node_labels(items: list[Item], embedder: Embedder, threshold: float) -> np.ndarray:
    out = np.zeros(len(items), dtype=np.int64)
    base = 0
    for node in sorted({i.node for i in items}):
        idx = [k for k, i in enumerate(items) if i.node == node]
        x, _ = embedder.embed([normalize(items[k].text) for k in idx])
        labels = cluster(x, threshold, max_exact=3000)
        out[idx] = labels + base
        base += int(labels.max()) + 1
    return out


def quality(embedding: str, items: list[Item]) -> dict[str, Any]:
    embedder = make_embedder(embedding)
    truth = [i.category for i in items]
    x, _ = embedder.embed([normalize(i.text) for i in items])
    sweep = {t: score(truth, cluster(x, t, max_exact=3000)) for t in THRESHOLDS}
    # Chosen by AMI: NMI rewards near-singleton clusterings (many small clusters).
    best = max(sweep, key=lambda t: (sweep[t]["ami"], sweep[t]["ari"]))
    linkages = {}
    for linkage in LINKAGES:
        runs = {t: score(truth, cluster(x, t, 3000, linkage)) for t in THRESHOLDS}
        top = max(runs, key=lambda t: (runs[t]["ami"], runs[t]["ari"]))
        linkages[linkage] = {"threshold": top, **runs[top]}
    dense = x.toarray() if hasattr(x, "toarray") else np.asarray(x)
    k = len(set(truth))
    oracle = KMeans(n_clusters=k, n_init=10, random_state=0).fit_predict(dense)
    return {"embedding": embedding, "sweep": sweep, "best_threshold": best,
            "linkages": linkages,
            "pooled_best": sweep[best], "per_node_best": score(
                truth, per_node_labels(items, embedder, best)),
            "kmeans_oracle_k": {"k": k, **score(truth, oracle)}}


def tracker_demo(items: list[Item], embedding: str) -> dict[str, Any]:
    """One default-config tracker run with the descriptions as node critiques: top issues."""
    import sqlite3

    from otel_eval.config import build
    from otel_eval.issues.config import IssuesConfig
    from otel_eval.issues.result import to_json
    from otel_eval.issues.tracker import IssueTracker

    evs: dict[str, dict[str, Any]] = {}
    for k, item in enumerate(items):
        ev = evs.setdefault(item.trace_id, {"trace_id": item.trace_id, "agent": "gaia",
                                            "steps": [], "findings": [],
                                            "judge": {"judges": {"human": {"critiques": []}}}})
        ev["judge"]["judges"]["human"]["critiques"].append(
            {"span_id": f"s{k}", "node": item.node, "score": 0.0, "text": item.text})
    cfg = build(IssuesConfig, {"embedding": embedding})
    out = to_json(IssueTracker(cfg, sqlite3.connect(":memory:")).run(evs.values(), now=0.0))
    assigned = sum(1 for a in out["assignments"] if a["issue_id"])
    top = sorted(out["issues"], key=lambda i: -i["share"])[:6]
    return {"embedding": embedding, "issues": len(out["issues"]),
            "critiques_in_issues": round(assigned / len(items), 3),
            "top": [(i["node"], round(i["share"], 2), i["title"]) for i in top]}


def synthesize(items: list[Item], n: int,
               seed: int = 0) -> Iterator[tuple[str, str, str, str]]:
    """(trace id, node, text, category): descriptions with words dropped, values varied."""
    rng = np.random.default_rng(seed)
    extras = ["after {n} retries", "in span {h}", "reading /data/run{n}/out.json",
              "at https://api.example.com/v{n}", "with value '{w}'", "({n}% of calls)"]
    for k in range(n):
        item = items[int(rng.integers(len(items)))]
        words = [w for w in item.text.split() if rng.random() > 0.1]
        extra = extras[int(rng.integers(len(extras)))].format(
            n=int(rng.integers(1000)), h=f"{int(rng.integers(2**63)):016x}",
            w=f"v{int(rng.integers(99))}")
        yield f"{k // 5:032x}", item.node, " ".join(words) + " " + extra, item.category


def scale_run(n: int, embedding: str) -> dict[str, Any]:
    import sqlite3

    from otel_eval.config import build
    from otel_eval.issues.config import IssuesConfig
    from otel_eval.issues.tracker import IssueTracker

    items = load_items()
    by_trace: dict[str, dict[str, Any]] = {}
    truth: list[str] = []
    for tid, _node, text, category in synthesize(items, n):
        truth.append(category)
        ev = by_trace.setdefault(tid, {"trace_id": tid, "agent": "bench", "steps": [],
                                       "findings": [], "judge": {"judges": {"b": {
                                           "critiques": []}}}})
        ev["judge"]["judges"]["b"]["critiques"].append({"score": 0.0, "text": text})
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cfg = build(IssuesConfig, {"embedding": embedding})
    tracker = IssueTracker(cfg, sqlite3.connect(":memory:"))
    start = time.perf_counter()
    result = tracker.run(by_trace.values(), now=0.0)
    elapsed = time.perf_counter() - start
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ids = [a.issue_id or f"none-{k}" for k, a in enumerate(result.assignments)]
    return {"ami_vs_category": round(adjusted_mutual_info_score(truth, ids), 3),
            "ari_vs_category": round(adjusted_rand_score(truth, ids), 3),
            "critiques": result.critiques, "traces": result.traces, "issues": len(result.issues),
            "embedding": embedding, "seconds": round(elapsed, 1),
            "peak_rss_mib": round(rss_after / 1024), "rss_before_run_mib": round(rss_before / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=0, help="critiques for the scale run")
    parser.add_argument("--embedding", default="tfidf", choices=["tfidf", "minilm"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scale and args.child:
        print(json.dumps(scale_run(args.scale, args.embedding)))
        return
    if args.scale:  # a fresh process, so peak RSS is this run's alone
        cmd = [sys.executable, __file__, "--child", "--scale", str(args.scale),
               "--embedding", args.embedding]
        print(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout, end="")
        return
    items = load_items()
    cats = Counter(i.category for i in items)
    print(json.dumps({"critiques": len(items), "traces": len({i.trace_id for i in items}),
                      "categories": len(cats), "nodes": Counter(i.node for i in items)}))
    for embedding in ["tfidf", *(["minilm"] if minilm_available() else [])]:
        print(json.dumps(quality(embedding, items)))
        print(json.dumps(tracker_demo(items, embedding)))


if __name__ == "__main__":
    main()
