"""Stage: trajectory (part). Google ADK's own content attributes, read beside the GenAI
conventions ADK marks its spans with.

ADK (``google-adk``, tracer ``gcp.vertex.agent``) names its spans by the GenAI conventions
(``invoke_agent``, ``execute_tool``, and for each model call a ``call_llm`` span with
``gen_ai.system``, model and tokens). In its telemetry schema 1 (ADK 1.x's format, still
chosen by ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``) the content is not in the conventions'
attributes but in its own, as JSON:

- ``gcp.vertex.agent.llm_request``: ``{"model", "config", "contents": [Content]}``, and
  ``gcp.vertex.agent.llm_response``: ``{"content": Content, "finish_reason", ...}``, where a
  Gemini ``Content`` is ``{"role": "user" | "model", "parts": [{"text"}, {"function_call":
  {"id", "name", "args"}}, {"function_response": {"id", "name", "response"}}]}``;
- the tools offered, in the request's ``config.tools``: ``[{"function_declarations": [{"name",
  "description", "parameters_json_schema" | "parameters"}]}]`` (``parameters`` is a Gemini
  ``Schema``, its types upper-case: no JSON schema, so such a tool's schema is unknown);
- ``gcp.vertex.agent.tool_call_args`` (the call's arguments) and
  ``gcp.vertex.agent.tool_response`` (its response; a value that is no dict is wrapped as
  ``{"result": ...}``, which ``trajectory.envelopes`` takes off).

``read`` fills what the conventions left unread: an LLM step's messages (Contents turned into
the conventions' messages of typed parts: ``text``, ``tool_call``, ``tool_call_response``;
``model`` is ``assistant``) and its calls, a tool step's arguments and result; ``tools``
the offer. With content
capture off ADK writes ``{}`` in each: nothing is read from it (unknown, not empty). Schema 2,
ADK 2's default, records the conventions' own attributes and needs nothing here.
"""

from __future__ import annotations

import json
from itertools import islice
from typing import Any

from otel_eval.base.model import Span
from otel_eval.base.steps import Step, ToolCall
from otel_eval.evaluate.conventions.adapter import Attrs
from otel_eval.evaluate.conventions.values import MAX_OUTPUT_CALLS, as_str, parse_json

__all__ = ["KEYS", "read", "tools"]

LLM_REQUEST = "gcp.vertex.agent.llm_request"
LLM_RESPONSE = "gcp.vertex.agent.llm_response"
TOOL_ARGS = "gcp.vertex.agent.tool_call_args"
TOOL_RESPONSE = "gcp.vertex.agent.tool_response"
KEYS = frozenset((LLM_REQUEST, LLM_RESPONSE, TOOL_ARGS, TOOL_RESPONSE))
_ROLES = {"user": "user", "model": "assistant"}
_NOT_CAPTURED = "{}"  # what ADK writes with content capture off


def read(step: Step, span: Span, attrs: Attrs) -> None:
    if step.kind == "tool":
        _tool(step, attrs)
    elif step.kind == "llm":
        _llm(step, attrs)


def tools(attrs: Attrs) -> dict[str, Any]:
    """The tools a model call's request offers: {name: its JSON schema, {} when unknown}."""
    text = attrs.get(LLM_REQUEST)
    if not isinstance(text, str) or "function_declarations" not in text:
        return {}
    request = parse_json(text)
    config = request.get("config") if isinstance(request, dict) else None
    groups = config.get("tools") if isinstance(config, dict) else None
    offered: dict[str, Any] = {}
    for group in groups if isinstance(groups, list) else ():
        declared = group.get("function_declarations") if isinstance(group, dict) else None
        for fn in declared if isinstance(declared, list) else ():
            name = fn.get("name") if isinstance(fn, dict) else None
            if isinstance(name, str) and name:
                schema = fn.get("parameters_json_schema")
                offered[name] = schema if isinstance(schema, dict) else {}
    return offered


def _tool(step: Step, attrs: Attrs) -> None:
    response = as_str(attrs.get(TOOL_RESPONSE))
    if response is None or response == _NOT_CAPTURED:
        return  # content capture off: the arguments' "{}" is no value either
    if step.result is None:
        step.result = response
        step.sources["result"] = f"adk {TOOL_RESPONSE}"
    args = parse_json(attrs.get(TOOL_ARGS))
    if step.arguments is None and isinstance(args, dict):
        step.arguments = args
        step.sources["arguments"] = f"adk {TOOL_ARGS}"


def _llm(step: Step, attrs: Attrs) -> None:
    if step.input_text is None:
        request = parse_json(attrs.get(LLM_REQUEST))
        contents = request.get("contents") if isinstance(request, dict) else None
        found = [m for m in map(_message, contents if isinstance(contents, list) else ())
                 if m is not None]
        if found:
            step.input_text = json.dumps(found, ensure_ascii=False)
            step.sources["input_text"] = f"adk {LLM_REQUEST}"
    if step.output_text is None:
        response = parse_json(attrs.get(LLM_RESPONSE))
        reply = _message(response.get("content")) if isinstance(response, dict) else None
        if reply is not None:
            step.output_text = json.dumps([reply], ensure_ascii=False)
            step.sources["output_text"] = f"adk {LLM_RESPONSE}"
            if not step.tool_calls:
                step.tool_calls = list(islice(
                    (ToolCall(p["name"], p["arguments"], p["id"])
                     for p in reply["parts"] if p["type"] == "tool_call"),
                    MAX_OUTPUT_CALLS + 1))  # one past: read_span marks the rest cut


def _message(content: Any) -> dict[str, Any] | None:
    """A Gemini ``Content`` as a message of the conventions' typed parts; None when it is no
    Content (a part it does not know is left out)."""
    if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
        return None
    role = _ROLES.get(as_str(content.get("role")) or "", "user")
    parts = [p for p in map(_part, content["parts"]) if p is not None]
    return {"role": role, "parts": parts}


def _part(part: Any) -> dict[str, Any] | None:
    if not isinstance(part, dict):
        return None
    if isinstance(part.get("text"), str):
        return {"type": "text", "content": part["text"]}
    call = part.get("function_call")
    if isinstance(call, dict) and isinstance(call.get("name"), str) and call["name"]:
        return {"type": "tool_call", "id": as_str(call.get("id")) or None,
                "name": call["name"], "arguments": call.get("args")}
    response = part.get("function_response")
    if isinstance(response, dict):
        return {"type": "tool_call_response", "id": as_str(response.get("id")) or None,
                "response": json.dumps(response.get("response"), ensure_ascii=False,
                                       default=str)}
    return None
