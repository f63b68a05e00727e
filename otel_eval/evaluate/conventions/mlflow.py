"""MLflow Tracing's own span format (``@mlflow.trace``, ``mlflow.start_span``, the autolog
integrations), as MLflow's OTLP exporter sends it when no GenAI-semconv translation is asked
for (``MLFLOW_ENABLE_OTEL_GENAI_SEMCONV`` unset; with it, the spans are GenAI spans).

Every ``mlflow.*`` value is JSON-encoded, strings too (``mlflow.spanType`` is ``"\\"TOOL\\""``).
Marker ``mlflow.spanType``: ``CHAT_MODEL`` / ``LLM`` (an LLM call), ``AGENT``, ``TOOL``,
``CHAIN``; the rest (``RETRIEVER``, ``EMBEDDING``, ``PARSER``, ``RERANKER``, ``UNKNOWN``, ...)
are read as ``other``. What a span took and gave is ``mlflow.spanInputs`` /
``mlflow.spanOutputs``: a traced function's arguments by name and its return value; for the
OpenAI autolog's calls the request (``model``, ``messages``, ``tools``) and the ChatCompletion.
Model ``mlflow.llm.model``; usage ``mlflow.chat.tokenUsage`` (``input_tokens`` /
``output_tokens``); offered tools ``mlflow.chat.tools``. The agent is named by the span's name
(the traced function's, or ``name=``). A raising function's span has the ERROR status and an
``exception`` event, read as any span's.
"""

from __future__ import annotations

import json
from typing import Any

from otel_eval.base.model import Span
from otel_eval.base.steps import Step, StepKind
from otel_eval.evaluate.conventions.adapter import Adapter, Attrs, no_kind, undefined_value
from otel_eval.evaluate.conventions.messages import (
    finish_reasons,
    message_text,
    reply_calls,
    request_messages,
    response_message,
)
from otel_eval.evaluate.conventions.values import (
    as_int,
    decode_json_string,
    parse_json,
    tool_definitions,
)

TYPE = "mlflow.spanType"
INPUTS = "mlflow.spanInputs"
OUTPUTS = "mlflow.spanOutputs"
MODEL = "mlflow.llm.model"
USAGE = "mlflow.chat.tokenUsage"
TOOLS = "mlflow.chat.tools"
_KINDS: dict[str, StepKind] = {"CHAT_MODEL": "llm", "LLM": "llm", "AGENT": "agent",
                               "TOOL": "tool", "CHAIN": "chain"}
# the other span types MLflow defines (``UNKNOWN`` says the type is unknown: it is)
_OTHER_KINDS = frozenset({"RETRIEVER", "EMBEDDING", "RERANKER", "PARSER", "MEMORY"})


def _explicit(span: Span, attrs: Attrs) -> StepKind | None:
    kind = decode_json_string(attrs.get(TYPE))
    if kind is None:
        return None
    return _KINDS.get(kind.upper(), "other")


def _fill(step: Step, span: Span, attrs: Attrs) -> None:
    raw_in, raw_out = attrs.get(INPUTS), attrs.get(OUTPUTS)
    if step.kind == "tool":
        # JSON null: no inputs recorded (a call that failed binding its arguments): unknown
        step.arguments = None if raw_in == "null" else parse_json(raw_in)
        step.result = decode_json_string(raw_out)
        return
    if step.kind != "llm":
        step.input_text, step.result = decode_json_string(raw_in), decode_json_string(raw_out)
        return
    step.model = decode_json_string(attrs.get(MODEL))
    usage = parse_json(attrs.get(USAGE))
    if isinstance(usage, dict):
        step.input_tokens = as_int(usage.get("input_tokens"), 0)
        step.output_tokens = as_int(usage.get("output_tokens"), 0)
    text_in, text_out = decode_json_string(raw_in), decode_json_string(raw_out)
    step.input_text = request_messages(text_in) or text_in
    step.finish_reasons = finish_reasons(text_out)
    reply = response_message(text_out)
    if reply is None:
        step.output_text = step.reply = text_out
        return
    step.output_text = json.dumps([reply], ensure_ascii=False)
    step.tool_calls = reply_calls(reply)
    step.reply = message_text(reply)


def _agent_name(span: Span, attrs: Attrs, enclosing: Attrs | None) -> str | None:
    return None  # the span's name: ``agent_names.from_span_name``


def _tools(attrs: Attrs) -> dict[str, Any]:
    return tool_definitions(attrs.get(TOOLS))


KEYS = {
    "arguments": (INPUTS,),
    "result": (OUTPUTS,),
    "input_text": (INPUTS,),
    "output_text": (OUTPUTS,),
    "reply": (OUTPUTS,),
    "tool_calls": (OUTPUTS,),
    "model": (MODEL,),
    "input_tokens": (USAGE,),
    "output_tokens": (USAGE,),
    "finish_reasons": (OUTPUTS,),
    "tools": (TOOLS,),
}
MLFLOW = Adapter("mlflow", _explicit, no_kind, _fill, _agent_name, _tools, KEYS, ("mlflow.",),
                 undefined=undefined_value(TYPE, _OTHER_KINDS,
                                           lambda v: (decode_json_string(v) or "").upper()))
