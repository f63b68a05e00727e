"""OpenLLMetry (Traceloop SDK and its instrumentations).

Marker ``traceloop.span.kind`` (workflow / task -> chain, agent, tool) on decorated
functions, with ``traceloop.entity.name`` and JSON ``traceloop.entity.input`` / ``output``.
LLM spans carry no marker: they are recognised by ``llm.request.type`` or the indexed
``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*`` attributes (completions may carry
``tool_calls.M.{name,arguments,id}`` and ``finish_reason``); offered functions are
``llm.request.functions.N.{name,description,parameters}``; usage ``gen_ai.usage.*`` or
``llm.usage.*``.
"""

from __future__ import annotations

import json
from typing import Any

from otel_eval.base.model import Span, Step, StepKind, ToolCall
from otel_eval.evaluate.conventions.adapter import Adapter, Attrs
from otel_eval.evaluate.conventions.values import (
    as_int,
    as_str,
    decode_json_string,
    first,
    parse_json,
)

_KINDS: dict[str, StepKind] = {"workflow": "chain", "task": "chain", "agent": "agent",
                               "tool": "tool"}
_LLM_MARKERS = ("gen_ai.prompt.0.role", "gen_ai.prompt.0.content", "gen_ai.completion.0.role",
                "gen_ai.completion.0.content", "gen_ai.completion.0.tool_calls.0.name")
_LLM_REQUEST_TYPES = {"chat": "llm", "completion": "llm"}


def _explicit(span: Span, attrs: Attrs) -> StepKind | None:
    kind = attrs.get("traceloop.span.kind")
    if kind is None:
        return None
    return _KINDS.get(str(kind).lower(), "other")


def _implicit(span: Span, attrs: Attrs) -> StepKind | None:
    request_type = attrs.get("llm.request.type")
    if request_type is not None:
        return "llm" if str(request_type).lower() in _LLM_REQUEST_TYPES else "other"
    for key in _LLM_MARKERS:
        if key in attrs:
            return "llm"
    return None


def _messages(attrs: Attrs, prefix: str) -> list[dict[str, Any]]:
    """Indexed ``prefix.N.{role,content}`` -> [{"role", "content"}] (content kept raw)."""
    out: list[dict[str, Any]] = []
    i = 0
    while True:
        role = attrs.get(f"{prefix}.{i}.role")
        content = attrs.get(f"{prefix}.{i}.content")
        has_calls = f"{prefix}.{i}.tool_calls.0.name" in attrs
        if role is None and content is None and not has_calls:
            return out
        msg = {"role": role, "content": content}
        answered = attrs.get(f"{prefix}.{i}.tool_call_id")  # a tool message: which call
        if answered is not None:
            msg["tool_call_id"] = answered
        out.append(msg)
        i += 1


def _completion_calls(attrs: Attrs, count: int) -> tuple[list[ToolCall], list[str]]:
    calls: list[ToolCall] = []
    reasons: list[str] = []
    for i in range(count):
        prefix = f"gen_ai.completion.{i}"
        reason = attrs.get(f"{prefix}.finish_reason")
        if reason:
            reasons.append(str(reason))
        j = 0
        while (name := attrs.get(f"{prefix}.tool_calls.{j}.name")) is not None:
            call = f"{prefix}.tool_calls.{j}"
            calls.append(ToolCall(str(name), parse_json(attrs.get(f"{call}.arguments")),
                                  as_str(attrs.get(f"{call}.id"))))
            j += 1
        fn_name = attrs.get(f"{prefix}.function_call.name")
        if fn_name is not None:
            calls.append(ToolCall(str(fn_name),
                                  parse_json(attrs.get(f"{prefix}.function_call.arguments"))))
    return calls, reasons


