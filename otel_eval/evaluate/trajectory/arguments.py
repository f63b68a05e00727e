"""Stage: trajectory (part). A tool step's arguments: envelopes off, and unknown when they
are not understood.

``take_off_envelopes`` runs before tool steps are joined to the LLM calls that asked for them
(``trajectory.links``): every tool step's input and every requested call's arguments lose the
envelopes ``trajectory.envelopes`` knows.

``settle`` runs after the join. Arguments that do not fit the offered schema (``fits``) *and*
look like something else than the arguments (an envelope was taken off, they are text, or
they carry keys the schema does not declare) are not concluded from:

- the LLM's tool call the step ran (joined by call id or name), once its envelopes are off,
  when it fits: those are the arguments (``Step.sources``: ``llm tool call <id>``);
- the same value as that call: the model asked for exactly these, so they are the call's
  real (wrong) arguments, and a finding about them is right;
- else *unknown*: ``Step.arguments`` None, ``Step.unknown["arguments"]`` says why, counted in
  ``Trajectory.unrecorded["unparsed"]``; no schema finding, no loop key. A call of a code
  action the step ran, with the same value, makes them its arguments after all
  (``code_actions``: smolagents' code agent's ``{"kwargs": {"town": "Paris"}}``, the call
  ``get_weather(town="Paris")`` in its code).

A text read as the tool's only parameter is a guess: when the call the step ran passed that
value, under that name or another, the call's arguments are the step's (what the model asked
for). A guess no call confirms stays the step's arguments, but is no call's identity: the
loop rules compare it to no other call (``detectors.calls``), as two calls of one text may
have named it differently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_eval.base.steps import Step, ToolCall
from otel_eval.evaluate.conventions.values import cut_json
from otel_eval.evaluate.trajectory.envelopes import fits, unknown_keys, unwrap
from otel_eval.evaluate.trajectory.links import AS_ONLY_PARAMETER

__all__ = ["settle", "take_off_envelopes"]


def take_off_envelopes(steps: list[Step], tools: Mapping[str, Any]) -> None:
    for step in steps:
        if step.kind == "llm":
            for call in step.tool_calls:
                if isinstance(call.arguments, dict | str):
                    call.arguments = unwrap(call.arguments, tools.get(call.name), call.name)[0]
        elif step.kind == "tool" and step.arguments is not None:
            name = step.tool_name or step.name
            value, found = unwrap(step.arguments, tools.get(name), name)
            if found:
                step.arguments = value
                source = step.sources.get("arguments", "")
                step.sources["arguments"] = f"{source} (inside {', '.join(found)})".strip()


def _why(step: Step, schema: Any) -> str | None:
    """Why the step's arguments look like something else than arguments, or None."""
    args = step.arguments
    if isinstance(args, str):
        return "unparsed: text that is no JSON object nor Python dict"
    extra = unknown_keys(args, schema)
    if extra:
        shown = ", ".join(repr(k)[:40] for k in extra[:5])
        return f"unparsed: keys the tool's schema does not declare ({shown})"
    if "(inside " in step.sources.get("arguments", "") and not isinstance(args, dict):
        return "unparsed: an envelope around no object"
    return None


def _from_call(step: Step, call: ToolCall) -> None:
    """The step's arguments are those of the call it ran."""
    step.arguments = call.arguments
    step.sources["arguments"] = f"llm tool call {call.call_id or call.name}"


def _forget(step: Step, set_aside: dict[int, Any] | None, why: str) -> None:
    """The step's arguments are unknown (the value set aside by ``id`` of its step)."""
    if set_aside is not None:
        set_aside[id(step)] = step.arguments
    step.arguments = None
    step.unknown["arguments"] = why


def _unread(step: Step, call: ToolCall | None, set_aside: dict[int, Any] | None,
            why: str) -> None:
    """The step's arguments are the call it ran's when those are an object, else unknown."""
    if call is not None and isinstance(call.arguments, dict):
        _from_call(step, call)
    else:
        _forget(step, set_aside, why)


def _as_asked(step: Step, call: ToolCall) -> bool:
    """Whether the call the step ran says the value of its text read as the tool's only
    parameter (``links.coerce_arguments``: a guess): the same arguments, or the value under
    another name (LangChain's tool span records the value alone, "Paris"; the model asked
    ``{"town": "Paris"}``)."""
    if not isinstance(call.arguments, dict):
        return False
    return call.arguments == step.arguments or any(
        v in call.arguments.values() for v in step.arguments.values())


def settle(steps: list[Step], tools: Mapping[str, Any], joined: Mapping[int, ToolCall],
           set_aside: dict[int, Any] | None = None) -> None:
    """``set_aside``: the values made unknown, by ``id`` of their step (a code action's call
    compares with them: ``code_actions``)."""
    for step in steps:
        if step.kind != "tool" or step.arguments is None or step.rebuilt:
            continue
        call = joined.get(step.index)
        if call is not None and step.sources.get("arguments", "").endswith(AS_ONLY_PARAMETER) \
                and _as_asked(step, call):
            _from_call(step, call)
            continue
        if cut_json(step.arguments) and not (call is not None
                                             and call.arguments == step.arguments):
            _unread(step, call, set_aside, "unparsed: the text of an object that is no JSON "
                                           "(cut at an attribute length limit?)")
            continue  # with a schema or without: text that two calls share says nothing
        schema = tools.get(step.tool_name or step.name)
        if fits(step.arguments, schema) is not False:
            continue  # they fit, or the schema declares nothing to judge them by
        why = _why(step, schema)
        if why is None:
            continue  # an object of declared keys: the call's arguments, right or wrong
        if call is not None and call.arguments == step.arguments:
            continue  # what the model asked for: its arguments
        if call is not None and fits(call.arguments, schema):
            _from_call(step, call)
        else:
            _forget(step, set_aside, why)
