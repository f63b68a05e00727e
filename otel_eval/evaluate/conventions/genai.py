"""OpenTelemetry GenAI semantic conventions, current and older shape.

Current (marker ``gen_ai.operation.name``): ``gen_ai.input.messages`` /
``gen_ai.output.messages`` (JSON messages made of typed ``parts``: text, tool_call,
tool_call_response, ...), ``gen_ai.tool.name`` / ``gen_ai.tool.call.arguments`` /
``gen_ai.tool.call.result``, ``gen_ai.tool.definitions``, ``gen_ai.agent.name``,
``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons``.

Older (no operation name; recognised by ``gen_ai.system``, ``gen_ai.prompt`` /
``gen_ai.completion`` as attributes or as ``gen_ai.content.*`` span events, usage
``prompt_tokens`` / ``completion_tokens``) is read by the same code, recorded as
``genai_legacy``. Message text stays a raw string; output messages are parsed only when they
can hold tool calls or finish reasons.
"""

from __future__ import annotations

import re
from typing import Any

from otel_eval.base.model import Span
from otel_eval.base.steps import Step, StepKind, ToolCall
from otel_eval.evaluate.conventions.adapter import Adapter, Attrs, no_kind, undefined_value
from otel_eval.evaluate.conventions.values import (
    as_int,
    as_list_of_str,
    as_name,
    as_str,
    calls_full,
    decode_json_string,
    dumps,
    first,
    parse_json,
    tool_definitions,
)

_OPERATIONS: dict[str, StepKind] = {
    "chat": "llm", "text_completion": "llm", "generate_content": "llm", "completion": "llm",
    "execute_tool": "tool", "invoke_agent": "agent", "invoke_workflow": "chain",
    "embeddings": "other", "create_agent": "other",
    # an agent's planning phase: a wrapper of the chat call that makes the plan
    # (semantic-conventions-genai's registry)
    "plan": "chain",
    # a chat service's span around one user turn of a conversation, and the newer name of
    # the invoke_agent / invoke_workflow internals: runs, read as wrappers like a workflow
    "handle_conversation_turn": "chain", "gen_ai.invocation.internal": "chain",
}
# Operations the conventions define that are no step of ours (semantic-conventions-genai's
# registry: the memory store's operations too; a guardrail applied to content, which reports
# the guardrail's own result and no verdict of the run's; a model response fetched by its id,
# no inference), and Strands' span around one cycle of its event loop (recorded: a wrapper of
# the cycle's chat and tool spans)
_MEMORY_OPERATIONS = frozenset({"search_memory", "create_memory", "update_memory",
                                "upsert_memory", "delete_memory", "create_memory_store",
                                "delete_memory_store"})
_OTHER_OPERATIONS = frozenset({"embeddings", "create_agent", "retrieval", "apply_guardrail",
                               "fetch_response", "execute_event_loop_cycle",
                               *_MEMORY_OPERATIONS})
# Operations that set an agent up and do nothing of a run (the GenAI conventions' create_agent:
# "Create GenAI agent", typically when the agent object is built, before any invocation).
SETUP_OPERATIONS = frozenset({"create_agent"})
_LEGACY_LLM_KEYS = ("gen_ai.prompt", "gen_ai.completion", "gen_ai.system",
                    "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens",
                    "gen_ai.request.model", "gen_ai.response.model")
_PROMPT_EVENT = "gen_ai.content.prompt"
_COMPLETION_EVENT = "gen_ai.content.completion"


# Google ADK's span of a reply's parallel calls, once their responses are merged into one
# event (``trace_merged_tool_calls``, Python and JS): an ``execute_tool`` of this tool name
# (and span name) beside the calls' own spans, itself running nothing: a wrapper's kind.
ADK_MERGED_TOOLS = "(merged tools)"
ADK_MERGED_SPAN = "execute_tool (merged)"


def _explicit(span: Span, attrs: Attrs) -> StepKind | None:
    op = attrs.get("gen_ai.operation.name")
    if op is None:
        return None
    kind = _OPERATIONS.get(str(op), "other")
    if kind == "tool" and (span.name == ADK_MERGED_SPAN  # inlined: read for every tool span
                           or attrs.get("gen_ai.tool.name") == ADK_MERGED_TOOLS):
        return "chain"
    return kind


def _setup(span: Span, attrs: Attrs) -> bool:
    return str(attrs.get("gen_ai.operation.name")) in SETUP_OPERATIONS


def _implicit_legacy(span: Span, attrs: Attrs) -> StepKind | None:
    if "gen_ai.tool.name" in attrs:
        merged = span.name == ADK_MERGED_SPAN or attrs["gen_ai.tool.name"] == ADK_MERGED_TOOLS
        return "chain" if merged else "tool"
    for key in _LEGACY_LLM_KEYS:
        if key in attrs:
            return "llm"
    for event in span.events:
        if event.name in (_PROMPT_EVENT, _COMPLETION_EVENT):
            return "llm"
    return None


