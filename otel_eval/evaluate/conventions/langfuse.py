"""The Langfuse Python SDK v3 (built on OpenTelemetry; ``@observe``, ``start_as_current_*``,
the ``langfuse.openai`` drop-in), as exported over OTLP to ``/api/public/otel/v1/traces``.

Marker ``langfuse.observation.type``: ``generation`` (an LLM call), ``agent``, ``tool``,
``chain``; the rest (``span``, ``event``, ``retriever``, ``embedding``, ``evaluator``,
``guardrail``) are read as ``other``. What an observation took and gave is
``langfuse.observation.input`` / ``.output`` as the SDK serialised it: a decorated function's
``{"args": [...], "kwargs": {...}}`` (taken off by ``trajectory.envelopes``) and its return
value; for the OpenAI drop-in's generations the request ``{"tools", "messages"}`` and the reply
message (``{"role", "content", "tool_calls"}``; a streamed reply's text alone). Model
``langfuse.observation.model.name``; usage ``langfuse.observation.usage_details`` (JSON, with
the provider's keys ``prompt_tokens`` / ``completion_tokens`` or Langfuse's ``input`` /
``output``). The agent is named by the observation's name (the span name); a failed
observation has ``langfuse.observation.level`` ``ERROR`` and the span's ERROR status, read as
any span's.
"""

from __future__ import annotations

import json
from typing import Any

from otel_eval.base.model import Span
from otel_eval.base.steps import Step, StepKind
from otel_eval.evaluate.conventions.adapter import Adapter, Attrs, no_kind, undefined_value
from otel_eval.evaluate.conventions.messages import (
    message_text,
    reply_calls,
    request_messages,
    response_message,
)
from otel_eval.evaluate.conventions.values import as_int, as_str, parse_json, tool_definitions

TYPE = "langfuse.observation.type"
INPUT = "langfuse.observation.input"
OUTPUT = "langfuse.observation.output"
MODEL = "langfuse.observation.model.name"
USAGE = "langfuse.observation.usage_details"
_KINDS: dict[str, StepKind] = {"generation": "llm", "agent": "agent", "tool": "tool",
                               "chain": "chain"}
# the other observation types Langfuse defines
_OTHER_KINDS = frozenset({"span", "event", "retriever", "evaluator", "embedding", "guardrail"})
_INPUT_TOKENS = ("input", "prompt_tokens", "input_tokens")
_OUTPUT_TOKENS = ("output", "completion_tokens", "output_tokens")


def _explicit(span: Span, attrs: Attrs) -> StepKind | None:
    kind = attrs.get(TYPE)
    if kind is None:
        return None
    return _KINDS.get(str(kind).lower(), "other")


def _tokens(usage: Any, keys: tuple[str, ...]) -> int | None:
    if not isinstance(usage, dict):
        return None
    for key in keys:
        found = as_int(usage.get(key), 0)
        if found is not None:
            return found
    return None


def _reply(output: str | None) -> dict[str, Any] | None:
    """The reply message an output holds: a message ``{"role": "assistant", ...}`` or a
    provider response; None for plain text."""
    if not output or output[:1] != "{":
        return None
    found = response_message(output)
    if found is not None:
        return found
    data = parse_json(output)
    return dict(data) if isinstance(data, dict) and data.get("role") == "assistant" else None


def _fill(step: Step, span: Span, attrs: Attrs) -> None:
    raw_in, raw_out = as_str(attrs.get(INPUT)), as_str(attrs.get(OUTPUT))
    if step.kind == "tool":
        step.arguments = parse_json(raw_in)
        step.result = raw_out
        return
    if step.kind != "llm":
        step.input_text, step.result = raw_in, raw_out
        return
    step.model = as_str(attrs.get(MODEL))
    usage = parse_json(attrs.get(USAGE))
    step.input_tokens = _tokens(usage, _INPUT_TOKENS)
    step.output_tokens = _tokens(usage, _OUTPUT_TOKENS)
    step.input_text = request_messages(raw_in) or raw_in
    reply = _reply(raw_out)
    if reply is None:
        step.output_text = step.reply = raw_out
        return
    step.output_text = json.dumps([reply], ensure_ascii=False)
    step.tool_calls = reply_calls(reply)
    step.reply = message_text(reply)


def _agent_name(span: Span, attrs: Attrs, enclosing: Attrs | None) -> str | None:
    return None  # the observation's name is the span's: ``agent_names.from_span_name``


def _tools(attrs: Attrs) -> dict[str, Any]:
    raw = attrs.get(INPUT)
    if not isinstance(raw, str) or '"tools"' not in raw:
        return {}
    data = parse_json(raw)
    return tool_definitions(data.get("tools") if isinstance(data, dict) else None)


KEYS = {
    "arguments": (INPUT,),
    "result": (OUTPUT,),
    "input_text": (INPUT,),
    "output_text": (OUTPUT,),
    "reply": (OUTPUT,),
    "tool_calls": (OUTPUT,),
    "model": (MODEL,),
    "input_tokens": (USAGE,),
    "output_tokens": (USAGE,),
    "tools": (INPUT,),
}
LANGFUSE = Adapter("langfuse", _explicit, no_kind, _fill, _agent_name, _tools, KEYS,
                   undefined=undefined_value(TYPE, _OTHER_KINDS, lambda v: str(v).lower()))
