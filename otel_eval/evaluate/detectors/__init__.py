"""Deterministic trajectory detectors (stage: evaluate).

    Detectors(config, references).evaluate(trajectory, outcome)
      -> loop, non_termination, budget, tool_call, reference, recovery, lucky_pass
      -> (findings, Verdict)

Each detector is a pure function ``detect(trajectory, config, context) -> list[Finding]``
in its own module, without I/O. ``context`` carries the known outcome, the budgets resolved
for the trajectory's agent, the reference for its task id and the findings of the detectors
that ran before (lucky_pass reads them). The verdict passes iff no finding is an error.

Error boundary (issue 11): a detector that raises on a trajectory yields an
``evaluation/evaluation_error`` finding naming the detector and the exception type, and
every other detector still runs; so does each part of building the trajectory that failed
(``Trajectory.errors``). Its severity is ``error``: a trace that could not be fully
evaluated is never reported as passed (a failing part must not hide a loop), and the reason
says which part failed, so it is told apart from an agent's fault.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from otel_eval.base.loglimit import LogLimiter, failed_line
from otel_eval.base.results import Finding, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.detectors import (
    budget,
    loop,
    lucky_pass,
    non_termination,
    recovery,
    reference,
    tool_call,
)
from otel_eval.evaluate.detectors.calls import Context, RefCall, Reference
from otel_eval.evaluate.detectors.config import (
    BUDGET_NAMES,
    DETECTOR_NAMES,
    DetectorsConfig,
    parse_budget,
)
from otel_eval.evaluate.detectors.references import ReferenceSet, load_references

__all__ = [
    "BUDGET_NAMES", "DETECTOR_NAMES", "Detectors", "DetectorsConfig", "RefCall", "Reference",
    "ReferenceSet", "evaluation_error", "load_references", "parse_budget", "verdict_of",
]

log = logging.getLogger(__name__)

Detect = Callable[[Trajectory, DetectorsConfig, Context], list[Finding]]

# Run order: lucky_pass last (it reads the others' findings); also the order of reasons.
_DETECTORS: dict[str, Detect] = {
    "loop": loop.detect,
    "non_termination": non_termination.detect,
    "budget": budget.detect,
    "tool_call": tool_call.detect,
    "reference": reference.detect,
    "recovery": recovery.detect,
    "lucky_pass": lucky_pass.detect,
}
_ORDER = {name: i for i, name in enumerate(_DETECTORS)}


def verdict_of(findings: Sequence[Finding], outcome: str | None = None,
               extra: dict[str, Any] | None = None) -> Verdict:
    """The pass rule, the one place it is written: a trace passes when no finding has
    severity ``error``; each such finding's message is a reason."""
    reasons = [f.message for f in findings if f.severity == "error"]
    return Verdict(passed=not reasons, reasons=reasons, outcome=outcome, extra=dict(extra or {}))


def evaluation_error(part: str, error: BaseException | str, span_id: str | None = None,
                     ) -> Finding:
    """The finding for a part of the evaluation that failed on this trace (see the module
    docstring): ``part`` is the detector or building step, ``error`` the exception (type)."""
    kind = error if isinstance(error, str) else type(error).__name__
    where = f" at span {span_id}" if span_id else ""
    return Finding("evaluation", "evaluation_error", "error",
                   f"{part} could not evaluate this trace{where} ({kind})",
                   [span_id] if span_id else [], [],
                   {"part": part, "error": kind})


def _sort_key(f: Finding) -> tuple[int, int, str, str]:
    first = min(f.step_indexes) if f.step_indexes else -1
    return _ORDER.get(f.detector, len(_ORDER)), first, f.kind, f.message


class Detectors:
    """All enabled detectors with their config and references."""

    def __init__(self, config: DetectorsConfig, references: ReferenceSet | None = None,
                 failure_log: LogLimiter | None = None) -> None:
        """``failure_log``: the limit of the per-trace lines of a detector failing (the
        evaluator's, shared with its other failures; None: a line each)."""
        self.config = config
        self.failure_log = failure_log if failure_log is not None else LogLimiter(0.0)
        self.references = references if references is not None else (
            load_references(config.references_path) if config.references_path else ReferenceSet())
        # per agent name: resolved budgets and enabled set (the config is frozen)
        self._resolved: dict[str | None, tuple[dict[str, float], frozenset[str]]] = {}

    def _for_agent(self, agent: str | None) -> tuple[dict[str, float], frozenset[str]]:
        got = self._resolved.get(agent)
        if got is None:
            if len(self._resolved) >= 1024:  # agent names come from telemetry: stay bounded
                self._resolved.clear()
            got = self._resolved[agent] = (self.budgets_for(agent),
                                           frozenset(self.enabled_for(agent)))
        return got

    def budgets_for(self, agent: str | None) -> dict[str, float]:
        """Budgets for an agent: config, then its overrides, then ``budget_overrides``
        (``--budget``)."""
        resolved = {f.name: getattr(self.config.budgets, f.name)
                    for f in dataclasses.fields(self.config.budgets)}
        per_agent = self.config.agents.get(agent or "")
        if per_agent is not None:
            for f in dataclasses.fields(per_agent.budgets):
                value = getattr(per_agent.budgets, f.name)
                if value is not None:
                    resolved[f.name] = value
        resolved.update(self.config.budget_overrides)
        return {k: float(v) for k, v in resolved.items() if v is not None}

    def enabled_for(self, agent: str | None) -> tuple[str, ...]:
        per_agent = self.config.agents.get(agent or "")
        if per_agent is not None and per_agent.enabled is not None:
            return per_agent.enabled
        return self.config.enabled

    def evaluate(self, trajectory: Trajectory,
                 outcome: str | None = None) -> tuple[list[Finding], Verdict]:
        """Run the enabled detectors; return findings (ordered) and the verdict."""
        budgets, enabled = self._for_agent(trajectory.agent)
        ref = self.references.get(trajectory.task_id) if trajectory.task_id is not None else None
        context = Context(outcome=outcome, budgets=dict(budgets), reference=ref)
        findings = [evaluation_error(e["part"], e["error"], e.get("span_id"))
                    for e in trajectory.errors]
        for name, detect in _DETECTORS.items():
            if name in enabled:
                context.findings = tuple(findings)
                try:
                    findings += detect(trajectory, self.config, context)
                except Exception as e:  # the boundary: one detector must not hide the others
                    failed_line(self.failure_log, log, "detector %s failed on trace %s: %s",
                                name, trajectory.trace_id, type(e).__name__)
                    findings.append(evaluation_error(name, e))
        findings.sort(key=_sort_key)
        verdict = verdict_of(findings, outcome)
        summary = reference.reference_summary(findings)
        if summary is not None:
            verdict.extra["reference"] = summary
        return findings, verdict

