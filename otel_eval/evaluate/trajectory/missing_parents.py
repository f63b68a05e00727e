"""Stage: trajectory (part). The agent of the steps whose parent span never arrived.

A span a sampler or a lost batch dropped leaves its children orphans: ``spans.tree_order``
puts them where they ran (under the innermost span whose time encloses theirs), but the
agent of a step is read from its parent's (``StepBuilder.scope``), so they and the steps
below them are of no known agent (``Step.node`` None) and their calls are compared apart
from the calls the same agent made in its other cycles (a loop of 4 read as 3).

Which agent the missing span was part of is not written anywhere: it may have been a cycle
of the agent it ran in (a turn, a step, a graph node) or a sub-agent's own run (a smolagents
managed agent), whose calls are not that agent's. "A nameless call is the run's agent's"
merges a sub-agent's calls (its ``final_answer``) with its coordinator's. What tells them
apart is the calls' ids. The steps under one missing span (a *group*; ``join_calls`` has
given a tool step that records no id the id of the call it ran) are the agent's

1. whose LLM step asked for, or whose tool step ran, one of the group's calls (the agent
   that asked for a call made it), else
2. whose own LLM call after the group, when it was that agent's turn (its step the last of
   a known agent before the group), was sent one of the group's call ids in its input: an
   agent is sent the calls of its earlier cycles, while a coordinator is told what its
   sub-agent answered, never the ids of the calls the sub-agent made; and a hand-off's next
   agent, sent the whole history of the one before, is not the one whose turn it was;

either only among the steps of the agent the group ran in (the nearest agent span above it
in the tree, where ``spans.tree_order`` put it). An agent is its scope (its node and its
agent span): one of no known name (a framework's default, node None) is an agent all the
same, and so are the run's steps outside every agent span. A group none of them names is of
no known agent's run: it may have been a sub-agent's, so the missing span is the unknown
span it is within (``Step.within_unknown``), as a span of a kind not understood, and its
calls are compared with no agent's. A group that ran in no span that arrived (nothing above
it in the tree, as when a killed run's agent span was never sent) stays as read. Ids shorter
than
``_MIN_ID_CHARS`` are counters (smolagents' ``call_1``), alike in every run: they tell nothing,
so a code agent's cycle (its calls have no ids of their own) is not placed.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

from otel_eval.base.steps import Step

__all__ = ["place_missing_parents"]

Who = tuple[str | None, str | None]  # an agent: its node and the id of its agent span
Scope = dict[str, Who]  # span id -> the agent it is part of

_NO_AGENT: Who = (None, None)  # outside every agent span, of no stamped name
_MIN_ID_CHARS = 16  # OpenAI's call_ + 24, Anthropic's toolu_ + 24: ids unique to a call
_LATER_CALLS = 64  # LLM steps looked at after a group for its agent's: bounded work
# the words of an LLM step's input a call id can be (JSON strings, prose)
_WORDS = re.compile(r"[^\s\"'`,;{}\[\]()<>=\\]+")


@dataclass(slots=True)
class _Known:
    """The steps not under a missing span (an agent's, named or not) the groups are linked
    to."""

    llm: list[int] = field(default_factory=list)  # positions of its LLM steps, in order
    calls: dict[str, int] = field(default_factory=dict)  # call id -> the step asking/running
    sent: dict[int, frozenset[str]] = field(default_factory=dict)  # LLM step -> ids in input

    def add(self, step: Step, at: int) -> None:
        for i in _call_ids([step]):
            self.calls.setdefault(i, at)
        if step.kind == "llm":
            self.llm.append(at)


def place_missing_parents(steps: list[Step], scope: Scope) -> None:
    """Give each group of steps under a missing parent span the agent that asked for, ran
    or was later told their calls (see module docstring); ``scope`` follows. A run whose
    spans all arrived pays two sets (tests/cost)."""
    ids = {s.span_id for s in steps}
    parents = {s.parent_span_id for s in steps}
    parents.discard(None)
    if parents <= ids:
        return
    groups: dict[str, list[int]] = {}  # missing span id -> positions of the steps under it
    within: dict[str, str] = {}  # span id of a grouped step -> its group's missing span id
    above: dict[int, int] = {}  # position of a group's first step -> the step above it
    last: dict[int, Who] = {}  # position of a group's first step -> the scope of the last
    before: Who | None = None  # step of an agent before it (the agent whose turn it was)
    path: list[int] = []  # positions of the steps above the current one, by depth
    known = _Known()
    for at, s in enumerate(steps):
        del path[s.depth:]
        parent = s.parent_span_id
        top = None if s.node is not None or parent is None else (
            parent if parent not in ids else within.get(parent))
        if top is not None:
            within[s.span_id] = top
            if top not in groups and path and before is not None:
                above[at], last[at] = path[-1], before
            groups.setdefault(top, []).append(at)
        else:
            before = scope.get(s.span_id, _NO_AGENT)
            if s.kind in ("llm", "tool"):
                known.add(s, at)
        path.append(at)
    for top, group in groups.items():
        if group[0] in above and not _place(group, steps[above[group[0]]], last[group[0]],
                                            steps, known, scope):
            for k in group:  # of no known agent's run: within the span that is missing
                steps[k].within_unknown = steps[k].within_unknown or top


def _place(at: list[int], above: Step, before: Who, steps: list[Step], known: _Known,
           scope: Scope) -> bool:
    """The group (the positions ``at`` of its steps) takes the node of the agent it ran in
    (``above``'s) whose step asked for or ran one of its calls, else of that agent's first
    LLM step after it whose input holds one of its call ids when it is the agent whose turn
    it was (``before``), when there is one; whether it did."""
    group = [steps[k] for k in at]
    told = _call_ids(group)
    agent = scope.get(above.span_id, _NO_AGENT)[1]
    # asked or ran, the earliest first (the same answer whatever the order of ``told``)
    linked = [steps[k] for k in sorted(known.calls[i] for i in told if i in known.calls)]
    after = bisect_right(known.llm, at[-1])
    for k in known.llm[after:after + _LATER_CALLS]:
        if scope.get(steps[k].span_id) == before \
                and not told.isdisjoint(_sent(known, steps, k)):
            linked.append(steps[k])
            break
    for s in linked:
        if scope.get(s.span_id, _NO_AGENT)[1] == agent:
            for g in group:
                g.node = s.node  # an unknown span inside the group still stands between
                g.within_unknown = g.within_unknown or s.within_unknown
                scope[g.span_id] = scope[s.span_id]
            return True
    return False


def _sent(known: _Known, steps: list[Step], k: int) -> frozenset[str]:
    """The words of LLM step ``k``'s input long enough to be call ids, read once a run
    whatever the number of groups (linear in the input, however many ids a group has)."""
    sent = known.sent.get(k)
    if sent is None:
        words = _WORDS.findall(steps[k].input_text or "")
        sent = known.sent[k] = frozenset(w for w in words if len(w) >= _MIN_ID_CHARS)
    return sent


def _call_ids(steps: list[Step]) -> set[str]:
    """The call ids the LLM steps asked for and the tool steps ran, but counters."""
    told: set[str] = set()
    for s in steps:
        if s.call_id:
            told.add(s.call_id)
        for call in s.tool_calls:
            if call.call_id:
                told.add(call.call_id)
    return {i for i in told if len(i) >= _MIN_ID_CHARS}
