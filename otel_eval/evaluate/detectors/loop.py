"""Loop detector (stage: evaluate): the agent repeats itself without making progress.

(a) back-to-back identical calls (``retried_denied_call`` when one before the last was
denied: ``gen_ai.tool.call.decision.outcome`` ``deny``), but for a poll: calls that ended
on the first changed result (a job's status until it changed; its replies, alike while it
waited, are no stagnation either); (b) the same call again within a window with the same
result and only read-only calls in between (no state change, so no progress), but for a
poll as in (a): a status checked between reads until it changed; (c) cycles, a pattern of
2+ different calls repeated ``cycle_min_repeats`` times in a row, but for a poll as in (a):
a status checked with a fixed wait between, until the status changed (nor are its waits
(b)); (d) stagnation, consecutive near-identical LLM outputs that asked for the same calls
(``detectors.stagnation``); (e) code/shell agents are covered by (a)-(c) because their calls
are keyed by the canonicalized action text; (f) reworded repeats, near-duplicate calls of one
tool that brought nothing new (``detectors.reworded``); (g) circling, steps whose actions
differ only in form and whose observations add nothing new (``detectors.circling``).
Rules (a)-(c) see a code step through the calls of known tools its block made
(``calls.through_code``): the same call in two consecutive blocks is a repeated call.
Rules (a)-(c), (f) and (g) compare the calls of one agent run (``Call.agent``) with each other:
in a multi-agent run, the same call made by two agents is not an agent repeating itself, nor
the same call made by a sub-agent in two of its invocations (each is a run of that agent; a
repeated invocation is its caller's repeated call). Rule (d) compares the LLM outputs within
one invocation of a sub-agent a tool call ran (``calls.invocations``; the run's own agents'
outputs are one sequence): a sub-agent answering alike each time it is invoked is not stagnant.
LLM -> tool -> LLM alternation is never a loop (only calls are compared), and a repeat after
a state-changing call (re-running the tests after an edit) is not (b).
"""

from __future__ import annotations

from collections.abc import Sequence

from otel_eval.base.results import Finding
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.conventions.values import cut_json
from otel_eval.evaluate.detectors.calls import (
    Call,
    Context,
    by_invocation,
    call_label,
    calls_for,
    invocations_for,
    through_code,
)
from otel_eval.evaluate.detectors.circling import circling
from otel_eval.evaluate.detectors.config import DetectorsConfig, LoopConfig
from otel_eval.evaluate.detectors.reworded import reworded_repeats
from otel_eval.evaluate.detectors.stagnation import explained, stagnation


def _finding(cfg: LoopConfig, kind: str, message: str, group: Sequence[Call],
             **attributes: object) -> Finding:
    return Finding("loop", kind, cfg.severity, message,
                   span_ids=[c.step.span_id for c in group],
                   step_indexes=[c.step.index for c in group], attributes=dict(attributes))


def _arguments_text(call: Call) -> str:
    return call.key.split("\x00", 1)[1][:200]


def _runs(cs: Sequence[Call]) -> list[Sequence[Call]]:
    """The runs of two or more consecutive identical calls. The end of an output's calls
    known only in part (``Call.cut_after``) ends a run: unknown calls may have come next."""
    out, i = [], 0
    while i < len(cs):
        j = i
        while j + 1 < len(cs) and not cs[j].cut_after and cs[j + 1].key == cs[i].key:
            j += 1
        if j > i:
            out.append(cs[i:j + 1])
        i = j + 1
    return out


def _poll(run: Sequence[Call], period: int = 1) -> bool:
    """Whether calls repeated in a row (one call, or a cycle's pattern of ``period`` calls:
    a status checked and a fixed wait between) are a poll: the last ended on a result that
    differed from that of the same call one round before (a job's status called until it
    changed, and no more: the change is the progress it waited for). Both outcomes known:
    a result recorded, or the call failed (a call retried after a rate limit, its failures
    raised with no result, until it succeeded: the success is the change it waited for);
    calls with a denied one are a retry of what was refused (``retried_denied_call``), never
    a poll. The last two results cut alike at a length limit (``values.cut_json``) may differ
    past the cut: whether it changed is unknown, so it is taken for the poll it may be, never
    concluded a repeat."""
    if len(run) <= period:
        return False  # one round (``cycle_min_repeats`` 1): no result before to differ from
    last, before = run[-1], run[-1 - period]
    if any(c.step.decision == "deny" for c in run):
        return False
    if last.failed != before.failed:  # failed, then not (or the reverse): a known change
        return (last.failed or last.step.result is not None) \
            and (before.failed or before.step.result is not None)
    if last.step.result is None or before.step.result is None:
        return False  # unknown: not a change
    return last.step.result != before.step.result or cut_json(last.step.result)