def _event_text(span: Span, event_name: str, key: str) -> str | None:
    for event in span.events:
        if event.name == event_name:
            return as_str(event.attributes.get(key))
    return None


def _output_calls(text: str | None, want_reasons: bool
                  ) -> tuple[list[ToolCall], list[str], list[Any] | None, int]:
    """Tool calls and finish reasons inside output messages (current ``parts`` shape or the
    OpenAI ``tool_calls`` shape of older completions), the messages when the text is a JSON
    list of them (``Step.parsed_output``), and how many calls had no name (unknown calls).
    Parses only when worth it."""
    if not text or ("tool_call" not in text and "toolUse" not in text
                    and "tool_use" not in text
                    and not (want_reasons and "finish_reason" in text)):
        return [], [], None, 0
    messages = parse_json(text)
    parsed = messages if isinstance(messages, list) else None
    if isinstance(messages, dict):
        messages = [messages]
    if not isinstance(messages, list):
        return [], [], None, 0
    calls: list[ToolCall] = []
    reasons: list[str] = []
    nameless = 0
    for msg in messages:
        if calls_full(calls):
            break
        if not isinstance(msg, dict):
            continue
        if isinstance(msg.get("finish_reason"), str):
            reasons.append(msg["finish_reason"])
        for part in _list(msg.get("parts")):
            if calls_full(calls):
                break
            if isinstance(part, dict) and part.get("type") == "tool_call":
                name = as_name(part.get("name"))
                if name is None:
                    nameless += 1
                    continue
                calls.append(ToolCall(name, parse_json(part.get("arguments")),
                                      as_str(part.get("id")) or None))
        for tc in _list(msg.get("tool_calls")):
            if calls_full(calls):
                break
            fn = tc.get("function") if isinstance(tc, dict) else None
            name = as_name(fn.get("name")) if isinstance(fn, dict) else None
            if isinstance(fn, dict) and name is not None:
                calls.append(ToolCall(name, parse_json(fn.get("arguments")),
                                      as_str(tc.get("id")) or None))
            else:
                nameless += 1
        if "parts" not in msg and "tool_calls" not in msg and not calls_full(calls):
            calls.extend(_block_calls(msg.get("content")))
    return calls, reasons, parsed, nameless


def _block_calls(content: Any) -> list[ToolCall]:
    """Tool calls as content blocks: Anthropic ``{"type": "tool_use", "id", "name", "input"}``,
    Bedrock ``{"toolUse": {"toolUseId", "name", "input"}}`` (Strands' messages)."""
    calls: list[ToolCall] = []
    for block in _list(content):
        if calls_full(calls):
            break
        if not isinstance(block, dict):
            continue
        use = block.get("toolUse") if isinstance(block.get("toolUse"), dict) else (
            block if block.get("type") == "tool_use" else None)
        if use is not None and isinstance(use.get("name"), str) and use["name"]:
            call_id = use.get("toolUseId", use.get("id"))
            calls.append(ToolCall(use["name"], parse_json(use.get("input")),
                                  as_str(call_id) or None))
    return calls


# A message of the system's (or OpenAI's developer's) role in a JSON list of messages: a key of
# the messages' own (a quote inside a message's text is escaped, so its text never matches).
_SYSTEM_MESSAGE = re.compile(r'"role"\s*:\s*"(?:system|developer)"')


def with_instructions(text_in: str | None, instructions: Any) -> str | None:
    """The input messages ``text_in`` with ``gen_ai.system_instructions`` first, as the
    system message the older shape records in the history (the current conventions record
    instructions given "separately from the chat history" apart: a list of parts, the
    attribute's JSON schema), so the system prompt is read the same from either shape (the
    judge's view, ``agent_inference``'s fingerprint). Unchanged when there are none, when the
    input is no JSON list of messages, or when it holds a system message already."""
    if instructions is None or text_in is None:
        return text_in
    body = text_in.strip()
    if body[:1] != "[" or body[-1:] != "]" or _SYSTEM_MESSAGE.search(body):
        return text_in
    parts = parse_json(instructions)
    if isinstance(parts, str):
        parts = [{"type": "text", "content": parts}] if parts.strip() else None
    elif isinstance(parts, dict):
        parts = [parts]
    if not isinstance(parts, list) or not parts:
        return text_in
    rest = body[1:].lstrip()
    system = dumps({"role": "system", "parts": parts})
    return f"[{system}]" if rest == "]" else f"[{system}, {rest}"


def _list(value: Any) -> list[Any]:
    """``value`` when it is a list, else empty (``"parts": 1`` is no parts: issue 11)."""
    return value if isinstance(value, list) else []


