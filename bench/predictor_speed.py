"""The success predictor's cost per run: this checkout against another, interleaved, in one
process.

    python bench/predictor_speed.py --baseline CHECKOUT [--datasets DIR] [--rounds 7]

The baseline's ``otel_eval`` is copied to a temporary directory as the package
``otel_eval_base`` (its imports renamed), so both predictors run in this process on the same
evaluations: the tau-bench airline runs and the SWE-bench mini-swe-agent runs, evaluated once
without a model (the offline path of ``eval``). Each round times one pass of each
predictor's ``Predictor.predict`` over every run (CPU time), alternating which goes first;
figures are medians over the rounds, with the ratio per round. The parts (features, the
counts' score, the run's text, the text's score) are timed the same way. Every ``p_success``
before rounding is compared (bit for bit, and the largest difference).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TAU_RUNS = Path("tau-bench/airline/gpt-4o-airline.runs.json")
SWE_TRAJS = Path("swe-bench-mini-swe-agent/trajs")
PARTS = ("predict", "features", "counts_score", "run_text", "text_score")


def _renamed_copy(checkout: Path, into: Path) -> None:
    """``checkout/otel_eval`` as the package ``otel_eval_base`` under ``into``."""
    target = into / "otel_eval_base"
    shutil.copytree(checkout / "otel_eval", target,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for f in target.rglob("*.py"):
        f.write_text(f.read_text(encoding="utf-8").replace("otel_eval", "otel_eval_base"),
                     encoding="utf-8")


def _parts(package: str) -> dict[str, Callable[[Any], Any]]:
    """What is timed, each a function of one evaluation, from ``package``'s predictor."""
    predict = importlib.import_module(f"{package}.evaluate.predict")
    config = importlib.import_module(f"{package}.evaluate.predict.config")
    computed = importlib.import_module(f"{package}.evaluate.predict.features").features
    # what the default model's prediction computes (since features version 4 it names no
    # end.* feature, so they are left out)
    features = (functools.partial(computed, end=False)
                if "end" in inspect.signature(computed).parameters else computed)
    run_text = importlib.import_module(f"{package}.evaluate.predict.text").run_text
    predictor = predict.Predictor.from_file(str(config.DEFAULT_MODEL_FILE))
    model = predictor.model
    return {"predict": predictor.predict, "features": features,
            "counts_score": lambda ev: model.score(ev.cached_features),
            "run_text": run_text,
            "text_score": lambda ev: model.text.score(ev.cached_text),
            "p": lambda ev: model.p_success(features(ev), run_text(ev))}  # as predict does


class _Run:
    """An evaluation with its features and text computed once (for the parts' timing)."""

    def __init__(self, ev: Any, features: Callable[[Any], Any], run_text: Callable[[Any], str]):
        self.ev = ev
        self.cached_features = features(ev)
        self.cached_text = run_text(ev)


def _cpu_ms(fn: Callable[[Any], Any], items: list[Any]) -> float:
    t0 = time.process_time()
    for item in items:
        fn(item)
    return (time.process_time() - t0) / len(items) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=Path, default=ROOT.parent / "shared" / "datasets")
    ap.add_argument("--baseline", type=Path, required=True,
                    help="a checkout to compare with (`git archive REV | tar -x -C DIR`)")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    from otel_eval.app.config import Config
    from otel_eval.evaluate.evaluator import Evaluator
    from otel_eval.evaluate.predict.config import PredictionConfig
    from otel_eval.receive.loaders import load_path

    tmp = Path(tempfile.mkdtemp(prefix="predictor_speed."))
    try:
        _renamed_copy(args.baseline.resolve(), tmp)
        sys.path.insert(0, str(tmp))
        impl = {"this": _parts("otel_eval"), "baseline": _parts("otel_eval_base")}
    finally:
        shutil.rmtree(tmp)
    evaluator = Evaluator(Config(prediction=PredictionConfig(model_path="")))
    for name, path in (("tau", TAU_RUNS), ("swe", SWE_TRAJS)):
        evs = [evaluator.evaluate(t) for t in load_path(args.datasets / path)]
        diffs = [abs(impl["this"]["p"](ev) - impl["baseline"]["p"](ev)) for ev in evs]
        same = sum(d == 0.0 for d in diffs)
        times: dict[str, dict[str, list[float]]] = {k: {p: [] for p in PARTS} for k in impl}
        for r in range(args.rounds):
            for label in (("this", "baseline") if r % 2 == 0 else ("baseline", "this")):
                parts = impl[label]
                runs = [_Run(ev, parts["features"], parts["run_text"]) for ev in evs]
                for part in PARTS:
                    items = runs if part in ("counts_score", "text_score") else evs
                    times[label][part].append(_cpu_ms(parts[part], items))
        print(f"{name}: {len(evs)} runs, ms CPU per run, median of {args.rounds} rounds; "
              f"p_success bit-identical on {same} of {len(evs)}, "
              f"largest difference {max(diffs):.1e}")
        print("  checkout  " + "".join(f"{p:>14}" for p in PARTS))
        for label, by_part in times.items():
            print(f"  {label:9} " + "".join(f"{statistics.median(by_part[p]):14.3f}"
                                           for p in PARTS))
        ratios = [a / b for a, b in zip(times["this"]["predict"],
                                        times["baseline"]["predict"], strict=True)]
        print(f"  predict, this / baseline: median {statistics.median(ratios):.2f} (per round "
              f"{' '.join(f'{x:.2f}' for x in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
