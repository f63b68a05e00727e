"""Stage: trajectory (part). The sub-agents a tool call ran whose spans sit beside the call's.

A coordinator that delegates to a sub-agent through a tool call makes one step of the run:
the call. Where the sub-agent's span is under the call's span (an agent called as a tool:
AutoGen, the OpenAI Agents SDK's ``as_tool``), its steps are nested under a tool step and
are not the run's (``Trajectory.action_steps``). Several stacks record the
sub-agent's span beside the call instead, under the coordinator: Agno's team member (its
span inside the ``delegate_task_to_member`` span's time), and the calls no span ran, rebuilt
from the coordinator's LLM reply, whose sub-agent ran before the coordinator's next LLM call
(a Haystack Agent run by a ComponentTool, a CrewAI coworker, an agent an MCP tool runs, a
smolagents managed agent). ``mark_delegations`` marks such an agent step ``Step.delegated``,
so its steps are the call's, not steps of the run (``Trajectory.action_steps``). The loop
and recovery rules still compare its calls, in either shape
(``Trajectory.top_level_tool_steps``): a member that loops is a loop of the run.

An agent step is delegated when a tool step of the agent above it (``Draft.scope``) holds
its time: a tool span's own time, or for a rebuilt call the time from its LLM step's end to
that agent's next LLM step's start (the result came back: a hand-off, whose agent runs the
rest of the run and is never answered from, is no delegation). Sorting by start: n log n.
"""

from __future__ import annotations

from bisect import bisect_right

from otel_eval.base.steps import Step

__all__ = ["mark_delegations"]

Scope = dict[str, tuple[str | None, str | None]]


def mark_delegations(steps: list[Step], scope: Scope) -> None:
    """Mark ``Step.delegated`` each agent step a tool call of the agent above it ran. One
    Python call per run, plain loops (tests/cost: every run pays it)."""
    calls: dict[str | None, list[tuple[int, int]]] = {}  # agent -> (start, end) of its calls
    waiting: dict[str | None, list[int]] = {}  # agent -> starts of rebuilt calls, unanswered
    members = []  # the agent steps under another agent's span
    for s in steps:
        if s.kind == "llm":  # the agent's next LLM call: its rebuilt calls had returned
            agent = scope.get(s.span_id, (None, None))[1]
            if agent in waiting:
                calls.setdefault(agent, []).extend((t, s.start_ns) for t in waiting.pop(agent))
        elif s.kind == "tool" and not s.code_block:
            agent = scope.get(s.span_id, (None, None))[1]
            if s.rebuilt:
                waiting.setdefault(agent, []).append(s.start_ns)
            else:
                calls.setdefault(agent, []).append((s.start_ns, s.end_ns))
        elif s.kind == "agent" and s.parent_span_id in scope:
            members.append(s)
    if not calls or not members:
        return
    reach: dict[str | None, tuple[list[int], list[int]]] = {}  # starts, latest end so far
    for agent, cs in calls.items():
        cs.sort()
        starts, ends, latest = [], [], 0
        for start, end in cs:
            latest = max(latest, end)
            starts.append(start)
            ends.append(latest)
        reach[agent] = starts, ends
    for s in members:
        known = reach.get(scope[s.parent_span_id or ""][1])
        if known is not None:
            k = bisect_right(known[0], s.start_ns)
            s.delegated = bool(k) and known[1][k - 1] >= s.end_ns