def _fill_usage(step: Step, attrs: Attrs) -> None:
    # plain gets, not ``first``: this runs for every LLM and agent span (hot path)
    get = attrs.get
    model = get("gen_ai.response.model") or get("gen_ai.request.model")
    step.model = as_str(model) if model is not None else None
    tokens = get("gen_ai.usage.input_tokens")
    if tokens is None:
        tokens = get("gen_ai.usage.prompt_tokens")
    step.input_tokens = None if tokens is None else as_int(tokens, 0)
    tokens = get("gen_ai.usage.output_tokens")
    if tokens is None:
        tokens = get("gen_ai.usage.completion_tokens")
    step.output_tokens = None if tokens is None else as_int(tokens, 0)


def _fill(step: Step, span: Span, attrs: Attrs) -> None:
    kind = step.kind
    if kind == "tool":
        name = attrs.get("gen_ai.tool.name")
        if name is None and span.name.startswith("execute_tool "):
            name = span.name[len("execute_tool "):]
        step.tool_name = as_name(name)
        step.arguments = parse_json(attrs.get("gen_ai.tool.call.arguments"))
        # the result as JSON when the attribute cannot hold it structured (the conventions):
        # a string result is a JSON string literal there, and is read as its text
        step.result = decode_json_string(attrs.get("gen_ai.tool.call.result"))
        return
    _fill_usage(step, attrs)
    # = as_str(first(attrs, current key, legacy key)), inlined: every LLM/agent span
    text_in = attrs.get("gen_ai.input.messages")
    if text_in is None or text_in == "":
        text_in = first(attrs, "gen_ai.prompt")
    text_out = attrs.get("gen_ai.output.messages")
    if text_out is None or text_out == "":
        text_out = first(attrs, "gen_ai.completion")
    text_in, text_out = as_str(text_in), as_str(text_out)
    if span.events and (text_in is None or text_out is None):
        text_in = text_in or _event_text(span, _PROMPT_EVENT, "gen_ai.prompt")
        text_out = text_out or _event_text(span, _COMPLETION_EVENT, "gen_ai.completion")
    if kind == "llm":
        instructions = attrs.get("gen_ai.system_instructions")
        step.input_text = text_in if instructions is None else with_instructions(text_in,
                                                                                instructions)
        step.output_text = text_out
        reasons_attr = attrs.get("gen_ai.response.finish_reasons")
        step.finish_reasons = ([str(v) for v in reasons_attr if v is not None]
                               if type(reasons_attr) is list else as_list_of_str(reasons_attr))
        step.tool_calls, reasons, step.parsed_output, nameless = _output_calls(
            text_out, not step.finish_reasons)
        if nameless:
            step.unnamed_calls(nameless)
        if not step.finish_reasons:
            step.finish_reasons = reasons
    else:
        step.input_text = text_in
        step.result = text_out


def _agent_name(span: Span, attrs: Attrs, enclosing: Attrs | None) -> str | None:
    """``gen_ai.agent.name`` (the span name's ``invoke_agent <name>`` is read by
    ``agent_names.from_span_name``, after every convention's attributes)."""
    return as_str(attrs.get("gen_ai.agent.name")) or None


def _tools(attrs: Attrs) -> dict[str, Any]:
    offered = tool_definitions(attrs.get("gen_ai.tool.definitions"))
    if offered or "gen_ai.agent.tools" not in attrs:
        return offered
    # Strands names the agent's tools on its invoke_agent span, with no definitions: offered,
    # their schemas unknown ({}: no argument is checked against one)
    return {n: {} for n in as_list_of_str(attrs["gen_ai.agent.tools"]) if n.strip()}


# step field -> the keys that carry it (current, then older)
KEYS = {
    "tool_name": ("gen_ai.tool.name",),
    "arguments": ("gen_ai.tool.call.arguments",),
    "result": ("gen_ai.tool.call.result", "gen_ai.output.messages", "gen_ai.completion"),
    "input_text": ("gen_ai.input.messages", "gen_ai.prompt"),
    "output_text": ("gen_ai.output.messages", "gen_ai.completion"),
    "tool_calls": ("gen_ai.output.messages", "gen_ai.completion"),
    "model": ("gen_ai.response.model", "gen_ai.request.model"),
    "input_tokens": ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
    "output_tokens": ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
    "finish_reasons": ("gen_ai.response.finish_reasons", "gen_ai.output.messages"),
    "call_id": ("gen_ai.tool.call.id",),
    "agent_name": ("gen_ai.agent.name",),
    "tools": ("gen_ai.tool.definitions", "gen_ai.agent.tools"),
}
GENAI = Adapter("genai", _explicit, no_kind, _fill, _agent_name, _tools, KEYS, setup=_setup,
                undefined=undefined_value("gen_ai.operation.name", _OTHER_OPERATIONS))
GENAI_LEGACY = Adapter("genai_legacy", no_kind, _implicit_legacy, _fill, _agent_name, _tools,
                       KEYS)
