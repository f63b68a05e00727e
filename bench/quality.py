"""Detector quality on the public agent traces in ../shared/datasets (issue 3).

    python bench/quality.py [--datasets DIR] [--only tau,trail,swe,speed,predictor] [--json FILE]
                            [--against REF]

- tau-bench airline runs: tool-name precision/recall and argument accuracy against the gold
  write actions (the task file loaded as references), AUC of the reference score against
  ``reward``, and the ``reward = 1`` runs flagged as lucky passes, with examples.
- TRAIL GAIA: trace-level precision/recall of the loop detector against "Resource Abuse"
  annotations before/after reading code actions and reworded repeats, code-action coverage,
  and where findings sit relative to the annotated spans (bench/quality_loops.py).
- SWE-bench mini-swe-agent: loop and budget finding rates for resolved vs unresolved runs
  (budgets = the runs' own step and cost limits) and the AUC of a reference-free score;
  ``swe_loops``: loop rates before/after, and the runs seen through their LLM spans only;
  ``loops_cost``: build + detect CPU before/after on TRAIL and SWE-bench.
- Success predictor (bench/predictor.py): AUC, Brier score and reliability with folds grouped
  by task, within tau-bench and SWE-bench and across them, against the reference-free score.
- Offline evaluation speed on the tau-bench file: ``otel-eval eval --format jsonl`` in this
  process (bench/eval_speed.py), runs per CPU-second by stage and as a ratio to the sink (the
  file decoded and walked alone); ``--against REF``: also alternating with that commit, and
  the ratio of the medians.

Every threshold is the detectors' default (set from first principles, see
otel_eval/evaluate/detectors/config.py); nothing here is fitted to these files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from sklearn.metrics import roc_auc_score

from otel_eval.base.model import Trace
from otel_eval.base.results import Finding, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig, load_references
from otel_eval.evaluate.detectors.config import BudgetsConfig
from otel_eval.evaluate.detectors.references import TAU_BENCH_WRITE_TOOLS
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.receive.loaders import load_path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASETS = ROOT.parent / "shared" / "datasets"
TAU_RUNS = Path("tau-bench/airline/gpt-4o-airline.runs.json")
TAU_TASKS = Path("tau-bench/tasks/airline_tasks_test.json")
CFG = TrajectoryConfig()


def trajectories(path: Path) -> Iterator[tuple[Trace, Trajectory]]:
    for trace in load_path(path):
        yield trace, build_trajectory(trace, CFG)


def outcome_of(t: Trajectory) -> str | None:
    value = t.root_attributes.get(CFG.outcome_attribute)
    return str(value) if value in ("success", "failure") else None


def auc(labels: list[int], scores: list[float]) -> float | None:
    if len(set(labels)) < 2:
        return None
    return round(float(roc_auc_score(labels, scores)), 3)


def ratio(num: float, den: float) -> float | None:
    return round(num / den, 3) if den else None


# --- tau-bench ---------------------------------------------------------------------------


def _gold_check(datasets: Path, refs: Any) -> int:
    """Runs whose own gold write actions differ from the task file's (expected: 0)."""
    runs = json.loads((datasets / TAU_RUNS).read_text())
    bad = 0
    for run in runs:
        gold = [(a["name"], a["kwargs"]) for a in run["info"]["task"]["actions"]
                if a["name"] in TAU_BENCH_WRITE_TOOLS]
        ref = refs[str(run["task_id"])]
        bad += gold != [(c.name, c.arguments) for c in ref.calls]
    return bad


