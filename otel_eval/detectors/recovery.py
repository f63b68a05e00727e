"""Recovery detector (stage: evaluate): what the agent did after a tool call failed.

For each failed call (span error or an error payload): ``recovered`` when a later call
succeeds (a different call, or the same one on retry); ``repeated_failing_call`` when the
same call was issued again, failed again and nothing succeeded after; ``gave_up`` when
nothing succeeded after it and the outcome is not known to be a success (with a known
success the error is ``unrecovered``: a lucky pass, see lucky_pass).
"""

from __future__ import annotations

from otel_eval.detectors.calls import Call, Context, call_label, calls_for, result_failed
from otel_eval.detectors.config import DetectorsConfig, Severity
from otel_eval.model import Finding, Trajectory


def _error(call: Call, config: DetectorsConfig) -> str:
    return result_failed(call.step, call.action, config.tool_call) or "failed"


def _finding(kind: str, severity: Severity, message: str, group: list[Call],
             attributes: dict[str, object]) -> Finding:
    return Finding("recovery", kind, severity, message, [c.step.span_id for c in group],
                   [c.step.index for c in group], attributes)


def _one(cs: list[Call], i: int, outcome: str | None,
         config: DetectorsConfig) -> tuple[Finding, set[int]]:
    """The finding for the failure at ``cs[i]`` and the retries it accounts for."""
    cfg, failed = config.recovery, cs[i]
    label = call_label(failed)
    retries: list[int] = []
    for j in range(i + 1, len(cs)):
        if not cs[j].failed:
            by_retry = cs[j].key == failed.key
            return _finding(
                "recovered", "info",
                f"recovered from a failed {label} with {call_label(cs[j])}"
                + (" (retry)" if by_retry else ""),
                [failed, cs[j]], {"tool": label, "retries": len(retries),
                                  "by_retry": by_retry, "error": _error(failed, config)},
            ), set(retries)
        if cs[j].key == failed.key:
            retries.append(j)
    attrs: dict[str, object] = {"tool": label, "retries": len(retries),
                                "error": _error(failed, config)}
    group = [failed, *(cs[j] for j in retries)]
    if retries:
        return _finding("repeated_failing_call", cfg.repeated_severity,
                        f"repeated the failing call {label} {len(retries)} more time(s) "
                        "and never recovered", group, attrs), set(retries)
    if outcome == "success":
        return _finding("unrecovered", cfg.unrecovered_severity,
                        f"{label} failed and was never recovered from", group, attrs), set()
    return _finding("gave_up", cfg.gave_up_severity,
                    f"gave up after {label} failed: no later call succeeded", group,
                    attrs), set()


def detect(trajectory: Trajectory, config: DetectorsConfig, context: Context) -> list[Finding]:
    cs = calls_for(trajectory, config, context)
    out, accounted = [], set()
    for i, c in enumerate(cs):
        if c.failed and i not in accounted:
            finding, retries = _one(cs, i, context.outcome, config)
            accounted |= retries
            out.append(finding)
    return out
