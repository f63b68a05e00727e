"""Recovery detector (stage: evaluate): what the agent did after a tool call failed.

For each failed call (span error or an error payload), among the calls of the agent run
that made it (of a sub-agent a tool call ran: that invocation's; ``_runs``): ``recovered``
when a later call succeeds (a different call, or the same one on retry);
``repeated_failing_call`` when the same call was issued again, failed again and nothing
succeeded after; ``gave_up`` when nothing succeeded after it and the outcome is not known
to be a success (with a known success the error is ``unrecovered``: a lucky pass, see
lucky_pass).

"Nothing succeeded after" is a conclusion from absence: a later step whose kind is unknown (a
marker value no convention defines, ``Step.kind_unknown``) may have been the call that
succeeded; so may a later LLM step whose requested calls are unknown (its reply not recorded,
or a call in it with no name), in a run whose calls are known only from its LLM's replies
(rebuilt: no span of their own); so may a call a later LLM step asked for that no span
shows ran (``never_ran``) when its agent's model was called again after it: its tool span
may be one a collector sampled out or filtered, and without a call id (or a recorded input)
no later input tells its result. So may a call that a later LLM input of the failed
call's agent answers after the failed call's answer (by call id) when no step carries that
id: the LLM span that asked for it was sampled out or filtered, in a run whose calls are
known only from its LLM's replies (Haystack, OpenLLMetry's CrewAI), and the input of the
next LLM call still holds the call and its result. A failure followed by any of them has
no finding but ``recovered``.
So may a call after the cut of a trace released ``truncated`` (cut at the maximum trace
duration, or pushed out early: its run went on past its last step here): a failure with no
success after it there has no finding.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left, bisect_right

from otel_eval.base.results import Finding
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.detectors.calls import Call, Context, call_label, calls_for, result_failed
from otel_eval.evaluate.detectors.config import DetectorsConfig, Severity
from otel_eval.evaluate.trajectory.responses import answered_after


def _error(call: Call, config: DetectorsConfig) -> str:
    return result_failed(call.step, call.action, config.tool_call) or "failed"


def _finding(kind: str, severity: Severity, message: str, group: list[Call],
             attributes: dict[str, object]) -> Finding:
    return Finding("recovery", kind, severity, message, [c.step.span_id for c in group],
                   [c.step.index for c in group], attributes)


def _one(trajectory: Trajectory, cs: list[Call], i: int, ok_at: int, same_key: list[int],
         outcome: str | None, config: DetectorsConfig, unknown_after: int
         ) -> tuple[Finding | None, set[int]]:
    """The finding for the failure at ``cs[i]`` (None: unknown) and the retries it accounts
    for. ``ok_at``: the first call after ``i`` that did not fail (``len(cs)``: none);
    ``same_key``: the ascending positions of the calls with ``cs[i]``'s key;
    ``unknown_after``: the last step index of an unknown kind (-1: none)."""
    cfg, failed = config.recovery, cs[i]
    label = call_label(failed)
    # every call between i and ok_at failed: the same-key ones are the retries
    retries = same_key[bisect_right(same_key, i):bisect_left(same_key, ok_at)]
    if ok_at < len(cs):
        by_retry = cs[ok_at].key == failed.key
        return _finding(
            "recovered", "info",
            f"recovered from a failed {label} with {call_label(cs[ok_at])}"
            + (" (retry)" if by_retry else ""),
            [failed, cs[ok_at]], {"tool": label, "retries": len(retries),
                                  "by_retry": by_retry, "error": _error(failed, config)},
        ), set(retries)
    if failed.step.index < unknown_after or _answered_unseen(trajectory, failed.step):
        return None, set(retries)  # what came after may have succeeded
    attrs: dict[str, object] = {"tool": label, "retries": len(retries),
                                "error": _error(failed, config)}
    group = [failed, *(cs[j] for j in retries)]
    if retries:
        return _finding("repeated_failing_call", cfg.repeated_severity,
                        f"repeated the failing call {label} {len(retries)} more time(s) "
                        "and never recovered", group, attrs), set(retries)
    kind, severity, message = _unrecovered(label, outcome, config)
    return _finding(kind, severity, message, group, attrs), set()


def _unrecovered(label: str, outcome: str | None, config: DetectorsConfig
                 ) -> tuple[str, Severity, str]:
    """(kind, severity, message) of a failure nothing succeeded after: ``unrecovered`` when
    the outcome is known to be a success, else ``gave_up``."""
    if outcome == "success":
        return ("unrecovered", config.recovery.unrecovered_severity,
                f"{label} failed and was never recovered from")
    return ("gave_up", config.recovery.gave_up_severity,
            f"gave up after {label} failed: no later call succeeded")


def with_outcome(finding: Finding, outcome: str | None, config: DetectorsConfig) -> Finding:
    """``finding`` as this detector gives it when the run's outcome is ``outcome`` (an
    outcome learnt after the run was evaluated: ``Evaluator.with_outcome``): a ``gave_up``
    or ``unrecovered`` finding takes the kind, severity and message of that outcome; any
    other finding is returned as it is."""
    if finding.detector != "recovery" or finding.kind not in ("gave_up", "unrecovered"):
        return finding
    kind, severity, message = _unrecovered(str(finding.attributes.get("tool", "")),
                                           outcome, config)
    return dataclasses.replace(finding, kind=kind, severity=severity, message=message)


def _unknown_after(trajectory: Trajectory) -> int:
    """The index of the last step after which a call may have run unseen (module doc); -1:
    none. Past every step when the trace was cut while its run went on (``truncated``)."""
    if trajectory.status == "truncated":
        return max((s.index for s in trajectory.steps), default=-1) + 1
    rebuilt = any(s.rebuilt for s in trajectory.steps)
    last = -1
    for s in trajectory.steps:
        if s.kind_unknown or (rebuilt and s.kind == "llm" and (
                s.output_text is None or s.calls_unknown)):
            last = s.index
    return max(last, _unseen_call(trajectory))


def _answered_unseen(trajectory: Trajectory, failed: Step) -> bool:
    """Whether the last LLM input of ``failed``'s agent after it answers, after ``failed``'s
    call, a call no step carries the id of, without an error flag (module doc). Only asked
    of a failure nothing seen succeeded after: one parse of one input."""
    if not failed.call_id:
        return False
    last = next((s for s in reversed(trajectory.steps) if s.index <= failed.index
                 or (s.kind == "llm" and s.node == failed.node and s.input_text)), None)
    if last is None or last.index <= failed.index or not last.input_text:
        return False
    later = answered_after(last.input_text, failed.call_id)
    if not later:
        return False
    known = {s.call_id for s in trajectory.steps if s.call_id}
    known.update(c.call_id for s in trajectory.steps for c in s.tool_calls if c.call_id)
    return any(cid not in known and not failed_flag for cid, (_, failed_flag) in later)


def _unseen_call(trajectory: Trajectory) -> int:
    """The index of the last LLM step that asked for a call no span shows ran
    (``never_ran``) and after which its agent's model was called again (module doc); -1:
    none."""
    called_later: set[str | None] = set()  # the agents with an LLM step after this one
    for s in reversed(trajectory.steps):
        if s.kind != "llm":
            continue
        if s.node in called_later and any(c.outcome == "never_ran" for c in s.tool_calls):
            return s.index
        called_later.add(s.node)
    return -1


def detect(trajectory: Trajectory, config: DetectorsConfig, context: Context) -> list[Finding]:
    """Each agent run's calls apart (``_runs``), the findings in the order of their failures:
    n log n in the calls, whatever fails (each call is a retry of at most one failure)."""
    cs = calls_for(trajectory, config, context)
    if not any(c.failed for c in cs):
        return []
    unknown_after = _unknown_after(trajectory)
    out: list[Finding] = []
    for own in _runs(cs):
        out += _in_run(trajectory, own, context.outcome, config, unknown_after)
    out.sort(key=lambda f: f.step_indexes[0])  # the failed call's: the run's order
    return out


def _runs(cs: list[Call]) -> list[list[Call]]:
    """The calls of each agent run, in order: those of each invocation of a sub-agent a tool
    call ran (``Call.agent``), and the run's own agents' together. A failure is recovered
    from by a later call of the run where it happened, never by another's: not a
    coordinator's next call after its sub-agent gave up, a sub-agent's after its delegating
    call failed, nor the call of another invocation. The run's own agents are not split by
    name: a call whose parent span was dropped (a collector's filter) has no agent name,
    though its agent's retry after it has one."""
    groups: dict[str | None, list[Call]] = {}
    for c in cs:
        groups.setdefault(c.agent[2], []).append(c)
    return list(groups.values())


def _in_run(trajectory: Trajectory, cs: list[Call], outcome: str | None,
            config: DetectorsConfig, unknown_after: int) -> list[Finding]:
    """The findings of the failures among ``cs``, the calls of one agent run: one pass each
    way."""
    ok_after, nxt = [0] * len(cs), len(cs)
    for i in range(len(cs) - 1, -1, -1):
        ok_after[i] = nxt
        if not cs[i].failed:
            nxt = i
    by_key: dict[str, list[int]] = {}
    for i, c in enumerate(cs):
        by_key.setdefault(c.key, []).append(i)
    out, accounted = [], set()
    for i, c in enumerate(cs):
        if c.failed and i not in accounted:
            finding, retries = _one(trajectory, cs, i, ok_after[i], by_key[c.key],
                                    outcome, config, unknown_after)
            accounted |= retries
            if finding is not None:
                out.append(finding)
    return out
