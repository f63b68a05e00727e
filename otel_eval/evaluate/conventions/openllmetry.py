"""OpenLLMetry (Traceloop SDK and its instrumentations).

Marker ``traceloop.span.kind`` (workflow / task -> chain, agent, tool) on decorated
functions, with ``traceloop.entity.name`` and JSON ``traceloop.entity.input`` / ``output``.
LLM spans carry no marker: they are recognised by ``llm.request.type`` or the indexed
``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*`` attributes (completions may carry
``tool_calls.M.{name,arguments,id}`` and ``finish_reason``); offered functions are
``llm.request.functions.N.{name,description,parameters}``; usage ``gen_ai.usage.*`` or
``llm.usage.*``.

Traceloop's LlamaIndex instrumentation (scope ``opentelemetry.instrumentation.llamaindex``)
marks every workflow step ``task`` and the run ``workflow``; read here:

- the agent workflow's root ``<AgentClass>.workflow`` (``FunctionAgent``, ``ReActAgent``, ...)
  is the agent, named by ``current_agent_name`` in its ``traceloop.entity.output`` JSON (the
  workflow's state, ``{"result": {..., "current_agent_name": ...}}``); the workflow steps under
  it carry the same key (``llamaindex_agent_name``: the agent of a run whose root never
  arrived);
- the ``call_tool`` step (``BaseWorkflowAgent.task`` with ``tool.name`` and ``tool.arguments``
  JSON) is the tool call: its output JSON holds LlamaIndex's ``ToolOutput`` (``raw_output``,
  ``is_error``: ``span_readers`` reads the error). A raising
  tool's own ``FunctionTool.task`` span is never ended by the instrumentation, so this step is
  the only record of a failed call.
"""

from __future__ import annotations

import json
from typing import Any

from otel_eval.base.model import Span
from otel_eval.base.steps import Step, StepKind, ToolCall
from otel_eval.evaluate.conventions.adapter import Adapter, Attrs, undefined_value
from otel_eval.evaluate.conventions.values import (
    as_int,
    as_name,
    as_str,
    calls_full,
    decode_json_string,
    first,
    parse_json,
)

_KINDS: dict[str, StepKind] = {"workflow": "chain", "task": "chain", "agent": "agent",
                               "tool": "tool"}
_CALL_FIELDS = ("name", "id", "arguments")  # of gen_ai.completion.N.tool_calls.M
_LLM_MARKERS = ("gen_ai.prompt.0.role", "gen_ai.prompt.0.content", "gen_ai.completion.0.role",
                "gen_ai.completion.0.content", "gen_ai.completion.0.tool_calls.0.name")
_LLM_REQUEST_TYPES = {"chat": "llm", "completion": "llm"}
# --- rec31b: Traceloop's LlamaIndex instrumentation (agent workflow, call_tool): start ---
LLAMAINDEX_SCOPE = "opentelemetry.instrumentation.llamaindex"
_LLAMAINDEX_AGENTS = frozenset({"FunctionAgent", "ReActAgent", "CodeActAgent", "AgentWorkflow"})
_CURRENT_AGENT = '"current_agent_name"'
WORKFLOW_TOOL_NAME = "tool.name"  # set on the call_tool step by the instrumentation
WORKFLOW_TOOL_ARGUMENTS = "tool.arguments"


def llamaindex_agent_name(attrs: Attrs) -> str | None:
    """The agent a LlamaIndex agent workflow's step names in its state: ``current_agent_name``
    at the top of ``traceloop.entity.output`` JSON or under its ``result``."""
    raw = attrs.get("traceloop.entity.output")
    if not isinstance(raw, str) or _CURRENT_AGENT not in raw:
        return None
    state = parse_json(raw)
    if isinstance(state, dict) and isinstance(state.get("result"), dict):
        state = state["result"]
    return as_str(state.get("current_agent_name")) if isinstance(state, dict) else None


