"""Benchmark of recurring-issue discovery (otel_eval.outputs.issues) on TRAIL GAIA annotations.

    python bench/issues.py                 quality sweep (TF-IDF, and MiniLM if installed)
    python bench/issues.py --scale 100000  time and peak memory of one run on N critiques
        [--pipelines today,after --rounds 2]  (two pipelines alternated; medians, ratios)

Quality: every human error ``description`` of TRAIL GAIA is a critique; its node is the
agent span enclosing the annotated span (``openinference.span.kind`` == AGENT, its
``span_name``; "root" outside any agent). Critiques are normalized, embedded and clustered
with the stage's own functions; clusters are scored against the human ``category`` labels
(normalized: case, "Errors"/"Issues" suffixes, plurals) with NMI and ARI. Both pooled (one
group, as categories are not per node: the tracker's default since issue 29) and per node
(``issues.per_node``, the tracker before it).
Scale: N critiques synthesized by sampling the descriptions and perturbing them (word drops,
numbers, ids, paths), each a critique of its description's agent node, clustered by one
``IssueTracker.run`` in a fresh process: per node (before issue 29, cut 0.8), then pooled.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import re
import resource
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import adjusted_mutual_info_score, adjusted_rand_score

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRAIL = ROOT.parent / "shared" / "datasets" / "trail" / "GAIA"


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


# The shipped pipeline before issue 13.4: whole words and word pairs, the 0.9 cut, no merge,
# no straggler attachment, no carry-over (the same code with these settings).
BEFORE: dict[str, Any] = {"stem_chars": 0, "distance_threshold": 0.9, "merge_similarity": 1.0,
                          "attach_stragglers": False, "carry_over": False, "per_node": True}
# Before issue 29: each (level, node) clustered apart, cut 0.8.
PER_NODE: dict[str, Any] = {"per_node": True, "distance_threshold": 0.8}
# Issue 29's first round, shipped before the recurring-terms filter (term_min_traces).
TODAY: dict[str, Any] = {"term_min_traces": 0}
# Issue 29's third round, shipped before the failure taxonomy's pull: words alone.
WORDS: dict[str, Any] = {"taxonomy_weight": 0.0}
PIPELINES = {"before": BEFORE, "per_node": PER_NODE, "today": TODAY, "words": WORDS,
             "after": {}}
SWEEP = [round(0.7 + 0.025 * i, 3) for i in range(11)]  # cut thresholds tried: 0.70 .. 0.95
COVERAGE = 0.8  # the top-20 share a chosen cut must reach (issue 29's bar), when one does


def half(trace_id: str) -> str:
    """The trace's half: "A" (tuning) or "B" (reporting), by a hash of its id."""
    return "AB"[hashlib.sha256(trace_id.encode()).digest()[0] % 2]


def evaluations(items: list[Item], window: set[str] | None = None) -> list[dict[str, Any]]:
    """One v1 evaluation per trace (of ``window``, default all); each description a node
    critique of its agent node, span id "s<index in items>"."""
    evs: dict[str, dict[str, Any]] = {}
    for k, item in enumerate(items):
        if window is not None and item.trace_id not in window:
            continue
        ev = evs.setdefault(item.trace_id, {"trace_id": item.trace_id, "agent": "gaia",
                                            "steps": [], "findings": [],
                                            "judge": {"judges": {"human": {"critiques": []}}}})
        ev["judge"]["judges"]["human"]["critiques"].append(
            {"span_id": f"s{k}", "node": item.node, "score": 0.0, "text": item.text})
    return list(evs.values())


def tracker(settings: dict[str, Any]) -> Any:
    from otel_eval.app.config import build
    from otel_eval.outputs.issues.config import IssuesConfig
    from otel_eval.outputs.issues.tracker import IssueTracker

    return IssueTracker(build(IssuesConfig, settings), sqlite3.connect(":memory:"))


def assigned(result: Any) -> dict[int, str | None]:
    """item index -> issue id (None: in no issue)."""
    return {int(a.span_id[1:]): a.issue_id for a in result.assignments}


def figures(items: list[Item], settings: dict[str, Any]) -> dict[str, Any]:
    """One tracker run over ``items``: the issue list's figures against the categories.
    A critique in no issue counts as its own singleton cluster for AMI and ARI."""
    ids = assigned(tracker(settings).run(evaluations(items), now=0.0))
    labels = [ids[k] or f"none-{k}" for k in range(len(items))]
    truth = [i.category for i in items]
    sizes = Counter(v for v in ids.values() if v)
    return {"critiques": len(items), "issues": len(sizes),
            "top20_share": round(sum(n for _, n in sizes.most_common(20)) / len(items), 3),
            "in_no_issue": round(sum(v is None for v in ids.values()) / len(items), 3),
            "ami": round(adjusted_mutual_info_score(truth, labels), 3),
            "ari": round(adjusted_rand_score(truth, labels), 3)}