def tau_bench(datasets: Path) -> dict[str, Any]:
    refs = load_references(datasets / TAU_TASKS)
    detectors = Detectors(DetectorsConfig(), refs)
    rows = []
    for _, t in trajectories(datasets / TAU_RUNS):
        findings, verdict = detectors.evaluate(t, outcome_of(t))
        ref_f = next(f for f in findings if f.detector == "reference")
        rows.append((t, findings, verdict, ref_f.attributes))
    n_ref = sum(len(a["expected"]) for *_, a in rows)
    n_name = sum(len(a["expected"]) - len(a["missing"]) for *_, a in rows)
    n_act = n_name + sum(len(a["unexpected"]) for *_, a in rows)
    n_wrong = sum(len(a["wrong_arguments"]) for *_, a in rows)
    labels = [int(v.outcome == "success") for _, _, v, _ in rows]
    lucky = [(t, f) for t, fs, v, _ in rows if v.outcome == "success"
             for f in fs if f.detector == "lucky_pass"]
    return {
        "runs": len(rows), "reward_1": sum(labels),
        "gold_mismatches_vs_run_info": _gold_check(datasets, refs),
        "tool_precision_micro": ratio(n_name, n_act), "tool_recall_micro": ratio(n_ref and n_name,
                                                                                 n_ref),
        "argument_accuracy_micro": ratio(n_name - n_wrong, n_name),
        "tool_precision_macro": _mean(a["tool_precision"] for *_, a in rows),
        "tool_recall_macro": _mean(a["tool_recall"] for *_, a in rows),
        "argument_accuracy_macro": _mean(a["argument_accuracy"] for *_, a in rows),
        "reference_matched": Counter(f"matched={a['matched']},reward={y}"
                                     for (*_, a), y in zip(rows, labels, strict=True)),
        "auc_reference_score_vs_reward": auc(labels, [a["score"] for *_, a in rows]),
        "auc_verdict_passed_vs_reward": auc(labels, [float(v.passed) for _, _, v, _ in rows]),
        "lucky_passes": len(lucky),
        "lucky_pass_examples": [
            {"task_id": t.task_id, "trial": t.root_attributes.get("tau_bench.trial"),
             "message": f.message, "causes": f.attributes["findings"]} for t, f in lucky[:5]],
    }


