"""Code blocks as steps and loop rule (g), circling: figures before / after (issue 24).

    python bench/quality_codeloops.py [--datasets DIR] [--rounds N]

*Before* is the same code with code blocks not made steps (``_Rebuilder.code_step`` off), code
given to interpreter tools not read (``_Rebuilder.interpreted`` off) and rule (g) off (a
group can never reach its size); *after* is the defaults. The thresholds are the detectors'
defaults, declared in detectors/config.py before these figures were measured;
nothing is fitted to the labels here.

- TRAIL GAIA: trace-level precision / recall of loop findings against the human "Resource
  Abuse" labels; steps per run (``Trajectory.action_steps``); the circling findings.
- SWE-bench mini-swe-agent: loop rate of resolved vs unresolved runs.
- tau-bench airline: the per-trace evaluation JSON (steps and findings) byte-identical, or
  each finding added listed.
- Cost: CPU seconds to build and detect each set, before and after alternating ``rounds``
  times (median; the machine is shared: only alternating runs compare).

Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from otel_eval.base.model import Trace
from otel_eval.base.results import Finding
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig
from otel_eval.evaluate.trajectory import build_trajectory, code_actions
from otel_eval.receive.loaders import load_path

sys.path.insert(0, str(Path(__file__).parent))  # bench/ is no package
from quality_loops import _annotations, _category, _confusion, _ratio

CFG = TrajectoryConfig()


@contextlib.contextmanager
def _before() -> Iterator[None]:
    saved = code_actions._Rebuilder.code_step, code_actions._Rebuilder.interpreted
    code_actions._Rebuilder.code_step = lambda *args: None  # type: ignore[method-assign]
    code_actions._Rebuilder.interpreted = lambda *args: []  # type: ignore[method-assign]
    try:
        yield
    finally:
        code_actions._Rebuilder.code_step, code_actions._Rebuilder.interpreted = (  # type: ignore[method-assign]
            saved)


def _detectors(label: str) -> Detectors:
    config = DetectorsConfig()
    if label == "before":
        config = replace(config, loop=replace(config.loop, circling_min_steps=10**9))
    return Detectors(config)


def _run(label: str, traces: list[Trace]) -> list[tuple[Trajectory, list[Finding]]]:
    detectors = _detectors(label)
    with _before() if label == "before" else contextlib.nullcontext():
        out = []
        for trace in traces:
            t = build_trajectory(trace, CFG)
            out.append((t, detectors.evaluate(t)[0]))
    return out


def _loop(findings: list[Finding]) -> bool:
    return any(f.detector == "loop" for f in findings)


def trail(datasets: Path) -> dict[str, Any]:
    folder = datasets / "trail" / "GAIA"
    notes = _annotations(folder / "annotations")
    traces = list(load_path(folder / "traces"))
    out: dict[str, Any] = {"traces": len(traces)}
    for label in ("before", "after"):
        rows = _run(label, traces)
        flags = [(_loop(fs), any(_category(e) == "resource abuse"
                                 for e in notes.get(t.trace_id, []))) for t, fs in rows]
        circling = [f for _, fs in rows for f in fs if f.kind == "circling"]
        out[label] = {
            "loop_vs_resource_abuse": _confusion(flags),
            "steps_per_run": _ratio(sum(len(t.action_steps) for t, _ in rows), len(rows)),
            "loop_findings_by_rule": dict(Counter(f.kind for _, fs in rows for f in fs
                                                  if f.detector == "loop")),
            "circling_findings": len(circling),
            "circling_on_resource_abuse_traces": sum(
                any(f.kind == "circling" for f in fs) and abuse
                for (_, fs), (_, abuse) in zip(rows, flags, strict=True)),
        }
        if label == "before":
            out["annotated_resource_abuse"] = sum(a for _, a in flags)
    return out


def swe(datasets: Path) -> dict[str, Any]:
    folder = datasets / "swe-bench-mini-swe-agent"
    summary = json.loads((folder / "results_summary.json").read_text())
    resolved = {i["instance_id"]: bool(i["resolved"]) for i in summary["instances"]}
    runs: list[tuple[bool, Trace]] = []
    for traj_dir in sorted(p for p in (folder / "trajs").iterdir() if p.is_dir()):
        runs += [(resolved.get(traj_dir.name, False), t) for t in load_path(traj_dir)]
    out: dict[str, Any] = {}
    for label in ("before", "after"):
        rows = _run(label, [t for _, t in runs])
        group: dict[str, Counter[str]] = {"resolved": Counter(), "unresolved": Counter()}
        for (ok, _), (_, fs) in zip(runs, rows, strict=True):
            g = group["resolved" if ok else "unresolved"]
            g["runs"] += 1
            g["loop"] += _loop(fs)
            g["circling"] += any(f.kind == "circling" for f in fs)
        out[label] = {name: {"runs": g["runs"], "loop_rate": _ratio(g["loop"], g["runs"]),
                             "circling_runs": g["circling"]} for name, g in group.items()}
    return out


def _doc(t: Trajectory, findings: list[Finding]) -> str:
    return json.dumps({"steps": [s.to_json() for s in t.steps], "code_actions": t.code_actions,
                       "findings": [f.to_json() for f in findings]}, sort_keys=True)


def tau(datasets: Path) -> dict[str, Any]:
    traces = list(load_path(datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json"))
    before, after = _run("before", traces), _run("after", traces)
    added = []
    identical = 0
    for (tb, fb), (ta, fa) in zip(before, after, strict=True):
        if _doc(tb, fb) == _doc(ta, fa):
            identical += 1
            continue
        old = {json.dumps(f.to_json(), sort_keys=True) for f in fb}
        added += [{"trace_id": ta.trace_id, "finding": f"{f.detector}/{f.kind}",
                   "message": f.message} for f in fa
                  if json.dumps(f.to_json(), sort_keys=True) not in old]
    return {"traces": len(traces), "byte_identical": identical, "added_findings": added}


def cost(datasets: Path, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, path in (("trail", datasets / "trail" / "GAIA" / "traces"),
                       ("swe", datasets / "swe-bench-mini-swe-agent" / "trajs"),
                       ("tau", datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json")):
        traces = list(load_path(path))
        seconds: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(rounds):
            for label in seconds:
                started = time.process_time()
                _run(label, traces)
                seconds[label].append(time.process_time() - started)
        median = {k: sorted(v)[len(v) // 2] for k, v in seconds.items()}
        out[name] = {"traces": len(traces),
                     **{f"{k}_ms_per_trace": round(1000 * v / len(traces), 2)
                        for k, v in median.items()},
                     "after_over_before": _ratio(median["after"], median["before"])}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--datasets", type=Path, default=Path("datasets"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="trail,swe,tau,cost")
    args = ap.parse_args(argv)
    sections = args.only.split(",")
    out: dict[str, Any] = {}
    for name, run in (("trail", lambda: trail(args.datasets)), ("swe", lambda: swe(args.datasets)),
                      ("tau", lambda: tau(args.datasets)),
                      ("cost", lambda: cost(args.datasets, args.rounds))):
        if name in sections:
            out[name] = run()
            print(f"{name} done", file=sys.stderr)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
