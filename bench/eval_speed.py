"""`otel-eval eval` runs per CPU-second on the tau-bench file, per stage (issue 34).

    python bench/eval_speed.py [--rounds 20] [--datasets ../shared/datasets]
    python bench/eval_speed.py --against DIR|REF [--pairs 5]   # alternate with another tree

One round evaluates every run of ``tau-bench/airline/gpt-4o-airline.runs.json`` (100 runs)
as ``otel-eval eval FILE --format jsonl`` does, in one process (20 rounds: 2,000 runs, each
round a copy of the file under a name of its own, so its runs are other runs), and
times each stage in CPU seconds (``time.process_time``; wall time measures the neighbours on
a shared machine):

- decode: the file parsed and each run turned into spans (``loaders.load_path``);
- trajectory: ``Evaluator.evaluate`` up to the detectors (``build_trajectory``, agent history);
- detectors + bound: the rest of ``Evaluator.evaluate`` (detectors, verdict, ``bound``);
- encode: the output line, as ``cmd_eval`` writes it (``Evaluation.to_json_ascii``);
- other: the rest (the in-memory agent history ``eval`` keeps, the loop).

The split is taken around ``Evaluator.trajectory`` (wrapped here), so the stages sum to the
whole. ``sink_ratio``: runs per CPU-second of the whole over those of the decode stage alone
(the file read and walked into spans, as serve's sink decodes and walks a request): the
figure ``bench/ingest.py`` gives serve, for ``eval``.

``--against DIR`` runs this script under ``PYTHONPATH=DIR`` (another checkout) and under this
checkout, alternating, ``--pairs`` times each, and prints both medians and their ratio (this
tree / the other): on a shared machine only alternating runs compare. ``--against REF`` (not
a directory): a snapshot of that commit (``git archive``), e.g. ``HEAD~1``. A tree older than
``app/offline.py``'s ``EvalRun`` (b2abff8) cannot be split by stage: compare whole ``eval``
processes there.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TAU_RUNS = Path("tau-bench/airline/gpt-4o-airline.runs.json")
STAGES = ("decode", "trajectory", "detectors", "encode", "other")


def measure(path: Path, rounds: int) -> dict[str, float]:
    """CPU seconds per stage over ``rounds`` evaluations of ``path``, and runs/s overall."""
    from otel_eval.app.config import load_config
    from otel_eval.app.offline import EvalRun

    # each round a copy of its own name: a file given again is a copy of runs already
    # evaluated (refused as late, as serve refuses them), while another name holds other runs
    copies = Path(tempfile.mkdtemp(prefix="eval-speed-"))
    names = []
    for i in range(rounds):
        names.append(str(copies / f"round{i}-{path.name}"))
        shutil.copyfile(path, names[-1])
    run = EvalRun(load_config(None), names)
    spent = dict.fromkeys(STAGES[:-1], 0.0)
    inner = run.evaluator.trajectory

    def trajectory(trace: Any) -> Any:  # the split between "trajectory" and "detectors"
        t0 = time.process_time()
        try:
            return inner(trace)
        finally:
            spent["trajectory"] += time.process_time() - t0

    run.evaluator.trajectory = trajectory  # type: ignore[method-assign]
    evaluate = run.evaluator.evaluate

    def evaluated(*args: Any, **kwargs: Any) -> Any:  # trajectory + detectors
        t0, before = time.process_time(), spent["trajectory"]
        try:
            return evaluate(*args, **kwargs)
        finally:
            spent["detectors"] += time.process_time() - t0 - (spent["trajectory"] - before)

    run.evaluator.evaluate = evaluated  # type: ignore[method-assign]
    loaded = run.traces

    def traces() -> Any:
        it = loaded()
        while True:
            t0 = time.process_time()
            trace = next(it, None)
            spent["decode"] += time.process_time() - t0
            if trace is None:
                return
            yield trace

    out = io.StringIO()
    n = 0
    start = time.process_time()
    for ev in run.judged(run._evaluated(traces())):
        t0 = time.process_time()
        if hasattr(ev, "to_json_ascii"):  # as cmd_eval writes it (older checkouts: dumps)
            out.write(ev.to_json_ascii() + "\n")
        else:
            out.write(json.dumps(ev.to_json()) + "\n")
        spent["encode"] += time.process_time() - t0
        n += 1
    total = time.process_time() - start
    shutil.rmtree(copies, ignore_errors=True)
    spent["other"] = total - sum(spent.values())  # the agent history, the loop
    return {"runs": n, "cpu_s": total, "runs_per_cpu_s": n / total,
            "sink_ratio": spent["decode"] / total,
            **{f"{k}_ms_per_100": 1e5 * v / n for k, v in spent.items()}}


def _child(src: Path, datasets: Path, rounds: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, str(HERE / "eval_speed.py"), "--datasets",
                          str(datasets), "--rounds", str(rounds), "--json"],
                         env=env, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out))


def alternate(against: Path, datasets: Path, rounds: int, pairs: int) -> dict[str, Any]:
    """Alternate ``pairs`` times between ``against`` (before) and this tree (after); print
    best, median and range of each figure, and return the medians and their ratios."""
    here = HERE.parent
    results: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(pairs):
        results["before"].append(_child(against, datasets, rounds))
        results["after"].append(_child(here, datasets, rounds))
    keys = ["runs_per_cpu_s", "sink_ratio", *(f"{k}_ms_per_100" for k in STAGES)]
    keys = [k for k in keys if all(k in r for side in results.values() for r in side)]
    print(f"{'figure':<26}{'before: best, median (range)':>34}"
          f"{'after: best, median (range)':>34}{'after/before':>14}")
    medians: dict[str, Any] = {"before": {}, "after": {}, "after_over_before": {}}
    for key in keys:  # best: the least disturbed run (most runs/s, fewest ms)
        cells = []
        for side in ("before", "after"):
            vals = [r[key] for r in results[side]]
            best = max(vals) if key in ("runs_per_cpu_s", "sink_ratio") else min(vals)
            medians[side][key] = statistics.median(vals)
            digits = 3 if key == "sink_ratio" else 0
            cells.append(f"{best:.{digits}f}, {medians[side][key]:.{digits}f} "
                         f"({min(vals):.{digits}f}-{max(vals):.{digits}f})")
        ratio = medians["after"][key] / medians["before"][key]
        medians["after_over_before"][key] = ratio
        print(f"{key:<26}{cells[0]:>34}{cells[1]:>34}{ratio:>14.2f}")
    return medians


def against(ref: str, datasets: Path, rounds: int, pairs: int) -> dict[str, Any]:
    """``alternate`` with another checkout (a directory) or a commit (a snapshot of it)."""
    if Path(ref).is_dir():
        return alternate(Path(ref), datasets, rounds, pairs)
    from ingest_procs import snapshot

    with snapshot(ref) as tree:
        return alternate(tree, datasets, rounds, pairs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", type=Path, default=HERE.parent.parent / "shared" / "datasets")
    p.add_argument("--rounds", type=int, default=20, help="evaluations of the file (100 runs)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--against", help="another checkout (a directory) or a commit to alternate with")
    p.add_argument("--pairs", type=int, default=5)
    args = p.parse_args()
    if args.against:
        against(args.against, args.datasets, args.rounds, args.pairs)
        return
    result = measure(args.datasets / TAU_RUNS, args.rounds)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:<26}{value:>12.{3 if key == 'sink_ratio' else 1}f}")


if __name__ == "__main__":
    main()
