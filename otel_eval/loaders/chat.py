"""Chat-message logs -> spans in the current OTel GenAI conventions.

One conversation becomes one trace: an ``invoke_agent`` root, a ``chat`` span per model
turn (``gen_ai.input.messages`` = the history sent, ``gen_ai.output.messages`` = the reply,
both JSON messages made of ``parts``) and an ``execute_tool`` span per tool call, children of
the root in conversation order. Ids derive from a hash of (file name, run index) and times are
synthetic and monotonic (1 ms per span from a fixed base), so loading a file twice, or
replaying it over OTLP and receiving it back, gives identical traces.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

from otel_eval.model import Span, Trace

# 2024-01-01T00:00:00Z; run i starts i hours later, each span lasts 1 ms.
_BASE_NS = 1_704_067_200 * 1_000_000_000
_RUN_GAP_NS = 3_600 * 1_000_000_000
_TICK_NS = 1_000_000
# instrumentation scope of the synthetic spans
SCOPE = "otel_eval.loaders"


# one encoder: json.dumps with non-default options builds a new one per call
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
dumps = _ENCODER.encode


def with_finish_reason(message_json: str, reason: str) -> str:
    """A serialized GenAI message plus its ``finish_reason`` (without re-serializing it)."""
    return f'{message_json[:-1]}, "finish_reason": {dumps(reason)}}}'


def genai_message(msg: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message -> a GenAI message with typed parts."""
    role = str(msg.get("role") or "user")
    content = msg.get("content")
    parts: list[dict[str, Any]] = []
    if role == "tool":
        parts.append({"type": "tool_call_response", "id": msg.get("tool_call_id"),
                      "response": content})
    elif content is not None and content != "":
        parts.append({"type": "text", "content": content if isinstance(content, str)
                      else dumps(content)})
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") or {}
        args = fn.get("arguments")
        # invalid JSON arguments stay the raw string: they are a finding, not ours to fix
        with contextlib.suppress(ValueError):
            args = json.loads(args) if isinstance(args, str) else args
        parts.append({"type": "tool_call", "id": call.get("id"), "name": fn.get("name"),
                      "arguments": args})
    return {"role": role, "parts": parts}


class ChatTrace:
    """Accumulates the spans of one conversation."""

    def __init__(self, key: str, index: int, service: str) -> None:
        self._seed = hashlib.sha256(key.encode()).hexdigest()
        self.trace_id = self._seed[:32]
        self._count = 0
        self._start = _BASE_NS + index * _RUN_GAP_NS
        self._clock = self._start
        self.resource = {"service.name": service}
        self.root_id = self._next_id()
        self.spans: list[Span] = []

    def _next_id(self) -> str:
        self._count += 1
        return hashlib.sha256(f"{self._seed}/{self._count}".encode()).hexdigest()[:16]

    def _add(self, name: str, attributes: dict[str, Any], error: str | None = None) -> Span:
        start = self._clock + _TICK_NS
        self._clock = start + _TICK_NS
        span = Span(self.trace_id, self._next_id(), self.root_id, name, start, self._clock,
                    kind="client" if name.startswith("chat") else "internal",
                    status="error" if error else "unset", status_message=error or "",
                    attributes=attributes, events=[], resource=self.resource, scope=SCOPE)
        self.spans.append(span)
        return span

    def chat(self, history: list[str], output: str, reason: str, **attrs: Any) -> Span:
        """``history`` and ``output`` are already-serialized GenAI messages (``output``
        without its finish reason)."""
        model = attrs.get("gen_ai.request.model")
        attributes = {"gen_ai.operation.name": "chat",
                      "gen_ai.input.messages": "[" + ",".join(history) + "]",
                      "gen_ai.output.messages": f"[{with_finish_reason(output, reason)}]",
                      "gen_ai.response.finish_reasons": [reason]}
        attributes.update((k, v) for k, v in attrs.items() if v is not None)
        return self._add(f"chat {model}" if model else "chat", attributes)

    def tool(self, name: str, call_id: str | None, arguments: Any, result: str | None,
             error: str | None = None) -> Span:
        attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": name}
        if call_id:
            attributes["gen_ai.tool.call.id"] = call_id
        attributes["gen_ai.tool.call.arguments"] = (
            arguments if isinstance(arguments, str) else dumps(arguments))
        if result is not None:
            attributes["gen_ai.tool.call.result"] = result
        if error:
            attributes["error.type"] = "tool_error"
        return self._add(f"execute_tool {name}", attributes, error)

    def finish(self, agent: str, source: str, attributes: dict[str, Any]) -> Trace:
        """The root ``invoke_agent`` span (ending after the last child) and the trace."""
        root_attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}
        root_attrs.update((k, v) for k, v in attributes.items() if v is not None)
        root = Span(self.trace_id, self.root_id, None, f"invoke_agent {agent}", self._start,
                    self._clock + _TICK_NS, kind="internal", attributes=root_attrs, events=[],
                    resource=self.resource, scope=SCOPE)
        return Trace(self.trace_id, [root, *self.spans], "complete", source=source,
                     release_reason="eof")