def _mean(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(sum(got) / len(got), 3) if got else None


# --- TRAIL GAIA ----------------------------------------------------------------------------


def trail(datasets: Path) -> dict[str, Any]:
    """Loop precision/recall vs "Resource Abuse" before/after, code-action coverage and
    localisation (bench/quality_loops.py)."""
    figures: dict[str, Any] = _bench_module("quality_loops").trail_loops(datasets)
    return figures


def _bench_module(name: str) -> Any:
    """Another script of bench/ as a module (the bench directory is not a package)."""
    import importlib.util

    if str(Path(__file__).parent) not in sys.path:  # its own imports (ingest_procs)
        sys.path.insert(0, str(Path(__file__).parent))
    spec = importlib.util.spec_from_file_location(f"bench_{name}",
                                                  Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- SWE-bench mini-swe-agent ---------------------------------------------------------------


def _swe_budgets(traj_file: Path) -> BudgetsConfig:
    """The run's own limits (mini-swe-agent `step_limit`, `cost_limit`; 0 means none)."""
    agent = json.loads(gzip.decompress(traj_file.read_bytes()))["info"]["config"]["agent"]
    return BudgetsConfig(steps=agent.get("step_limit") or None,
                         cost_usd=float(agent["cost_limit"]) if agent.get("cost_limit") else None)


def swe(datasets: Path) -> dict[str, Any]:
    folder = datasets / "swe-bench-mini-swe-agent"
    summary = json.loads((folder / "results_summary.json").read_text())
    resolved = {i["instance_id"]: bool(i["resolved"]) for i in summary["instances"]}
    groups: dict[bool, Counter[str]] = {True: Counter(), False: Counter()}
    labels, scores, steps = [], [], []
    for traj_dir in sorted(p for p in (folder / "trajs").iterdir() if p.is_dir()):
        traj_file = next(traj_dir.glob("*.traj.json*"))
        cfg = DetectorsConfig(budgets=_swe_budgets(traj_file))
        for _, t in trajectories(traj_file):
            findings, verdict = Detectors(cfg).evaluate(t)
            ok = resolved.get(t.task_id or traj_dir.name, False)
            g = groups[ok]
            g["runs"] += 1
            g["loop"] += any(f.detector == "loop" for f in findings)
            g["budget"] += any(f.kind.endswith("_exceeded") for f in findings)
            g["non_termination"] += any(f.detector == "non_termination" for f in findings)
            g["passed"] += verdict.passed
            labels.append(int(ok))
            scores.append(_reference_free_score(findings, verdict))
            steps.append(len(t.tool_steps))
    steps.sort()

    def rates(g: Counter[str]) -> dict[str, Any]:
        return {"runs": g["runs"], **{k: ratio(g[k], g["runs"]) for k in (
            "loop", "budget", "non_termination", "passed")}}

    return {"resolved": rates(groups[True]), "unresolved": rates(groups[False]),
            "auc_reference_free_score_vs_resolved": auc(labels, scores),
            "steps_median": steps[len(steps) // 2] if steps else None,
            "steps_max": steps[-1] if steps else None}


def _reference_free_score(findings: list[Finding], verdict: Verdict) -> float:
    """Declared before looking at the labels: 1 / (1 + error findings + warnings / 2)."""
    errors = sum(f.severity == "error" for f in findings)
    warnings = sum(f.severity == "warning" for f in findings)
    return 1.0 / (1.0 + errors + 0.5 * warnings)


# --- speed ------------------------------------------------------------------------------------


def speed(datasets: Path, against: str | None = None) -> dict[str, Any]:
    """``otel-eval eval`` on the tau-bench file, in this process (bench/eval_speed.py): runs
    per CPU-second, ms per 100 runs by stage, and the ratio to the sink (the file decoded and
    walked alone); with ``against`` (a commit or a checkout), the same alternating with it
    and the ratio of the medians (bench/eval_speed.py --against)."""
    eval_speed = _bench_module("eval_speed")
    here: dict[str, Any] = eval_speed.measure(datasets / TAU_RUNS, rounds=5)
    figures = {k: round(v, 3 if k == "sink_ratio" else 1) for k, v in here.items()}
    if against:
        figures["against"] = {"ref": against,
                              **eval_speed.against(against, datasets, rounds=5, pairs=3)}
    return figures


def predictor(datasets: Path) -> dict[str, Any]:
    """The success predictor's figures: bench/predictor.py (kept in its own file)."""
    figures: dict[str, Any] = _bench_module("predictor").figures(datasets)
    return figures


def swe_loops(datasets: Path) -> dict[str, Any]:
    """Loop rates before/after and the runs seen through LLM spans only
    (bench/quality_loops.py)."""
    figures: dict[str, Any] = _bench_module("quality_loops").swe_loops(datasets)
    return figures


def loops_cost(datasets: Path) -> dict[str, Any]:
    """CPU of build + detect before/after issue 13 on TRAIL and SWE-bench
    (bench/quality_loops.py)."""
    figures: dict[str, Any] = _bench_module("quality_loops").cost(datasets)
    return figures


SECTIONS = {"tau": tau_bench, "trail": trail, "swe": swe, "swe_loops": swe_loops,
            "loops_cost": loops_cost, "speed": speed, "predictor": predictor}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--datasets", type=Path, default=DEFAULT_DATASETS)
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help="comma-separated sections: " + ", ".join(SECTIONS))
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    ap.add_argument("--against", metavar="REF",
                    help="speed: also alternate with this commit or checkout, with the ratio")
    args = ap.parse_args(argv)
    results = {}
    for name in args.only.split(","):
        if name not in SECTIONS:
            ap.error(f"unknown section {name!r}")
        started = time.perf_counter()
        results[name] = (speed(args.datasets, args.against) if name == "speed"
                         else SECTIONS[name](args.datasets))
        print(f"== {name} ({time.perf_counter() - started:.1f} s)")
        print(json.dumps(results[name], indent=1, default=str))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