def polled(cs: Sequence[Call], cfg: LoopConfig) -> set[int]:
    """The step indexes of the polls among ``cs`` (``_poll``): runs of one call (a) and
    cycles (c) that ended on a changed result, a cycle of two rounds too (a status checked
    three times with two fixed waits between: no cycle finding, but a poll all the same)."""
    if len({c.key for c in cs}) == len(cs):
        return set()  # no call made twice: neither a run nor a cycle to be a poll
    runs = [run for run in _runs(cs) if _poll(run)]
    for repeats in {cfg.cycle_min_repeats, 2}:
        runs += [run for run, period, _ in _cycle_runs(cs, cfg.cycle_max_period, repeats)
                 if _poll(run, period)]
    return {c.step.index for run in runs for c in run}


def repeated_calls(cs: Sequence[Call], cfg: LoopConfig) -> list[Finding]:
    """(a) Runs of two or more consecutive identical calls (``_runs``), but for polls: a
    run that ended on a changed result (``_poll``)."""
    out = []
    for run in _runs(cs):
        if _poll(run):
            continue
        # the same result, when every one was recorded (an unknown result is not "the same")
        known = all(c.step.result is not None for c in run)
        same = {"same_result": len({(c.step.result, c.failed) for c in run}) == 1} \
            if known else {}
        kind = "repeated_action" if run[0].action else "repeated_call"
        what = "identical action" if run[0].action else "identical arguments"
        message = f"{call_label(run[0])} called {len(run)} times in a row with {what}"
        if any(c.step.decision == "deny" for c in run[:-1]):
            kind, message = "retried_denied_call", message + ", after it was denied"
        out.append(_finding(
            cfg, kind, message, run, tool=run[0].step.tool_name or run[0].step.name,
            count=len(run), arguments=_arguments_text(run[0]), **same))
    return out


def no_progress(cs: Sequence[Call], cfg: LoopConfig) -> list[Finding]:
    """(b) Non-adjacent repeats with the same result and only read-only calls between. A
    result cut at a length limit (``values.cut_json``) is known only in part: two cut alike
    are not the same result; calls cut from an output between them (``Call.cut_after``) are
    unknown, not read-only. Two calls of polls (``polled``: the fixed wait between a
    status's checks) are no repeat: the poll made its progress when its result changed. Nor
    are repeats whose last was followed, with only read-only calls between, by the same call
    with a changed result, and no more (a status checked between other reads until it
    changed: the poll of rule (a), results cut alike an unknown change as there)."""
    polls = polled(cs, cfg)
    groups: dict[str, list[Call]] = {}
    members: dict[str, set[int]] = {}  # positions already in each group (no list scans)
    ended: dict[str, bool] = {}  # the group's last call was followed by a changed result
    for i, c in enumerate(cs):
        if c.step.result is None:
            continue
        for j in range(i - 1, max(-1, i - 1 - cfg.window_steps), -1):
            prev = cs[j]
            if prev.key != c.key:
                continue
            between = cs[j + 1:i]  # empty when adjacent: that is (a), not (b)
            linked = (all(b.read_only for b in between) and not prev.cut_after
                      and not any(b.cut_after for b in between))
            if (between and prev.step.result == c.step.result and prev.failed == c.failed
                    and linked
                    and not cut_json(c.step.result)  # cut alike: may differ past the cut
                    and not (c.step.index in polls and prev.step.index in polls)):
                group, seen = groups.setdefault(c.key, []), members.setdefault(c.key, set())
                for k in (j, i):
                    if k not in seen:
                        seen.add(k)
                        group.append(cs[k])
                ended[c.key] = False
            elif (linked and prev.step.result is not None and groups.get(c.key)
                  and groups[c.key][-1] is prev
                  and ((prev.step.result, prev.failed) != (c.step.result, c.failed)
                       or cut_json(c.step.result))):
                ended[c.key] = True  # the same call, its result changed (or cut alike)
            break  # only the nearest earlier occurrence counts
    out = []
    for key, group in groups.items():
        if ended[key]:
            continue  # a poll: it ended on the changed result it waited for
        group.sort(key=lambda c: c.step.index)
        out.append(_finding(
            cfg, "no_progress",
            f"{call_label(group[0])} repeated {len(group)} times with the same result "
            f"and no state change in between", group,
            tool=group[0].step.tool_name or group[0].step.name, count=len(group),
            window_steps=cfg.window_steps, arguments=_arguments_text(group[0])))
    return out