def is_workflow_agent(span: Span) -> bool:
    """Whether a span is Traceloop's LlamaIndex agent workflow (``<AgentClass>.workflow``)."""
    head, _, tail = span.name.rpartition(".")
    return tail == "workflow" and head in _LLAMAINDEX_AGENTS and span.scope == LLAMAINDEX_SCOPE


def workflow_tool_output(attrs: Attrs) -> dict[str, Any]:
    """The call_tool step's output JSON (``tool_id``, ``tool_output``), {} when none."""
    out = parse_json(attrs.get("traceloop.entity.output"))
    return out if isinstance(out, dict) else {}
# --- rec31b: end ---


def _explicit(span: Span, attrs: Attrs) -> StepKind | None:
    kind = attrs.get("traceloop.span.kind")
    if kind is None:
        return None
    kind = str(kind).lower()
    if kind == "task" and WORKFLOW_TOOL_ARGUMENTS in attrs and WORKFLOW_TOOL_NAME in attrs:
        return "tool"  # LlamaIndex's call_tool step
    if kind == "workflow" and is_workflow_agent(span):
        return "agent"
    return _KINDS.get(kind, "other")


def _implicit(span: Span, attrs: Attrs) -> StepKind | None:
    request_type = attrs.get("llm.request.type")
    if request_type is not None:
        return "llm" if str(request_type).lower() in _LLM_REQUEST_TYPES else "other"
    for key in _LLM_MARKERS:
        if key in attrs:
            return "llm"
    return None


def _content(value: Any) -> Any:
    """A message's content as recorded: its typed parts when the instrumentation wrote them
    as JSON text (OpenAI's list content, text and ``image_url`` parts, ``json.dumps``-ed:
    read as parts, an image is no text), else as it is."""
    if isinstance(value, str) and value[:2] == "[{":
        parts = parse_json(value)
        if isinstance(parts, list) and all(
                isinstance(p, dict) and isinstance(p.get("type"), str) for p in parts):
            return parts
    return value


def _messages(attrs: Attrs, prefix: str) -> list[dict[str, Any]]:
    """Indexed ``prefix.N.{role,content}`` -> [{"role", "content"}] (content kept raw, but
    typed parts recorded as JSON text read as parts: ``_content``)."""
    out: list[dict[str, Any]] = []
    i = 0
    while True:
        role = attrs.get(f"{prefix}.{i}.role")
        content = attrs.get(f"{prefix}.{i}.content")
        # a completion may be its calls alone (LiteLLM's: function_call.*, no role, no content)
        has_calls = (f"{prefix}.{i}.tool_calls.0.name" in attrs
                     or f"{prefix}.{i}.function_call.name" in attrs)
        if role is None and content is None and not has_calls:
            return out
        msg = {"role": role, "content": _content(content)}
        answered = attrs.get(f"{prefix}.{i}.tool_call_id")  # a tool message: which call
        if answered is not None:
            msg["tool_call_id"] = answered
        out.append(msg)
        i += 1