def _entity_text(raw: Any) -> str | None:
    """A decorated function's input or output as text: the SDK JSON-encodes it (a string
    becomes ``"..."``, a call ``{"args": [...], "kwargs": {...}}``); a call with one string
    argument is that string, anything else stays the JSON as carried."""
    value = parse_json(raw)
    if isinstance(value, dict) and set(value) == {"args", "kwargs"}:
        args, kwargs = value["args"], value["kwargs"]
        if isinstance(args, list) and isinstance(kwargs, dict):
            rest = [*args, *kwargs.values()]
            if len(rest) == 1 and isinstance(rest[0], str):
                return rest[0]
    return decode_json_string(raw)


def _dumps(messages: list[dict[str, Any]]) -> str | None:
    return json.dumps(messages, ensure_ascii=False, default=str) if messages else None


def _fill(step: Step, span: Span, attrs: Attrs) -> None:
    kind = step.kind
    if kind == "tool":
        step.tool_name = as_str(attrs.get("traceloop.entity.name")) or None
        # as carried: the SDK's {"args", "kwargs"} and LangChain's callback inputs are taken
        # off by ``trajectory.envelopes``
        step.arguments = parse_json(attrs.get("traceloop.entity.input"))
        step.result = as_str(attrs.get("traceloop.entity.output"))
        return
    if kind != "llm":
        step.input_text = _entity_text(attrs.get("traceloop.entity.input"))
        step.result = _entity_text(attrs.get("traceloop.entity.output"))
        return
    step.model = as_str(first(attrs, "gen_ai.response.model", "gen_ai.request.model",
                              "llm.response.model", "llm.request.model"))
    step.input_tokens = as_int(first(attrs, "gen_ai.usage.input_tokens",
                                     "gen_ai.usage.prompt_tokens", "llm.usage.prompt_tokens"))
    step.output_tokens = as_int(first(attrs, "gen_ai.usage.output_tokens",
                                      "gen_ai.usage.completion_tokens",
                                      "llm.usage.completion_tokens"))
    step.input_text = _dumps(_messages(attrs, "gen_ai.prompt"))
    completions = _messages(attrs, "gen_ai.completion")
    step.output_text = _dumps(completions)
    step.tool_calls, step.finish_reasons = _completion_calls(attrs, len(completions))


def _agent_name(span: Span, attrs: Attrs, enclosing: Attrs | None) -> str | None:
    # the span name's "<name>.agent" is read by ``agent_names.from_span_name``
    return as_str(attrs.get("traceloop.entity.name")) or None


def _tools(attrs: Attrs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    i = 0
    while (name := attrs.get(f"llm.request.functions.{i}.name")) is not None:
        params = parse_json(attrs.get(f"llm.request.functions.{i}.parameters"))
        out[str(name)] = params if params is not None else {}
        i += 1
    return out


KEYS = {
    "tool_name": ("traceloop.entity.name",),
    "arguments": ("traceloop.entity.input",),
    "result": ("traceloop.entity.output",),
    "input_text": ("gen_ai.prompt.0.content", "gen_ai.prompt.0.role", "traceloop.entity.input"),
    "output_text": ("gen_ai.completion.0.content", "gen_ai.completion.0.role"),
    "tool_calls": ("gen_ai.completion.0.tool_calls.0.name",
                   "gen_ai.completion.0.function_call.name"),
    "model": ("gen_ai.response.model", "gen_ai.request.model", "llm.response.model",
              "llm.request.model"),
    "input_tokens": ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens",
                     "llm.usage.prompt_tokens"),
    "output_tokens": ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                      "llm.usage.completion_tokens"),
    "finish_reasons": ("gen_ai.completion.0.finish_reason",),
    "agent_name": ("traceloop.entity.name",),
    "tools": ("llm.request.functions.0.name",),
}
# presence: its own keys (the shared gen_ai.usage / model keys are GenAI's)
OPENLLMETRY = Adapter("openllmetry", _explicit, _implicit, _fill, _agent_name, _tools, KEYS,
                      ("traceloop.", "gen_ai.prompt.0.", "gen_ai.completion.0.", "llm."))
