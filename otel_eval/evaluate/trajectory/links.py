"""Stage: trajectory (part). Tool steps joined to the LLM tool calls that asked for them.

Many instrumentations put a call's arguments only on the LLM span that requested it (in its
output messages) and give the tool span just a name and a call id. ``join_calls`` links each
tool step to the call it ran, and a tool step whose arguments were not recorded takes the
call's:

1. by call id: ``Step.call_id`` (GenAI ``gen_ai.tool.call.id``, OpenInference ``tool_call.id``,
   Vercel AI ``ai.toolCall.id``) equal to the id of a call an earlier LLM step requested
   (of an id requested more than once, the oldest pending call of the step's tool, else the
   oldest pending call);
2. else by name: among the calls of that name not yet run in the same agent (any agent, for a
   tool step outside every known agent), the oldest with the same arguments, else the oldest
   (not when both recorded other arguments and the reply that asked for it ended after the
   step began: google-genai's automatic function calling records its loop as one LLM span
   around the calls it ran, holding only the last reply's call, which it never ran);
   when no call has the name as spelled, the calls whose name is the same once lowercased and
   its other characters made ``_`` (CrewAI offers its "Delegate work to coworker" tool to the
   model as ``delegate_work_to_coworker`` and names the tool's span after the former), else,
   for the OpenAI Agents SDK's hand-off span ``handoff to weather_agent``, the calls of the
   tool it offered the model for that hand-off, ``transfer_to_weather_agent``
   (``handoff_tool``);
3. a tool step neither joined (its id, or its agent, is one no requesting LLM step carries: a
   framework's own call ids, a span stamped with another agent's name) takes a call of the
   nearest earlier reply that asked for its tool and has such a call no step ran, when their
   arguments are equal or its own were not recorded: the first of that reply's, as its calls
   run in the order asked (parallel calls: LiteLLM records a reply's calls without their
   ids, its tool spans with them). Unjoined, that call would be rebuilt as a second call of
   the same tool with the same arguments: a repeated call the run never made.

``merge_nested_calls`` (first) folds a call recorded twice, one span directly under the other
(tool under tool, LLM under LLM), into the outer step. ``coerce_arguments`` reads a tool input
that is not JSON (LangChain passes a bare ``"Paris"``) as the value of the tool's only
parameter, when the offered schema has exactly one (a reading ``arguments.settle`` gives up
for the call the step ran, when that call named the value otherwise). Arguments nobody
recorded stay None: unknown, never ``{}``.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import deque
from collections.abc import Mapping
from typing import Any

from otel_eval.base.steps import Step, ToolCall
from otel_eval.evaluate.trajectory.envelopes import python_literal
from otel_eval.evaluate.trajectory.interpreters import MAX_TOOL_NAME
from otel_eval.evaluate.trajectory.llm_twins import fold, merge_llm_twins

# Pending calls of one tool looked through for equal arguments (bounds the name match).
_SAME_ARGS_WINDOW = 16


_NESTED_FIELDS = ("call_id", "arguments", "result")
# Framework tool steps running when an MCP ``tools/call`` step starts that are tried for it.
_MCP_WINDOW = 16


def merge_nested_calls(steps: list[Step]) -> None:
    """One call recorded twice, as a tool span and a tool span of the same tool directly
    under it (two instrumentations: AutoGen's OpenInference TOOL span around autogen-core's
    ``execute_tool``): the outer step takes what only the inner one carries (call id,
    arguments, result, its error), and the inner one is no call of its own (kind ``other``,
    ``Step.sources["kind"]`` says why). Likewise a tool call's error event recorded as a
    tool span under it (``_error_event``: OpenInference, named ``error``, no tool name of its
    own, in error): the outer step takes its error, and it is no call. Then an MCP
    ``tools/call`` span beside the framework's span of the call (``_merge_mcp_siblings``),
    and one LLM call recorded twice (``llm_twins``)."""
    by_span = {s.span_id: s for s in steps if s.kind == "tool" and not s.rebuilt}
    for step in steps:
        outer = by_span.get(step.parent_span_id or "")
        if step.kind != "tool" or step.rebuilt or outer is None or outer is step:
            continue
        if _error_event(step):
            if outer.status != "error":
                outer.status, outer.error = "error", step.error
            step.kind = "other"
            step.sources["kind"] = f"the error event of its parent tool step {outer.span_id}"
            del by_span[step.span_id]
            continue
        if (outer.tool_name or outer.name) != (step.tool_name or step.name):
            continue
        fold(step, outer, f"the call of its parent tool step {outer.span_id}", _NESTED_FIELDS)
        by_span[step.span_id] = outer  # one nested deeper is the same call: the outer's
    _merge_mcp_siblings([s for s in steps if s.kind == "tool" and not s.rebuilt])
    merge_llm_twins(steps)


def _merge_mcp_siblings(tools: list[Step]) -> None:
    """An MCP client ``tools/call`` span (``Step.sources["mcp_method"]``) beside the
    framework's ``execute_tool`` span of the same call, under the same parent, is that call
    recorded again (the MCP conventions say it should not be duplicated; instrumentations
    differ): same tool, and the same call id or, without ids on both, the MCP span within the
    framework span's time. Nested under it, ``merge_nested_calls`` folded it already.
    Bounded work per MCP step: a dict by id, and for the time test only the first
    ``_MCP_WINDOW`` framework steps of its tool still running when it starts (each MCP step
    tried against every framework step was quadratic)."""
    mcp = sorted((s for s in tools if "mcp_method" in s.sources), key=lambda s: s.start_ns)
    if not mcp:
        return
    framework: dict[tuple[str | None, str], deque[Step]] = {}
    by_id: dict[tuple[str | None, str, str], Step] = {}
    for s in sorted((s for s in tools if "mcp_method" not in s.sources),
                    key=lambda s: s.start_ns):
        key = (s.parent_span_id, s.tool_name or s.name)
        framework.setdefault(key, deque()).append(s)
        if s.call_id is not None:
            by_id.setdefault((*key, s.call_id), s)
    for step in mcp:
        key = (step.parent_span_id, step.tool_name or step.name)
        outer = by_id.get((*key, step.call_id)) if step.call_id is not None else None
        if outer is None:
            outer = _around(step, framework.get(key))
        if outer is not None:
            fold(step, outer, f"the MCP call of the tool step beside it {outer.span_id}",
                 _NESTED_FIELDS)


def _around(step: Step, running: deque[Step] | None) -> Step | None:
    """The first of ``running`` (framework steps by start; the MCP steps come by start too)
    whose time holds ``step``'s, one of the two without a call id; those that ended before
    ``step`` began are dropped for good."""
    while running and running[0].end_ns < step.start_ns:
        running.popleft()
    for outer in itertools.islice(running or (), _MCP_WINDOW):
        if outer.start_ns > step.start_ns:
            break
        if ((outer.call_id is None or step.call_id is None)
                and step.end_ns <= outer.end_ns):
            return outer
    return None


def _error_event(step: Step) -> bool:
    """Whether a tool step directly under a tool step is its parent call's error event, not a
    call: BeeAI's OpenInference instrumentation makes the ``error`` event of a failing tool
    (``metadata.path`` ``tool.custom.<tool>.error``) a child span of the TOOL span, itself
    marked TOOL, named ``error``, with no ``tool.name`` of its own, in status ERROR."""
    return (step.convention == "openinference" and step.name == "error"
            and step.status == "error" and step.sources.get("tool_name") == "span name")


def join_calls(steps: list[Step], joined: dict[int, ToolCall] | None = None) -> set[int]:
    """Link tool steps to requested calls (see module docstring). Returns the ``id()`` of
    every call that a tool step ran; ``joined`` gets step index -> the call it ran."""
    by_id: dict[str, deque[ToolCall]] = {}  # a deque: some runs reuse call ids
    queues: dict[tuple[str | None, str], deque[ToolCall]] = {}
    # (agent, ``as_offered`` name) -> the first of its queues: each name spelled once
    spelled: dict[tuple[str | None, str], deque[ToolCall]] = {}
    # tool name -> its calls of every agent, in order (a tool step outside every agent's)
    anywhere: dict[str, deque[ToolCall]] = {}
    claimed: set[int] = set()
    asked_at: dict[int, int] = {}  # id() of a call -> the end of the LLM step that asked
    # tool name -> (its call, the index of the LLM step that asked), in order (step 3)
    requested: dict[str, list[tuple[ToolCall, int]]] = {}
    unjoined: list[tuple[Step, int]] = []  # (tool step, calls of its tool before it)
    for step in steps:
        if step.kind == "llm":
            for call in step.tool_calls:
                if call.call_id:
                    by_id.setdefault(call.call_id, deque()).append(call)
                queue = queues.get((step.node, call.name))
                if queue is None:
                    queue = queues[step.node, call.name] = deque()
                    spelled.setdefault((step.node, as_offered(call.name)), queue)
                queue.append(call)
                anywhere.setdefault(call.name, deque()).append(call)
                requested.setdefault(call.name, []).append((call, step.index))
                asked_at[id(call)] = step.end_ns
        elif step.kind == "tool" and not step.rebuilt:
            found = _match(step, by_id, queues, spelled, anywhere, claimed, asked_at)
            if found is None:
                unjoined.append((step, len(requested.get(step.tool_name or step.name, ()))))
                continue
            _join(step, found, claimed, joined)
    for step, before in unjoined:
        found = _nearest_unclaimed(step, requested.get(step.tool_name or step.name, []),
                                   before, claimed)
        if found is not None:
            _join(step, found, claimed, joined)
    return claimed


def _join(step: Step, found: ToolCall, claimed: set[int],
          joined: dict[int, ToolCall] | None) -> None:
    claimed.add(id(found))
    if joined is not None:
        joined[step.index] = found
    if found.name.startswith(_HANDOFF_TOOL) \
            and handoff_tool(step.tool_name or step.name) == as_offered(found.name):
        # a hand-off span's input is the agent handing off (OpenInference's input.value),
        # not the call's arguments: the call's are the model's, unknown when not recorded
        step.arguments = None
    if step.arguments is None:
        step.arguments = found.arguments
        step.sources["arguments"] = f"llm tool call {found.call_id or found.name}"
    if step.call_id is None and found.call_id is not None:
        step.call_id = found.call_id
        step.sources["call_id"] = f"llm tool call {found.name} (joined by name)"


def _nearest_unclaimed(step: Step, calls: list[tuple[ToolCall, int]], before: int,
                       claimed: set[int]) -> ToolCall | None:
    """Step 3: of the first ``before`` of ``calls`` (the step's tool's, each with the LLM step
    that asked), those no step ran with equal arguments or the step's unrecorded: the first
    of the latest reply's. Only the last ``_SAME_ARGS_WINDOW`` are looked at: bounded work per
    step, whatever the trace holds."""
    stop = max(-1, before - 1 - _SAME_ARGS_WINDOW)
    found: ToolCall | None = None
    reply = None
    for k in range(before - 1, stop, -1):
        call, asked_by = calls[k]
        if reply is not None and asked_by != reply:
            break
        if id(call) not in claimed and (step.arguments is None
                                        or call.arguments == step.arguments):
            found, reply = call, asked_by
    return found


def _match(step: Step, by_id: dict[str, deque[ToolCall]],
           queues: dict[tuple[str | None, str], deque[ToolCall]],
           spelled: dict[tuple[str | None, str], deque[ToolCall]],
           anywhere: dict[str, deque[ToolCall]], claimed: set[int],
           asked_at: dict[int, int]) -> ToolCall | None:
    # by id when the step has one (an id no LLM call carries: nothing to learn by name)
    name = step.tool_name or step.name
    queue = by_id.get(step.call_id) if step.call_id else queues.get((step.node, name))
    if not queue and not step.call_id:
        # the model's spelling of the name (one lookup, only on this miss), or the hand-off
        # tool the OpenAI Agents SDK offered for the hand-off span it names otherwise
        offered = as_offered(name)
        queue = spelled.get((step.node, offered)) \
            or spelled.get((step.node, _handoff_tool(offered) or ""))
    if not queue and not step.call_id and step.node is None:
        # a tool step outside every known agent may have run a call of any agent (the calls
        # of its name in order; one another step ran is skipped as claimed)
        queue = anywhere.get(name)
    if queue and step.call_id and len(queue) > 1:
        # an id some runs reuse (a counter per reply): the pending call of the step's tool,
        # not an older one of another tool whose span never arrived
        offered = as_offered(name)
        for i, call in enumerate(itertools.islice(queue, _SAME_ARGS_WINDOW)):
            if id(call) not in claimed and (call.name == name
                                            or as_offered(call.name) == offered):
                del queue[i]
                return call
    if queue and not step.call_id and step.arguments is not None:
        # by name: the pending call with the same arguments, when there is one (a call whose
        # span never arrived must not hand its place to the next one)
        for i, call in enumerate(itertools.islice(queue, _SAME_ARGS_WINDOW)):
            if id(call) not in claimed and call.arguments == step.arguments:
                del queue[i]
                return call
    while queue:
        call = queue.popleft()
        if id(call) not in claimed:
            if (not step.call_id and step.arguments is not None and call.arguments is not None
                    and asked_at[id(call)] > step.start_ns):
                queue.appendleft(call)  # asked for other arguments, after the step began
                return None
            return call
    return None


_NOT_WORD = re.compile(r"[\W_]+")  # what is no letter or digit, of any script


def as_offered(name: str) -> str:
    """A tool's name as a model may be offered it: lowercased, each run of characters that
    are no letter or digit ``_`` (a letter of any script is kept: 查询天气 and 删除全部 are
    two names, not the same empty one); a name with no letter or digit (an emoji) is itself,
    the spelling of no other name. Read in Unicode NFC: a name composed or decomposed ("é" or
    "e" and its combining accent, which is no letter) is one name."""
    cut = unicodedata.normalize("NFC", name[:MAX_TOOL_NAME])
    return _NOT_WORD.sub("_", cut.lower()).strip("_") or cut


_HANDOFF_SPAN = "handoff_to_"  # as_offered of the OpenAI Agents SDK's "handoff to <agent>"
_HANDOFF_TOOL = "transfer_to_"  # the SDK's default ``Handoff.tool_name`` prefix


def handoff_tool(name: str) -> str | None:
    """The tool the OpenAI Agents SDK offers a model for the hand-off whose span it names
    ``name`` (``handoff to weather_agent``: ``transfer_to_weather_agent``, its default
    ``Handoff.tool_name``, as offered), None for a name of no hand-off span."""
    return _handoff_tool(as_offered(name))


def _handoff_tool(offered: str) -> str | None:
    if not offered.startswith(_HANDOFF_SPAN) or len(offered) == len(_HANDOFF_SPAN):
        return None
    return _HANDOFF_TOOL + offered[len(_HANDOFF_SPAN):]


# ``Step.sources["arguments"]`` ends with this when a text was read as the only parameter
AS_ONLY_PARAMETER = " (text read as the tool's only parameter)"


def _only_parameter(schema: Any) -> str | None:
    if not isinstance(schema, Mapping):
        return None
    props = schema.get("properties")
    if isinstance(props, Mapping) and len(props) == 1:
        name = next(iter(props))
        return name if isinstance(name, str) else None
    return None


def coerce_arguments(steps: list[Step], tools: Mapping[str, Any]) -> None:
    """Tool inputs recorded as plain text read as the arguments they stand for."""
    for step in steps:
        args = step.arguments
        if step.kind != "tool" or not isinstance(args, str):
            continue
        literal = python_literal(args.strip())
        if literal is not None:
            step.arguments = literal
            continue
        param = _only_parameter(tools.get(step.tool_name or step.name))
        if param is not None:
            step.arguments = {param: args}
            step.sources["arguments"] = f"{step.sources.get('arguments', '')}{AS_ONLY_PARAMETER}"