def _completion_calls(attrs: Attrs, count: int) -> tuple[list[ToolCall], list[str], int]:
    """The calls the completions requested, their finish reasons, and how many calls were
    recorded with no name (an id or arguments only: unknown calls)."""
    calls: list[ToolCall] = []
    reasons: list[str] = []
    nameless = 0
    for i in range(count):
        prefix = f"gen_ai.completion.{i}"
        reason = attrs.get(f"{prefix}.finish_reason")
        if reason:
            reasons.append(str(reason))
        j = 0
        while not calls_full(calls) and any(f"{prefix}.tool_calls.{j}.{k}" in attrs
                                            for k in _CALL_FIELDS):
            call = f"{prefix}.tool_calls.{j}"
            name = as_name(attrs.get(f"{call}.name"))
            if name is not None:
                calls.append(ToolCall(name, parse_json(attrs.get(f"{call}.arguments")),
                                      as_str(attrs.get(f"{call}.id"))))
            else:
                nameless += 1
            j += 1
        fn_name = attrs.get(f"{prefix}.function_call.name")
        if (name := as_name(fn_name)) is not None:
            calls.append(ToolCall(name,
                                  parse_json(attrs.get(f"{prefix}.function_call.arguments"))))
        elif fn_name is not None:
            nameless += 1
    return calls, reasons, nameless


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
    if kind == "tool" and WORKFLOW_TOOL_ARGUMENTS in attrs:
        _fill_workflow_tool(step, attrs)
        return
    if kind == "tool":
        step.tool_name = as_name(attrs.get("traceloop.entity.name"))
        # as carried: the SDK's {"args", "kwargs"} and LangChain's callback inputs are taken
        # off by ``trajectory.envelopes``
        step.arguments = parse_json(attrs.get("traceloop.entity.input"))
        # the SDK records the return value as JSON: a string result is a string literal
        step.result = decode_json_string(attrs.get("traceloop.entity.output"))
        return
    if kind != "llm":
        step.input_text = _entity_text(attrs.get("traceloop.entity.input"))
        step.result = _entity_text(attrs.get("traceloop.entity.output"))
        return
    step.model = as_str(first(attrs, "gen_ai.response.model", "gen_ai.request.model",
                              "llm.response.model", "llm.request.model"))
    step.input_tokens = as_int(first(attrs, "gen_ai.usage.input_tokens",
                                     "gen_ai.usage.prompt_tokens", "llm.usage.prompt_tokens"), 0)
    step.output_tokens = as_int(first(attrs, "gen_ai.usage.output_tokens",
                                      "gen_ai.usage.completion_tokens",
                                      "llm.usage.completion_tokens"), 0)
    step.input_text = _dumps(_messages(attrs, "gen_ai.prompt"))
    completions = _messages(attrs, "gen_ai.completion")
    step.output_text = _dumps(completions)
    step.tool_calls, step.finish_reasons, nameless = _completion_calls(attrs, len(completions))
    if nameless:
        step.unnamed_calls(nameless)


def _fill_workflow_tool(step: Step, attrs: Attrs) -> None:
    """LlamaIndex's call_tool step: the tool, its arguments, the call id and the result."""
    step.tool_name = as_name(attrs.get(WORKFLOW_TOOL_NAME))
    step.arguments = parse_json(attrs.get(WORKFLOW_TOOL_ARGUMENTS))
    # Its ``tool_id`` is not taken as the call id: the call of a run killed while the tool ran
    # has no call_tool span, and with call ids on the others it would be taken for a call
    # that ran (``links``: rebuilt); joined by name in order it stays pending, as it is when
    # the same calls are recorded without ids.
    output = workflow_tool_output(attrs).get("tool_output")
    raw = output.get("raw_output") if isinstance(output, dict) else None
    step.result = as_str(raw) if raw is not None else as_str(
        attrs.get("traceloop.entity.output"))


def _agent_name(span: Span, attrs: Attrs, enclosing: Attrs | None) -> str | None:
    # the span name's "<name>.agent" is read by ``agent_names.from_span_name``
    if is_workflow_agent(span):  # rec31b: LlamaIndex's agent workflow
        return llamaindex_agent_name(attrs)  # else its class, a default: the steps' name
    return as_str(attrs.get("traceloop.entity.name")) or None


def _tools(attrs: Attrs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    i = 0
    while (name := attrs.get(f"llm.request.functions.{i}.name")) is not None:
        if as_name(name) is None:
            return {}  # a tool offered under no name understood: which ones, unknown
        params = parse_json(attrs.get(f"llm.request.functions.{i}.parameters"))
        out[name] = params if params is not None else {}
        i += 1
    return out


KEYS = {
    "tool_name": (WORKFLOW_TOOL_NAME, "traceloop.entity.name"),
    "arguments": (WORKFLOW_TOOL_ARGUMENTS, "traceloop.entity.input"),
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
                      ("traceloop.", "gen_ai.prompt.0.", "gen_ai.completion.0.", "llm."),
                      # every traceloop.span.kind but ``unknown`` is one of ours
                      undefined=undefined_value("traceloop.span.kind", frozenset(),
                                                lambda v: str(v).lower()))
