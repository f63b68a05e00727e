"""Stage: trajectory (a pass). Parallel tool calls in the order the model asked for them.

Tool spans of calls a model asked for in one reply often start in the same millisecond
(JavaScript SDKs write whole milliseconds), and which comes first in tree order is then
decided by ``spans.sibling_key`` (ends first, then span id), not by when they ran. The model's
reply says the order it asked for them (its tool calls' ids): sibling tool steps starting at
the same time whose call ids are all calls of one earlier LLM step are put, each with the
steps under it, in the order of that step's calls. Steps starting at different times keep
their order (the start time says when they ran). Linear in the steps.
"""

from __future__ import annotations

from typing import Protocol

from otel_eval.base.steps import Step

__all__ = ["order_parallel_calls"]


class _Steps(Protocol):
    """What the pass reads: ``passes.Draft`` (run as a pass with no wrapper: a call a run)."""

    steps: list[Step]


def _end_of_block(steps: list[Step], at: int) -> int:
    """The index after the step at ``at`` and every step under it (tree order)."""
    depth = steps[at].depth
    end = at + 1
    while end < len(steps) and steps[end].depth > depth:
        end += 1
    return end


def _tied_calls(steps: list[Step], at: int, asked: dict[str, tuple[int, int]]
                ) -> list[tuple[int, int, int]]:
    """(place in the reply, start, end) of the sibling blocks from ``at`` on that start when
    the step at ``at`` starts and ran calls of the same LLM step (by call id)."""
    first = steps[at]
    blocks: list[tuple[int, int, int]] = []
    llm: int | None = None
    while at < len(steps):
        step = steps[at]
        call = asked.get(step.call_id or "") if step.kind == "tool" else None
        if call is None or (llm is not None and call[0] != llm) \
                or step.depth != first.depth or step.parent_span_id != first.parent_span_id \
                or step.start_ns != first.start_ns:
            break
        llm = call[0]
        end = _end_of_block(steps, at)
        blocks.append((call[1], at, end))
        at = end
    return blocks


def order_parallel_calls(draft: _Steps) -> None:
    """Reorder ``draft.steps`` in place (see module docstring), re-indexed when one moved."""
    steps = draft.steps
    asked: dict[str, tuple[int, int]] = {}  # call id -> (LLM step index, place in its reply)
    grouped: set[int] = set()  # id() of the steps heading a block of a group already seen
    moved = False
    for at, step in enumerate(steps):  # (a group is rewritten in place, at and after ``at``)
        if step.kind == "llm":
            for place, call in enumerate(step.tool_calls):
                if call.call_id:
                    asked[call.call_id] = (at, place)
        elif step.call_id is not None and step.kind == "tool" and id(step) not in grouped \
                and at + 1 < len(steps) and (steps[at + 1].depth > step.depth
                                             or steps[at + 1].start_ns == step.start_ns):
            # (a call with a step under it, or one whose next step starts with it: the
            # per-step test is inline, the common run pays no call a step for this pass)
            blocks = _tied_calls(steps, at, asked)
            for _, start, _ in blocks:
                grouped.add(id(steps[start]))
            ordered = sorted(blocks)
            if ordered != blocks:
                steps[at:blocks[-1][2]] = [s for _, start, end in ordered
                                           for s in steps[start:end]]
                moved = True
    if moved:
        for i, step in enumerate(steps):
            step.index = i
