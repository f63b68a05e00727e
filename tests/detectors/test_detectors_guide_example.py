"""The guide's worked example, fed through the real ingestion path (OTLP JSON): the lucky
recovery run with a reference of list_dir, edit_file (superset, arguments ignore) and
``--budget steps=5`` fails with exactly three reasons while its final state is correct.

Findings are compared with a golden file; regenerate it with OTEL_EVAL_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from otel_eval.base.model import Trace
from otel_eval.base.results import Finding, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_json
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig, load_references, parse_budget
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.receive.loaders import load_path

DATA = Path(__file__).resolve().parents[1] / "data" / "detectors"
TRACE = DATA / "guide_lucky_recovery.otlp.json"
REFERENCES = DATA / "guide_lucky_recovery.references.jsonl"
GOLDEN = DATA / "guide_lucky_recovery.expected.json"

REASONS = [
    "search_docs called 2 times in a row with identical arguments",
    "read_file called 2 times in a row with identical arguments",
    "8 steps against a budget of 5",
]


def _evaluate(trajectory: Trajectory) -> tuple[list[Finding], Verdict]:
    outcome = trajectory.root_attributes.get(TrajectoryConfig().outcome_attribute)
    detectors = Detectors(DetectorsConfig(budget_overrides=dict([parse_budget("steps=5")])),
                          load_references(REFERENCES))
    return detectors.evaluate(trajectory, str(outcome) if outcome else None)


def _check(findings: list[Finding], verdict: Verdict) -> None:
    assert verdict.passed is False
    assert verdict.reasons == REASONS
    assert verdict.outcome == "success"
    assert verdict.extra["reference"] == {
        "match": "superset", "arguments_match": "ignore", "matched": True,
        "tool_precision": 0.25, "tool_recall": 1.0, "argument_accuracy": 1.0, "score": 1.0}
    got: dict[str, Any] = {"findings": [f.to_json() for f in findings],
                           "verdict": verdict.to_json()}
    if os.environ.get("OTEL_EVAL_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(GOLDEN.read_text())


def test_guide_example_through_decoder_and_trajectory_builder() -> None:
    decoded = decode_request(request_from_json(TRACE.read_bytes()))
    assert decoded.rejected == 0
    trace = Trace(decoded.spans[0].trace_id, decoded.spans, "complete")
    trajectory = build_trajectory(trace, TrajectoryConfig())
    assert len([s for s in trajectory.steps if s.kind == "tool"]) == 8
    _check(*_evaluate(trajectory))


def test_guide_example_through_offline_loader() -> None:
    (trace,) = list(load_path(TRACE))
    _check(*_evaluate(build_trajectory(trace, TrajectoryConfig())))
