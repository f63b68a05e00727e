"""Non-termination detector (stage: evaluate): the run did not finish on its own terms.

Findings: the trace was released ``incomplete`` (root never ended) or ``truncated``; the last
LLM call failed (``llm_error``: the API's error, a context window exceeded, a rate limit; the
model never answered after it, whatever the framework then did or said), stopped for length,
or asked for tools that never ran and there is no final answer; a framework halt marker (max
steps / iterations / turns, recursion limit), or the prompt a framework sends at its cap to
force a last answer (in the last LLM call's input); an error on the root span
(``root_error``; not when it is the error of a call the run then recovered from and answered
after: OpenInference's span processor over the AI SDK sets the root ERROR with the first
failed call's message whatever followed; an answer no span recorded, as the AI SDK's
``recordOutputs: false`` leaves it, is the last LLM call's stop after it); a final output that
was recorded and is empty (``no_output``: an output the instrumentation did not record is
unknown, not empty, and proves nothing). The last LLM call of a trace released ``truncated`` is
not its run's last (the run went on past the cut): no finding is drawn from it. A truncated
trace whose root (a span without a parent) ended, or released ``trace_too_large`` (given only
to a run that ended, its entry span called from upstream too), is a run that ended with spans
of it unread (past ``assembly.max_spans_per_trace``, or refused for their service's share):
its finding is the note ``evaluation/spans_cut`` (info: it describes the measurement, not the
agent), not ``truncated``: not counted as a run that did not end, nor one that did not finish
on its own terms (``p_success``), nor a ``non_termination`` finding for ``--fail-on``.
A run otel-eval itself cut while it went on (``results.OWN_CUT_REASONS``: pushed out by
``release_oldest`` (``overflow``), given way under slot pressure (``pressure``), or missing
spans refused for their service's share (``service_share``)) is no evidence of how it ended
either: the note ``evaluation/run_cut`` (info, its ``release_reason`` in ``attributes``),
never counted as not ended, so otel-eval running out of room pages for no agent. A run cut
at ``assembly.max_trace_duration_s`` (``max_duration``: it went on past the bound set for a
run) is ``truncated``.

``results.NOT_ENDED_KINDS`` are the findings that mean the run did not end; they alone count as
a non-terminated trace in metrics and alerts (a failed or silent run did end).
"""

from __future__ import annotations

import re
from functools import lru_cache

from otel_eval.base.results import OWN_CUT_REASONS, Finding
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.conventions.messages import STOP_REASONS
from otel_eval.evaluate.detectors.calls import Context, calls_for
from otel_eval.evaluate.detectors.config import DetectorsConfig, NonTerminationConfig

_LENGTH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "model_length"})
_SCAN_CHARS = 2000  # halt markers sit at the start or end of a message
# Words one of which every match of the default patterns contains. Halt patterns: "reached
# max ...", "max_turns_exceeded", "maximum number of", "MaxTurnsExceeded", "max number of llm
# calls", "Max iterations of N reached" -> max; "recursion limit", "GraphRecursionError" ->
# recursion; "agent stopped due to"; "UsageLimitExceeded", "LlmCallsLimitExceeded";
# "LimitsExceeded"; BeeAI's "not able to resolve the task"; "function invocation limit";
# LangGraph's "need more steps". Forced-answer patterns: smolagents' "got stuck and failed",
# CrewAI's "best final answer". For ASCII text, IGNORECASE matching is lowercasing, so a text
# whose lowercase holds none of them cannot match: one substring scan instead of the regex,
# which costs ~60 us per LLM answer (~80 us a run for the last LLM input on tau-bench).
# Other patterns (a changed tuple) always run the regex.
_WORDS = {
    NonTerminationConfig().halt_patterns: (
        "max", "recursion", "agent stopped", "limitexceeded", "limitsexceeded",
        "not able to resolve", "invocation limit", "more steps"),
    NonTerminationConfig().forced_answer_patterns: ("got stuck and failed", "best final answer"),
}


