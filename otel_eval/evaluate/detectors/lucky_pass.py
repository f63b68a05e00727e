"""Lucky-pass detector (stage: evaluate): a success reached by a bad path.

When the outcome is known to be a success but the path had loops, unrecovered tool errors
or a blown budget, say so: the result was right, the trajectory was not. Reads the findings
of the detectors that ran before it (``context.findings``).
"""

from __future__ import annotations

from otel_eval.base.results import Finding, budget_exceeded
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig

_UNRECOVERED = frozenset({"repeated_failing_call", "unrecovered", "gave_up"})


def _reason(f: Finding) -> str | None:
    if f.detector == "loop" and f.severity != "info":
        return "loops"
    if f.detector == "recovery" and f.kind in _UNRECOVERED:
        return "unrecovered errors"
    if budget_exceeded(f.detector, f.kind):
        return "a blown budget"
    return None


def detect(trajectory: Trajectory, config: DetectorsConfig, context: Context) -> list[Finding]:
    if context.outcome != "success":
        return []
    causes: dict[str, list[Finding]] = {}
    for f in context.findings:
        reason = _reason(f)
        if reason is not None:
            causes.setdefault(reason, []).append(f)
    if not causes:
        return []
    # each id once, in order of first appearance (dicts: the causes often share their steps)
    spans: dict[str, None] = {}
    steps: dict[int, None] = {}
    for group in causes.values():
        for f in group:
            spans.update(dict.fromkeys(f.span_ids))
            steps.update(dict.fromkeys(f.step_indexes))
    reasons = list(causes)
    text = reasons[0] if len(reasons) == 1 else ", ".join(reasons[:-1]) + " and " + reasons[-1]
    return [Finding(
        "lucky_pass", "lucky_pass", config.lucky_pass.severity,
        f"succeeded despite {text}", list(spans), sorted(steps),
        {"causes": reasons, "findings": {r: [f.kind for f in g] for r, g in causes.items()}})]