def _cycle_at(keys: Sequence[str], i: int, max_period: int,
              min_repeats: int) -> tuple[int, int]:
    """(period, repeats) of the shortest qualifying cycle starting at ``i``, or (0, 0)."""
    n, once_is_enough = len(keys), min_repeats < 2
    for p in range(2, max_period + 1):
        if not once_is_enough and (i + p >= n or keys[i + p] != keys[i]):
            continue  # cheap: a second repeat would start with the same key
        pattern = list(keys[i:i + p])
        if len(pattern) < p or len(set(pattern)) < 2:
            continue
        if any(p % q == 0 and pattern == pattern[:q] * (p // q) for q in range(2, p)):
            continue  # a repetition of a shorter pattern, found at that period
        reps = 1
        while list(keys[i + reps * p:i + (reps + 1) * p]) == pattern:
            reps += 1
        if reps >= min_repeats:
            return p, reps
    return 0, 0


def cycles(cs: Sequence[Call], cfg: LoopConfig) -> list[Finding]:
    """(c) A pattern of 2+ different calls repeated in a row (A B A B A B), never across the
    end of an output's calls known only in part (``Call.cut_after``), but for polls: a cycle
    whose calls, with those after it that go on with its pattern, ended on a changed result
    (``_poll``: a status checked with a fixed wait between, until the status changed)."""
    out = []
    for run, period, reps in _cycle_runs(cs, cfg.cycle_max_period, cfg.cycle_min_repeats):
        if _poll(run, period):
            continue
        group = run[:period * reps]
        names = " -> ".join(call_label(c, 30) for c in group[:period])
        out.append(_finding(
            cfg, "cycle", f"cycle of {period} calls ({names}) repeated {reps} times", group,
            period=period, repeats=reps, pattern=[call_label(c, 30) for c in group[:period]]))
    return out


def _cycle_runs(cs: Sequence[Call], max_period: int,
                min_repeats: int) -> list[tuple[Sequence[Call], int, int]]:
    """Each cycle (``_cycle_at``) as (its calls and those right after it that go on with its
    pattern, short of a whole round; period; repeats), within the stretches of calls that no
    cut (``Call.cut_after``) ends."""
    out, start = [], 0
    for end, c in enumerate(cs, 1):
        if c.cut_after or end == len(cs):
            out += _cycles_in(cs[start:end], max_period, min_repeats)
            start = end
    return out


def _cycles_in(cs: Sequence[Call], max_period: int,
               min_repeats: int) -> list[tuple[Sequence[Call], int, int]]:
    keys = [c.key for c in cs]
    out, i = [], 0
    while i < len(keys):
        period, reps = _cycle_at(keys, i, max_period, min_repeats)
        if not period:
            i += 1
            continue
        end = i + period * reps
        tail = 0  # the calls after it that go on with its pattern (a round not completed)
        while tail < period and end + tail < len(keys) and keys[end + tail] == keys[i + tail]:
            tail += 1
        out.append((cs[i:end + tail], period, reps))
        i = end
    return out


def by_agent(cs: list[Call]) -> list[list[Call]]:
    """The calls of each agent run (``Call.agent``), in order: rules (a)-(c) and (f) compare
    an agent's calls with its own (a coordinator's call and the same call by the agent it
    handed the work to are not one agent repeating itself), a sub-agent's within each of
    its invocations (the same lookup once per invocation is no repeat; invoking it again is
    the coordinator's repeated call); one list when one agent ran."""
    groups: dict[tuple[str | None, str | None, str | None], list[Call]] = {}
    for c in cs:
        groups.setdefault(c.agent, []).append(c)
    return list(groups.values())


def detect(trajectory: Trajectory, config: DetectorsConfig, context: Context) -> list[Finding]:
    cfg = config.loop
    cs = calls_for(trajectory, config, context)
    agents = by_agent(cs)
    found, compared_by_agent = [], [through_code(own) for own in agents]
    for own, compared in zip(agents, compared_by_agent, strict=True):
        found += [*repeated_calls(compared, cfg), *no_progress(compared, cfg),
                  *cycles(compared, cfg), *reworded_repeats(own, cfg)]
    covered = {i for f in found for i in f.step_indexes}
    found += circling(cs, cfg, covered)
    covered = {i for f in found for i in f.step_indexes}
    llm = trajectory.llm_steps
    # ``Step.kind_unknown``, inlined: read for every step of every run
    unknown_at = [s.index for s in trajectory.steps if "kind" in s.unknown]
    # (d) within each agent run, as the calls (``calls.invocations``): two invocations of a
    # sub-agent answering alike are no model repeating itself; findings in run order
    stagnant = sorted((f for own in by_invocation(llm, invocations_for(trajectory, context))
                       for f in stagnation(own, cfg, unknown_at)),
                      key=lambda f: f.step_indexes[0])
    if stagnant:
        tools = trajectory.tool_steps
        llm_at, tools_at = [s.index for s in llm], [s.index for s in tools]
        # arguments not recorded, or cut at a length limit: may have been a call of the loop
        unrecorded = {s.index for s in tools if s.arguments is None
                      or (isinstance(s.arguments, str) and cut_json(s.arguments))}
        # a poll's replies say the same while it waits: that is the poll, not stagnation
        covered.update(*(polled(compared, cfg) for compared in compared_by_agent))
        found += [f for f in stagnant if not explained(f, len(trajectory.steps), llm_at,
                                                        tools_at, unknown_at, covered,
                                                        unrecorded)]
    return found