@lru_cache(maxsize=16)
def _halt_regex(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


def _root(trajectory: Trajectory) -> Step | None:
    return trajectory.root_step


def _ended(trajectory: Trajectory, root: Step | None) -> bool:
    """Whether a truncated run ended: released ``trace_too_large`` (assembly gives it only to
    a run it saw end: its entry ended, whatever called it), or its own root (no parent)
    ended. An entry whose parent is remote may end while its caller's run goes on."""
    return trajectory.release_reason == "trace_too_large" or (
        root is not None and root.end_ns > 0 and root.parent_span_id is None)


def _status(trajectory: Trajectory, cfg: NonTerminationConfig) -> list[Finding]:
    root = _root(trajectory)
    ids = [root.span_id] if root else []
    idx = [root.index] if root else []
    if trajectory.status == "incomplete":
        return [Finding("non_termination", "incomplete", "error",
                        "the run never finished: the root span did not end", ids, idx)]
    if trajectory.status == "truncated" and _ended(trajectory, root):
        return [Finding("evaluation", "spans_cut", "info",
                        "the run ended, but spans or events of it were not read (past the "
                        "per-trace limit, or refused for their service's share): not the whole run",
                        ids, idx)]
    if trajectory.status == "truncated" and trajectory.release_reason in OWN_CUT_REASONS:
        return [Finding("evaluation", "run_cut", "info",
                        f"otel-eval cut the run while it went on ({trajectory.release_reason}"
                        "): not the whole run, and no sign of how it ended", ids, idx,
                        {"release_reason": trajectory.release_reason})]
    if trajectory.status == "truncated":
        return [Finding("non_termination", "truncated", cfg.truncated_severity,
                        "the trace was cut (its maximum duration, an overflow, spans "
                        "refused for their service's share, or spans past the per-trace "
                        "limit): not the whole run", ids, idx)]
    return []


def _last_llm(trajectory: Trajectory) -> list[Finding]:
    llm = trajectory.llm_steps
    if not llm:
        return []
    last = llm[-1]
    where = ([last.span_id], [last.index])
    if last.status == "error":
        return [Finding("non_termination", "llm_error", "error",
                        f"the last LLM call failed: {last.error or 'status error'}"[:300],
                        *where, {"error": last.error})]
    reasons = {r.lower() for r in last.finish_reasons}
    if reasons & _LENGTH_REASONS:
        return [Finding("non_termination", "length_stop", "error",
                        "the last LLM call was cut off at its token limit", *where,
                        {"finish_reasons": list(last.finish_reasons)})]
    if last.tool_calls and not (trajectory.output or "").strip():
        never_ran = {c.outcome for c in last.tool_calls} == {"never_ran"}
        if any(_may_have_run(s, never_ran) for s in trajectory.steps if s.index > last.index):
            return []
        names = [c.name for c in last.tool_calls]
        return [Finding("non_termination", "pending_tool_calls", "error",
                        f"the run ended with tool calls that never ran ({', '.join(names)}) "
                        "and no final answer"[:300], *where, {"tool_calls": names})]
    return []


def _may_have_run(step: Step, never_ran: bool) -> bool:
    """Whether a step after the last LLM call may have run one of its calls: a step of
    unknown kind (a call, an answer?); a tool step, unless the join found that no step ran
    any of them (``never_ran``: google-genai's loop span holds only the call it stopped at,
    and the calls it ran are the tool spans inside it) and the step's tool is recorded (one
    whose name is unknown may be a call the join could not tell)."""
    if step.kind_unknown:
        return True
    return step.kind == "tool" and (
        not never_ran or not step.tool_name or step.sources.get("tool_name") == "span name")


def _halt_markers(trajectory: Trajectory, cfg: NonTerminationConfig) -> list[Finding]:
    rx = _halt_regex(cfg.halt_patterns)
    if rx is None:
        return []
    texts: list[tuple[Step | None, str]] = [(None, trajectory.output or "")]
    for s in trajectory.steps:
        if s.error:
            texts.append((s, s.error))
        if s.kind in ("agent", "chain") and s.result:
            texts.append((s, s.result))
    seen: set[str] = set()
    words = _WORDS.get(cfg.halt_patterns)
    for step, text in texts:
        if not text or text in seen:  # the root's result is usually the output again
            continue
        seen.add(text)
        marker = _marker(text, rx, words)
        if marker is not None:
            ids = [step.span_id] if step else []
            idx = [step.index] if step else []
            return [Finding("non_termination", "halted", "error",
                            f"the framework halted the run: {marker!r}", ids, idx,
                            {"marker": marker})]
    return []


def _marker(text: str, rx: re.Pattern[str], words: tuple[str, ...] | None) -> str | None:
    """What ``rx`` finds at the start or end of ``text`` (``_SCAN_CHARS`` each), or None;
    ``words``: the lowercase words one of which every match holds (``_WORDS``)."""
    if len(text) > 2 * _SCAN_CHARS:
        text = text[:_SCAN_CHARS] + "\n" + text[-_SCAN_CHARS:]
    if words is not None and text.isascii():
        lowered = text.lower()
        if not any(map(lowered.__contains__, words)):  # in C: no frame per word
            return None
    m = rx.search(text)
    return m.group(0) if m else None


def _forced_answer(trajectory: Trajectory, cfg: NonTerminationConfig) -> list[Finding]:
    """A framework's prompt forcing a last answer out of the model at its cap, in the last
    LLM call's input (its start or end: the system message or the last message)."""
    rx = _halt_regex(cfg.forced_answer_patterns)
    llm = trajectory.llm_steps
    last = llm[-1] if llm else None
    if rx is None or last is None or not last.input_text:
        return []
    marker = _marker(last.input_text, rx, _WORDS.get(cfg.forced_answer_patterns))
    if marker is None:
        return []
    return [Finding("non_termination", "halted", "error",
                    f"the framework forced a last answer at its cap: {marker!r}",
                    [last.span_id], [last.index], {"marker": marker})]


def detect(trajectory: Trajectory, config: DetectorsConfig, context: Context) -> list[Finding]:
    cfg = config.non_termination
    out = _status(trajectory, cfg)
    if trajectory.status != "truncated":  # cut while it went on: its last call is unknown
        out += _last_llm(trajectory)
    out += _halt_markers(trajectory, cfg) or _forced_answer(trajectory, cfg)
    root = _root(trajectory)
    halted_on_root = any(f.kind == "halted" and root is not None
                         and f.span_ids == [root.span_id] for f in out)
    if root is not None and root.status == "error" and not halted_on_root \
            and not _recovered_error(trajectory, root, config, context):
        out.append(Finding("non_termination", "root_error", "error",
                           f"the run failed: {root.error or 'root span status error'}"[:300],
                           [root.span_id], [root.index], {"error": root.error}))
    final = trajectory.output
    if trajectory.status != "incomplete" and final is not None and not final.strip() \
            and not any(f.kind == "pending_tool_calls" for f in out):
        out.append(Finding("non_termination", "no_output", cfg.no_output_severity,
                           "the run produced no final output"))
    return out


def _recovered_error(trajectory: Trajectory, root: Step, config: DetectorsConfig,
                     context: Context) -> bool:
    """The root's error is the error of a call the run recovered from: a failed tool step
    (or a step of an unknown kind, which may have been one) with the same error text, a call
    after it that succeeded, and a final answer. The run went on past that error, so the
    root's status repeats it and says nothing of the run's end."""
    if not root.error or trajectory.output == "":
        return False
    last_ok = max((c.step.index for c in calls_for(trajectory, config, context)
                   if not c.failed), default=-1)
    if not trajectory.output and not _stopped_after(trajectory, last_ok):
        return False
    return any(s.index < last_ok and s.status == "error" and s.error == root.error
               and (s.kind == "tool" or s.kind_unknown) for s in trajectory.steps)


def _stopped_after(trajectory: Trajectory, index: int) -> bool:
    """The run's answer when no span recorded it (output None: unknown, not empty, as with
    the AI SDK's ``recordOutputs: false``): its last LLM call, after step ``index``, ended
    the model's turn (a stop finish reason, no call asked, no error)."""
    llm = trajectory.llm_steps
    last = llm[-1] if llm else None
    return last is not None and last.index > index and last.status != "error" \
        and not last.tool_calls and any(r.lower() in STOP_REASONS for r in last.finish_reasons)
