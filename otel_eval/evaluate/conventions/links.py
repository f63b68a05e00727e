"""Stage: trajectory (part). Tool steps joined to the LLM tool calls that asked for them.

Many instrumentations put a call's arguments only on the LLM span that requested it (in its
output messages) and give the tool span just a name and a call id. ``join_calls`` links each
tool step to the call it ran, and a tool step whose arguments were not recorded takes the
call's:

1. by call id: ``Step.call_id`` (GenAI ``gen_ai.tool.call.id``, OpenInference ``tool_call.id``,
   Vercel AI ``ai.toolCall.id``) equal to the id of a call an earlier LLM step requested;
2. else by name: among the calls of that name not yet run in the same agent, the oldest with
   the same arguments, else the oldest.

``coerce_arguments`` reads a tool input that is not JSON (LangChain passes a bare ``"Paris"``)
as the value of the tool's only parameter, when the offered schema has exactly one. Arguments
nobody recorded stay None: unknown, never ``{}``.
"""

from __future__ import annotations

import ast
import itertools
from collections import deque
from collections.abc import Mapping
from typing import Any

from otel_eval.base.model import Step, ToolCall

# Pending calls of one tool looked through for equal arguments (bounds the name match).
_SAME_ARGS_WINDOW = 16
# A Python literal longer than this is left as text (literal_eval is linear, but bounded).
_MAX_LITERAL_CHARS = 20_000


def join_calls(steps: list[Step]) -> set[int]:
    """Link tool steps to requested calls (see module docstring). Returns the ``id()`` of
    every call that a tool step ran."""
    by_id: dict[str, deque[ToolCall]] = {}  # a deque: some runs reuse call ids
    queues: dict[tuple[str | None, str], deque[ToolCall]] = {}
    claimed: set[int] = set()
    for step in steps:
        if step.kind == "llm":
            for call in step.tool_calls:
                if call.call_id:
                    by_id.setdefault(call.call_id, deque()).append(call)
                queues.setdefault((step.node, call.name), deque()).append(call)
        elif step.kind == "tool" and not step.rebuilt:
            found = _match(step, by_id, queues, claimed)
            if found is None:
                continue
            claimed.add(id(found))
            if step.arguments is None:
                step.arguments = found.arguments
            if step.call_id is None:
                step.call_id = found.call_id
    return claimed


def _match(step: Step, by_id: dict[str, deque[ToolCall]],
           queues: dict[tuple[str | None, str], deque[ToolCall]],
           claimed: set[int]) -> ToolCall | None:
    # by id when the step has one (an id no LLM call carries: nothing to learn by name)
    queue = (by_id.get(step.call_id) if step.call_id
             else queues.get((step.node, step.tool_name or step.name)))
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
            return call
    return None


def _only_parameter(schema: Any) -> str | None:
    if not isinstance(schema, Mapping):
        return None
    props = schema.get("properties")
    if isinstance(props, Mapping) and len(props) == 1:
        name = next(iter(props))
        return name if isinstance(name, str) else None
    return None


def _literal(text: str) -> Any:
    """A Python dict literal (``{'city': 'Paris'}``, as LangChain prints inputs), or None."""
    if len(text) > _MAX_LITERAL_CHARS or not text.startswith("{"):
        return None
    try:
        value = ast.literal_eval(text)
        repr(value)  # an int past Python's str-conversion limit (a long 0x literal): text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def coerce_arguments(steps: list[Step], tools: Mapping[str, Any]) -> None:
    """Tool inputs recorded as plain text read as the arguments they stand for."""
    for step in steps:
        args = step.arguments
        if step.kind != "tool" or not isinstance(args, str):
            continue
        literal = _literal(args.strip())
        if literal is not None:
            step.arguments = literal
            continue
        param = _only_parameter(tools.get(step.tool_name or step.name))
        if param is not None:
            step.arguments = {param: args}
