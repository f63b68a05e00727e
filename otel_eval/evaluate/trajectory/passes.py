"""Stage: trajectory (part). The passes that turn the steps read from the spans into the run.

``spans.py`` reads every span into one step (``otel_eval.evaluate.conventions``: the readers),
in tree order, and hands them to ``run_passes`` in a ``Draft``. ``PASSES`` is the order they
run in, each with the precondition it relies on: a pass may only be moved where its
precondition still holds. Each pass reads and rewrites the draft in place; the two that
insert steps (``rebuild_tool_calls``, ``rebuild_code_actions``) replace ``Draft.steps`` with
a new, re-indexed list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from otel_eval.base.steps import Step, ToolCall
from otel_eval.evaluate.conventions.messages import answer_of, answer_text
from otel_eval.evaluate.trajectory.arguments import settle, take_off_envelopes
from otel_eval.evaluate.trajectory.code_actions import last_message_text, rebuild_code_actions
from otel_eval.evaluate.trajectory.delegations import mark_delegations
from otel_eval.evaluate.trajectory.envelopes import take_off_result, take_off_results
from otel_eval.evaluate.trajectory.links import coerce_arguments, join_calls, merge_nested_calls
from otel_eval.evaluate.trajectory.missing_parents import place_missing_parents
from otel_eval.evaluate.trajectory.parallel_calls import order_parallel_calls
from otel_eval.evaluate.trajectory.prices import price_steps
from otel_eval.evaluate.trajectory.responses import ToolResponses
from otel_eval.evaluate.trajectory.shapes import settle_values, unrecognised

__all__ = ["PASSES", "Draft", "Pass", "run_passes"]


@dataclass(slots=True)
class Draft:
    """The run while the passes build it."""

    # the steps in order: first one per span, in tree order, as the readers filled them
    # (spans.py keeps that list); a rebuild replaces it with a longer one
    steps: list[Step]
    tools: dict[str, Any]  # tool name -> offered schema ({} when unknown), merged from spans
    max_rebuilt_steps: int  # TrajectoryConfig.max_rebuilt_steps: code-action steps rebuilt
    max_rebuilt_calls: int  # TrajectoryConfig.max_rebuilt_calls: tool-call steps rebuilt
    # span id -> (node name, id of the nearest agent span at or above it)
    scope: dict[str, tuple[str | None, str | None]]
    agents_with_tools: set[str | None]  # agent span ids with a tool span under them
    conventions_with_tools: set[str]  # conventions some tool span was read with
    tool_ids: bool  # some tool step carries a call id
    joined: dict[int, ToolCall] = field(default_factory=dict)  # tool step index -> its call
    # id() of a tool step -> the arguments ``settle`` made unknown (a code call compares)
    set_aside: dict[int, Any] = field(default_factory=dict)
    ran: set[int] = field(default_factory=set)  # id() of the LLM tool calls a tool step ran
    responses: ToolResponses | None = None  # what later LLM steps were told calls returned
    code_actions: dict[str, int] = field(default_factory=dict)  # Trajectory.code_actions
    calls_over_limit: int = 0  # Trajectory.calls_over_limit


@dataclass(frozen=True, slots=True)
class Pass:
    name: str
    run: Callable[[Draft], None]
    precondition: str  # what must hold before it runs (one line)


def _place_missing_parents(draft: Draft) -> None:
    place_missing_parents(draft.steps, draft.scope)


def _merge_nested_calls(draft: Draft) -> None:
    merge_nested_calls(draft.steps)


def _take_off_envelopes(draft: Draft) -> None:
    take_off_envelopes(draft.steps, draft.tools)
    take_off_results(draft.steps)


def _join_calls(draft: Draft) -> None:
    draft.ran = join_calls(draft.steps, draft.joined)


def _coerce_arguments(draft: Draft) -> None:
    coerce_arguments(draft.steps, draft.tools)


def _settle_arguments(draft: Draft) -> None:
    settle(draft.steps, draft.tools, draft.joined, draft.set_aside)


def _settle_results(draft: Draft) -> None:
    settle_values(draft.steps, outputs=False)


def _look_up_results(draft: Draft) -> None:
    """A tool step with no result (not on its span, or not understood there): what the next
    LLM call of its agent was told it returned."""
    responses = draft.responses = ToolResponses(draft.steps)
    for position, step in enumerate(draft.steps):
        if step.kind == "tool" and step.result is None and step.status != "error":
            step.result = responses.result(position, step.node, step.call_id)
            if step.result is not None and "result" in step.unknown:
                step.sources["result"] = "llm tool message"
            take_off_result(step)  # as a result on the span: its envelope off
            if step.result is not None and "result" in step.unknown \
                    and unrecognised(step.result) is None:
                del step.unknown["result"]


def _rebuild_tool_calls(draft: Draft) -> None:
    """Tool calls that exist only in LLM output messages become rebuilt tool steps right
    after their LLM step (see ``build.py``'s docstring for when), re-indexed; past
    ``max_rebuilt_calls`` in the trace a call is counted (``calls_over_limit``), its outcome
    not known."""
    responses = draft.responses
    assert responses is not None  # _look_up_results ran
    out: list[Step] = []
    rebuilt_calls = 0
    managed = _ManagedAgents(draft.steps)
    for position, step in enumerate(draft.steps):
        out.append(step)
        if step.kind != "llm" or not step.tool_calls:
            continue
        agent = draft.scope[step.span_id][1]
        trusted = (agent in draft.agents_with_tools
                   or step.convention in draft.conventions_with_tools)
        for call in step.tool_calls:
            if id(call) in draft.ran:
                call.outcome = "ran"
                continue
            result, failed = responses.answer(position, step.node, call.call_id)
            ran = managed.ran(step, call.name)
            if ran is not None:  # a managed agent's span ran it: the call is a step
                result, failed, trusted = ran.result, ran.status == "error", False
                draft.tools.setdefault(call.name, {})
            if trusted and not (draft.tool_ids and call.call_id) and result is None:
                call.outcome = "never_ran"
                continue  # no span ran it and no later call was told a result
            if rebuilt_calls >= draft.max_rebuilt_calls:
                draft.calls_over_limit += 1
                continue
            rebuilt_calls += 1
            call.outcome = "rebuilt"
            rebuilt = Step(
                0, step.span_id, step.parent_span_id, "tool", call.name, node=step.node,
                within_unknown=step.within_unknown,
                depth=step.depth, status="ok", start_ns=step.end_ns, end_ns=step.end_ns,
                tool_name=call.name, arguments=call.arguments, rebuilt=True,
                convention=step.convention, call_id=call.call_id, result=result)
            take_off_result(rebuilt)
            if ran is not None:
                rebuilt.end_ns = ran.end_ns  # the managed agent's run
            if failed:  # the tool message said so (Haystack's error flag)
                rebuilt.status, rebuilt.error, rebuilt.result = "error", rebuilt.result, None
                rebuilt.sources["status"] = "llm tool message error flag"
            out.append(rebuilt)
    if len(out) != len(draft.steps):
        for i, step in enumerate(out):
            step.index = i
    draft.steps = out


class _ManagedAgents:
    """The agent steps that ran a call of an LLM step naming their agent: smolagents runs a
    managed agent the model calls (its tool-calling agents: ``weather_agent(task=...)``) as
    an agent span beside the LLM span, under the same step span, and no tool span; the call
    is a step as the code actions' call of it is (``code_actions``). Each agent step runs one
    call, the first after it asked; a dict of queues: linear in the steps."""

    def __init__(self, steps: list[Step]) -> None:
        self._queues: dict[tuple[str | None, str | None], list[Step]] = {}
        for s in steps:
            if s.kind == "agent" and s.node:
                self._queues.setdefault((s.parent_span_id, s.node), []).append(s)
        for queue in self._queues.values():
            queue.reverse()  # pop() takes the first

    def ran(self, llm: Step, name: str) -> Step | None:
        queue = self._queues.get((llm.parent_span_id, name))
        while queue and queue[-1].index < llm.index:
            queue.pop()  # an agent step before the call was asked ran no call of it
        return queue.pop() if queue else None


def _rebuild_code_actions(draft: Draft) -> None:
    draft.steps, draft.code_actions = rebuild_code_actions(draft.steps, draft.tools,
                                                           draft.max_rebuilt_steps,
                                                           draft.set_aside)


def _mark_delegations(draft: Draft) -> None:
    mark_delegations(draft.steps, draft.scope)


def _settle_values(draft: Draft) -> None:
    settle_values(draft.steps)


def _price_steps(draft: Draft) -> None:
    price_steps(draft.steps)


def _readable(draft: Draft) -> None:
    """Every LLM step's last message sent and its reply, as text."""
    for step in draft.steps:
        if step.kind != "llm":
            continue
        raw = step.input_text
        step.prompt = last_message_text(raw)
        if step.prompt is None and raw is not None and raw.lstrip()[:1] not in ("[", "{"):
            step.prompt = raw  # a plain-text prompt
        parsed, step.parsed_output = step.parsed_output, None
        if step.reply is not None:
            step.answer = step.reply
        elif parsed is not None and step.output_text is not None:
            step.answer = answer_of(parsed)  # the output as its reader parsed it
        else:
            step.answer = answer_text(step.output_text)


PASSES = (
    Pass("order_parallel_calls", order_parallel_calls,
         "one step per span, in tree order, nothing rebuilt yet; call ids read"),
    Pass("merge_nested_calls", _merge_nested_calls,
         "one step per span, in tree order (calls of one reply in its order), nothing "
         "rebuilt yet"),
    Pass("take_off_envelopes", _take_off_envelopes,
         "the tools offered by every span are merged (an envelope is told by the schema)"),
    Pass("coerce_inputs", _coerce_arguments,
         "envelopes are off: a tool input recorded as text reads as its arguments"),
    Pass("join_calls", _join_calls,
         "envelopes off and inputs coerced: a tool step's and its call's arguments compare"),
    Pass("place_missing_parents", _place_missing_parents,
         "joined (a tool step carries the id of the call it ran), nothing rebuilt yet, LLM "
         "inputs unchanged since read"),
    Pass("coerce_arguments", _coerce_arguments,
         "joined: a tool step whose input was not recorded has its call's arguments"),
    Pass("settle_arguments", _settle_arguments,
         "joined and coerced: the call each tool step ran is known (Draft.joined)"),
    Pass("settle_results", _settle_results,
         "before a result is looked up elsewhere: a result no reader understood is unknown"),
    Pass("look_up_results", _look_up_results,
         "tool results settled; LLM inputs unchanged since read"),
    Pass("rebuild_tool_calls", _rebuild_tool_calls,
         "joined (Draft.ran) and results looked up (Draft.responses over the same steps)"),
    Pass("rebuild_code_actions", _rebuild_code_actions,
         "tool calls rebuilt: a code action's call a step already ran is not made twice"),
    Pass("mark_delegations", _mark_delegations,
         "every call is a step (rebuilt from replies and code too): the calls that ran agents"),
    Pass("settle_values", _settle_values,
         "everything looked up or rebuilt and the LLM outputs read for calls and code"),
    Pass("price_steps", _price_steps,
         "every LLM step is final (none added later); a cost a span carried is kept"),
    Pass("readable", _readable,
         "LLM outputs settled: an unrecognised output gives no answer text"),
)


def run_passes(draft: Draft, passes: tuple[Pass, ...] = PASSES) -> None:
    for each in passes:
        each.run(draft)
