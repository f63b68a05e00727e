"""``otel-eval calibrate``: the judge checked against people, from serve's store.

    store (feedback outcomes joined with their stored evaluations) -> evaluate.calibration
      -> table (per service, agent, score: runs, successes/failures, AUC [95 % CI],
         kappa at the pass threshold [95 % CI]) | JSON (the ``GET /v1/calibration`` object)

The store is only read. A store with no labelled run prints a line saying so (exit 0): there
is nothing to agree with yet.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from otel_eval.app.config import Config
from otel_eval.base.printable import printable
from otel_eval.evaluate.calibration import report


def cmd_calibrate(args: argparse.Namespace, cfg: Config, out: TextIO) -> int:
    from otel_eval.store import is_postgresql_url, open_store, redact_url

    target = args.store or cfg.store.target
    if not is_postgresql_url(target) and not Path(target).is_file():
        print(f"otel-eval calibrate: no store at {target} (--store PATH|URL, or store.path / "
              "store.url in --config)", file=sys.stderr)
        return 1
    try:
        store = open_store(target, read_only=True)
    except Exception as e:  # a server down, a wrong password: say so, no traceback
        print(f"otel-eval calibrate: cannot open the store at {redact_url(target)}: {e}",
              file=sys.stderr)
        return 1
    try:
        found = report(store, cfg.judge, args.limit, cfg.prediction.pass_threshold,
                       _serving(cfg))
    finally:
        store.close()
    if args.format == "json":
        out.write(json.dumps(found, indent=2) + "\n")
    else:
        print_table(found, out)
    return 0


def _serving(cfg: Config) -> str | None:
    """The label of the model ``serve`` predicts with under this config (its p_success rows
    come first); None when prediction is off or its file cannot be read (``serve`` would not
    start with it)."""
    if not cfg.prediction.enabled:
        return None
    from otel_eval.evaluate.predict import ModelFileError, load_model
    try:
        return load_model(cfg.prediction.model_file).label
    except ModelFileError:
        return None


def _interval(value: float | None, ci: list[float] | None) -> str:
    if value is None or ci is None:
        return "-"
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def print_table(found: dict[str, Any], out: TextIO) -> None:
    if not found["groups"]:
        out.write(f"no labelled run with a judge score or p_success "
                  f"({found['labelled_runs']} outcomes recorded through POST /v1/feedback)\n")
        return
    out.write("service  agent  score  model  runs  successes  failures  threshold  "
              "AUC [95% CI]  kappa [95% CI]\n")
    for g in found["groups"]:  # service, agent: span content, escaped as ``show`` does
        model = g.get("model")
        out.write(f"{printable(g['service'] or '-')}  {printable(g['agent'] or '-')}  "
                  f"{printable(str(g['score']))}  {printable(model or '-')}  {g['runs']}  "
                  f"{g['successes']}  {g['failures']}  {g['threshold']}  "
                  f"{_interval(g['auc'], g['auc_ci95'])}  "
                  f"{_interval(g['kappa'], g['kappa_ci95'])}\n")
    out.write(f"{found['labelled_runs']} labelled runs; service and agent '*': every "
              "agent's runs\n")