def choose(tune: list[Item], settings: dict[str, Any]) -> tuple[float, dict[float, Any]]:
    """The cut threshold with the best AMI on the tuning half among the cuts whose 20
    largest issues hold ``COVERAGE`` of the critiques (all cuts when none does; ties: the
    smaller cut): a reader looks at the top 20, so a purer cut that leaves half the
    critiques out of them is not the better one."""
    runs = {t: figures(tune, {**settings, "distance_threshold": t}) for t in SWEEP}
    covered = [t for t in SWEEP if runs[t]["top20_share"] >= COVERAGE] or SWEEP
    return max(covered, key=lambda t: (runs[t]["ami"], -t)), runs


def stability(items: list[Item], settings: dict[str, Any]) -> dict[str, Any]:
    """Two runs of one tracker (one catalogue) over overlapping windows: traces ordered by
    hash, window 1 = the first two thirds, window 2 = the last two thirds. Of the critiques
    in both windows and in an issue in run 1: the share with the same issue id in run 2,
    and the mean Jaccard (weighted by size) of each run-1 issue's members with its id's
    members in run 2; and the share of run 2's critiques in no issue. Uses no labels."""
    traces = sorted({i.trace_id for i in items},
                    key=lambda t: hashlib.sha256(t.encode()).hexdigest())
    third = len(traces) // 3
    first, second = set(traces[: 2 * third]), set(traces[third:])
    track = tracker(settings)
    run1 = assigned(track.run(evaluations(items, first), now=0.0))
    run2 = assigned(track.run(evaluations(items, second), now=3600.0))
    both = [k for k, i in enumerate(items) if i.trace_id in first & second and run1.get(k)]
    same = sum(run1[k] == run2.get(k) for k in both)
    jaccard = 0.0
    for iid in {run1[k] for k in both}:
        a = {k for k in both if run1[k] == iid}
        b = {k for k in both if run2.get(k) == iid}
        jaccard += len(a) * len(a & b) / len(a | b)
    in_run2 = [k for k, i in enumerate(items) if i.trace_id in second]
    return {"run2_in_no_issue": round(sum(run2.get(k) is None for k in in_run2)
                                      / len(in_run2), 3),
            "overlap_critiques_in_issue": len(both),
            "same_issue_id": round(same / len(both), 3) if both else None,
            "jaccard": round(jaccard / len(both), 3) if both else None}


