"""The Vercel AI SDK's telemetry (``experimental_telemetry``; JavaScript).

Marker ``ai.operationId``: ``ai.generateText`` / ``ai.streamText`` / ``ai.generateObject`` /
``ai.streamObject`` wrap one run of the multi-step loop (agent), their ``.doGenerate`` /
``.doStream`` children are the LLM calls, ``ai.toolCall`` the tool executions, ``ai.embed*``
other. The agent is named by ``ai.telemetry.functionId`` (also ``resource.name``). LLM calls
carry ``ai.prompt.messages`` (JSON), ``ai.response.text``, ``ai.response.toolCalls`` (JSON
``[{toolCallId, toolName, input | args}]``), ``ai.response.finishReason``, ``ai.usage.*``
(``inputTokens`` / ``outputTokens``, older ``promptTokens`` / ``completionTokens``); tool
calls ``ai.toolCall.{name, id, args | input, result}``; offered tools ``ai.prompt.tools``
(JSON strings ``{name, inputSchema | parameters}``).
"""

from __future__ import annotations

from typing import Any

from otel_eval.base.model import Span
from otel_eval.base.steps import Step, StepKind, ToolCall
from otel_eval.evaluate.conventions.adapter import Adapter, Attrs, no_kind, undefined_value
from otel_eval.evaluate.conventions.values import (
    UNREAD_OFFER,
    as_int,
    as_name,
    as_str,
    calls_full,
    decode_json_string,
    first,
    parse_json,
)

_RUNS = ("ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject")
_CALLS = (".doGenerate", ".doStream")
# the AI SDK's other operations: embeddings
_OTHER_OPERATIONS = frozenset({"ai.embed", "ai.embed.doEmbed", "ai.embedMany",
                               "ai.embedMany.doEmbed"})


def _explicit(span: Span, attrs: Attrs) -> StepKind | None:
    op = attrs.get("ai.operationId")
    if not isinstance(op, str):
        return None
    if op == "ai.toolCall":
        return "tool"
    if op.endswith(_CALLS):
        return "llm"
    return "agent" if op in _RUNS else "other"


def _tool_calls(raw: Any) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for item in parse_json(raw) if isinstance(parse_json(raw), list) else ():
        if calls_full(calls):
            break
        if isinstance(item, dict) and isinstance(item.get("toolName"), str):
            args = item.get("input", item.get("args"))
            calls.append(ToolCall(item["toolName"], parse_json(args),
                                  as_str(item.get("toolCallId")) or None))
    return calls


def _prompt_text(raw: Any) -> str | None:
    """The task of a run: ``ai.prompt``'s ``prompt``, else its last user message (of its
    ``messages`` list: anything else holds none)."""
    prompt = parse_json(raw)
    if not isinstance(prompt, dict):
        return as_str(raw)
    if isinstance(prompt.get("prompt"), str):
        return str(prompt["prompt"])
    found = prompt.get("messages")
    for msg in reversed(found) if isinstance(found, list) else ():
        if isinstance(msg, dict) and msg.get("role") == "user":
            return as_str(msg.get("content"))
    return None


def _fill(step: Step, span: Span, attrs: Attrs) -> None:
    get = attrs.get
    if step.kind == "tool":
        step.tool_name = as_name(get("ai.toolCall.name"))
        step.arguments = parse_json(first(attrs, "ai.toolCall.args", "ai.toolCall.input"))
        step.result = decode_json_string(get("ai.toolCall.result"))
        return
    if step.kind == "agent":
        step.input_text = _prompt_text(get("ai.prompt"))
        step.result = as_str(get("ai.response.text"))
        return
    if step.kind != "llm":
        return
    step.model = as_str(first(attrs, "ai.response.model", "gen_ai.response.model",
                              "ai.model.id", "gen_ai.request.model"))
    step.input_tokens = as_int(first(attrs, "ai.usage.inputTokens", "ai.usage.promptTokens",
                                     "gen_ai.usage.input_tokens"), 0)
    step.output_tokens = as_int(first(attrs, "ai.usage.outputTokens",
                                      "ai.usage.completionTokens",
                                      "gen_ai.usage.output_tokens"), 0)
    step.input_text = as_str(get("ai.prompt.messages"))
    step.output_text = as_str(get("ai.response.text"))
    step.tool_calls = _tool_calls(get("ai.response.toolCalls"))
    reason = as_str(get("ai.response.finishReason"))
    step.finish_reasons = [reason] if reason else []
    if step.output_text is None and step.tool_calls:
        step.output_text = as_str(get("ai.response.toolCalls"))


def _agent_name(span: Span, attrs: Attrs, enclosing: Attrs | None) -> str | None:
    return as_str(first(attrs, "ai.telemetry.functionId", "resource.name")) or None


def _tools(attrs: Attrs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    raw = attrs.get("ai.prompt.tools")
    for item in raw if isinstance(raw, list) else ():
        tool = parse_json(item)
        if not (isinstance(tool, dict) and isinstance(tool.get("name"), str)):
            return UNREAD_OFFER  # one not read (cut at a length limit): the offer is unknown
        schema = tool.get("inputSchema", tool.get("parameters", {}))
        out[tool["name"]] = schema if isinstance(schema, dict) else {}
    return out


KEYS = {
    "tool_name": ("ai.toolCall.name",),
    "arguments": ("ai.toolCall.args", "ai.toolCall.input"),
    "result": ("ai.toolCall.result", "ai.response.text"),
    "input_text": ("ai.prompt.messages", "ai.prompt"),
    "output_text": ("ai.response.text", "ai.response.toolCalls"),
    "tool_calls": ("ai.response.toolCalls",),
    "model": ("ai.response.model", "gen_ai.response.model", "ai.model.id",
              "gen_ai.request.model"),
    "input_tokens": ("ai.usage.inputTokens", "ai.usage.promptTokens",
                     "gen_ai.usage.input_tokens"),
    "output_tokens": ("ai.usage.outputTokens", "ai.usage.completionTokens",
                      "gen_ai.usage.output_tokens"),
    "finish_reasons": ("ai.response.finishReason",),
    "call_id": ("ai.toolCall.id",),
    "agent_name": ("ai.telemetry.functionId", "resource.name"),
    "tools": ("ai.prompt.tools",),
}
VERCEL_AI = Adapter("vercel_ai", _explicit, no_kind, _fill, _agent_name, _tools, KEYS, ("ai.",),
                    undefined=undefined_value("ai.operationId", _OTHER_OPERATIONS))