def repeated(items: list[Item], splits: int = 5) -> dict[str, Any]:
    """Five random halvings of the traces (seeds 0-4), both ways round: for each pipeline,
    the cut chosen on the tuning half, the figures on the other; means and standard errors
    over the 10 folds. Less dependent on one split than the hash halves (26-30 traces)."""
    traces = sorted({i.trace_id for i in items})
    rows: dict[str, list[dict[str, Any]]] = {"before": [], "per_node": [], "after": []}
    for seed in range(splits):
        shuffled = traces[:]
        random.Random(seed).shuffle(shuffled)
        first = set(shuffled[: len(shuffled) // 2])
        parts = ([i for i in items if i.trace_id in first],
                 [i for i in items if i.trace_id not in first])
        for tune, report in ((0, 1), (1, 0)):
            for name, settings in (("before", BEFORE), ("per_node", PER_NODE),
                                   ("after", {})):
                cut, _ = choose(parts[tune], settings)
                rows[name].append({"threshold": cut, **figures(
                    parts[report], {**settings, "distance_threshold": cut})})
    out: dict[str, Any] = {}
    for name, runs in rows.items():
        out[name] = {}
        for key in ("threshold", "issues", "top20_share", "in_no_issue", "ami", "ari"):
            values = np.array([r[key] for r in runs], dtype=np.float64)
            out[name][key] = [round(float(values.mean()), 3),
                              round(float(values.std(ddof=1) / np.sqrt(len(values))), 3)]
    return out


def held_out(items: list[Item]) -> dict[str, Any]:
    """Before/after on the reporting half, the after's cut chosen on the tuning half (and
    the other way round, as a second fold)."""
    from otel_eval.outputs.issues.config import DEFAULT_DISTANCE_THRESHOLD

    halves = {h: [i for i in items if half(i.trace_id) == h] for h in "AB"}
    out: dict[str, Any] = {"halves": {h: {"critiques": len(v),
                                          "traces": len({i.trace_id for i in v})}
                                      for h, v in halves.items()},
                           "shipped_threshold": DEFAULT_DISTANCE_THRESHOLD["tfidf"]}
    for tune, report in (("A", "B"), ("B", "A")):
        chosen, sweep = choose(halves[tune], {})
        chosen_before, _ = choose(halves[tune], BEFORE)
        out[f"tune_{tune}_report_{report}"] = {
            "chosen_threshold": chosen,
            "tuning_sweep_ami": {t: r["ami"] for t, r in sweep.items()},
            "before_shipped": figures(halves[report], BEFORE),
            "per_node_shipped": figures(halves[report], PER_NODE),
            "before_cut_tuned": {"threshold": chosen_before, **figures(
                halves[report], {**BEFORE, "distance_threshold": chosen_before})},
            "after": figures(halves[report], {"distance_threshold": chosen}),
            "after_without_merge_attach": figures(halves[report], {
                "distance_threshold": chosen, "merge_similarity": 1.0,
                "attach_stragglers": False}),
            "after_shipped_default": figures(halves[report], {})}
    out["repeated_random_halves"] = repeated(items)
    out["dev_sweep_all_traces"] = {
        name: {t: figures(items, {**settings, "distance_threshold": t}) for t in SWEEP[2::2]}
        for name, settings in (("per_node", PER_NODE), ("after", {}))}
    out["stability_all_traces"] = {
        "before": stability(items, BEFORE), "per_node": stability(items, PER_NODE),
        "after": stability(items, {}),
        "after_without_carry_over": stability(items, {"carry_over": False})}
    return out


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


def scale_run(n: int, which: str) -> dict[str, Any]:
    items = load_items()
    by_trace: dict[str, dict[str, Any]] = {}
    truth: list[str] = []
    for k, (tid, node, text, category) in enumerate(synthesize(items, n)):
        truth.append(category)
        ev = by_trace.setdefault(tid, {"trace_id": tid, "agent": "bench", "steps": [],
                                       "findings": [], "judge": {"judges": {"b": {
                                           "critiques": []}}}})
        ev["judge"]["judges"]["b"]["critiques"].append(
            {"score": 0.0, "text": text, **({"span_id": f"s{k}", "node": node}
                                            if which != "before" else {})})
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    track = tracker(PIPELINES[which])
    start, cpu = time.perf_counter(), time.process_time()
    result = track.run(by_trace.values(), now=0.0)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ids = [a.issue_id or f"none-{k}" for k, a in enumerate(result.assignments)]
    sizes = Counter(a.issue_id for a in result.assignments if a.issue_id)
    return {"pipeline": which, "critiques": result.critiques, "traces": result.traces,
            "issues": len(result.issues),
            "top20_share": round(sum(c for _, c in sizes.most_common(20)) / len(ids), 3),
            "ami_vs_category": round(adjusted_mutual_info_score(truth, ids), 3),
            "seconds": round(elapsed, 1), "cpu_seconds": round(cpu, 1),
            "peak_rss_mib": round(rss_after / 1024),
            "rss_before_run_mib": round(rss_before / 1024)}


def scale_compare(n: int, trail: str, pipelines: list[str], rounds: int) -> None:
    """Each pipeline's scale run in a fresh process, alternately, ``rounds`` times; medians
    and the ratios of the second to the first (the machine is shared: compare in one run)."""
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in pipelines}
    for _ in range(rounds):
        for which in pipelines:
            cmd = [sys.executable, __file__, "--child", which, "--scale", str(n),
                   "--trail", trail]
            runs[which].append(json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                                         text=True).stdout))
            print(json.dumps(runs[which][-1]), flush=True)
    first, second = pipelines

    def median(which: str, key: str) -> float:
        return float(np.median([r[key] for r in runs[which]]))
    print(json.dumps({f"{second}/{first} {key}": round(median(second, key)
                                                       / max(median(first, key), 0.1), 2)
                      for key in ("seconds", "cpu_seconds", "peak_rss_mib")}))


def main() -> None:
    global TRAIL
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=0, help="critiques for the scale run")
    parser.add_argument("--trail", default=str(TRAIL), help="TRAIL GAIA folder")
    parser.add_argument("--child", choices=list(PIPELINES), help=argparse.SUPPRESS)
    parser.add_argument("--pipelines", default="per_node,after",
                        help="scale run: the two pipelines compared, alternately")
    parser.add_argument("--rounds", type=int, default=1, help="scale run: rounds of each")
    args = parser.parse_args()
    TRAIL = Path(args.trail)
    if args.scale and args.child:
        print(json.dumps(scale_run(args.scale, args.child)))
        return
    if args.scale:  # fresh processes, so peak RSS is each run's alone
        scale_compare(args.scale, args.trail, args.pipelines.split(","), args.rounds)
        return
    items = load_items()
    cats = Counter(i.category for i in items)
    print(json.dumps({"critiques": len(items), "traces": len({i.trace_id for i in items}),
                      "categories": len(cats), "nodes": Counter(i.node for i in items)}))
    print(json.dumps(held_out(items), indent=1))


if __name__ == "__main__":
    main()
