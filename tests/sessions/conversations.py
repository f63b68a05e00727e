"""Conversations as a chat service sends them: one OTLP/JSON trace per user turn, each
carrying the conversation id under a convention's key (``gen_ai.conversation.id``,
OpenInference's ``session.id``, ...).

``tau_turns`` splits a tau-bench run (one OpenAI chat log) at its user messages: a turn is the
user's message and what the agent did until the next one (chat spans, tool spans with their
arguments and results).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

Message = dict[str, Any]
BASE_NS = 1_700_000_000_000_000_000
TURN_NS = 60_000_000_000  # a minute between turns


def _hex(text: str, chars: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:chars]


def _attrs(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": {"stringValue": v if isinstance(v, str) else json.dumps(v)}}
            for k, v in values.items() if v is not None]


class _Turn:
    def __init__(self, trace_id: str, start_ns: int) -> None:
        self.trace_id, self.now = trace_id, start_ns
        self.root = _hex(trace_id + "root", 16)
        self.spans: list[dict[str, Any]] = []

    def span(self, name: str, attrs: dict[str, Any], parent: str | None = None) -> None:
        span_id = _hex(f"{self.trace_id}{len(self.spans)}", 16) if parent != "" else self.root
        out = {"traceId": self.trace_id, "spanId": span_id, "name": name,
               "startTimeUnixNano": str(self.now), "endTimeUnixNano": str(self.now + 1000),
               "attributes": _attrs(attrs)}
        if parent:
            out["parentSpanId"] = parent
        self.spans.append(out)
        self.now += 1000


def turn_body(trace_id: str, start_ns: int, key: str, conversation: str, user: str,
              replies: list[Message], results: dict[str, Any], service: str = "airline",
              ) -> dict[str, Any]:
    """The OTLP/JSON of one turn: the user's message, then each assistant message (a chat
    span) and its tool calls (execute_tool spans, results from ``results`` by call id)."""
    turn = _Turn(trace_id, start_ns)
    user_json = json.dumps([{"role": "user", "parts": [{"type": "text", "content": user}]}])
    for reply in replies:
        parts: list[dict[str, Any]] = []
        if reply.get("content"):
            parts.append({"type": "text", "content": reply["content"]})
        for call in reply.get("tool_calls") or ():
            fn = call.get("function") or {}
            parts.append({"type": "tool_call", "id": call.get("id"), "name": fn.get("name"),
                          "arguments": fn.get("arguments")})
        out = json.dumps([{"role": "assistant", "parts": parts}])
        turn.span("chat gpt-4o", {"gen_ai.operation.name": "chat",
                                  "gen_ai.request.model": "gpt-4o",
                                  "gen_ai.input.messages": user_json,
                                  "gen_ai.output.messages": out}, turn.root)
        for call in reply.get("tool_calls") or ():
            fn = call.get("function") or {}
            if call.get("pending"):
                continue  # asked for, never ran: no span
            turn.span(f"execute_tool {fn.get('name')}", {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": fn.get("name"),
                "gen_ai.tool.call.id": call.get("id"),
                "gen_ai.tool.call.arguments": fn.get("arguments"),
                "gen_ai.tool.call.result": results.get(str(call.get("id")))}, turn.root)
    answer = next((r["content"] for r in reversed(replies) if r.get("content")), None)
    end = turn.now
    turn.now = start_ns
    turn.span("invoke_agent airline_agent", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "airline_agent",
        key: conversation, "gen_ai.input.messages": user_json,
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}])
        if answer else None}, "")
    turn.spans[-1]["endTimeUnixNano"] = str(end + 1000)
    return {"resourceSpans": [{"resource": {"attributes": _attrs({"service.name": service})},
                               "scopeSpans": [{"spans": turn.spans}]}]}


def tau_turns(run: dict[str, Any], index: int, key: str, conversation: str,
              ) -> list[tuple[str, dict[str, Any]]]:
    """(trace id, OTLP/JSON body) per user turn of a tau-bench run, in order."""
    results = {str(m.get("tool_call_id")): m.get("content") for m in run["traj"]
               if m.get("role") == "tool"}
    turns: list[tuple[str, list[Message]]] = []
    for msg in run["traj"]:
        if msg.get("role") == "user":
            turns.append((str(msg.get("content") or ""), []))
        elif msg.get("role") == "assistant" and turns:
            turns[-1][1].append(msg)
    out = []
    for number, (user, replies) in enumerate(turns):
        trace_id = _hex(f"tau{index}:{number}", 32)
        out.append((trace_id, turn_body(trace_id, BASE_NS + number * TURN_NS, key,
                                        conversation, user, replies, results)))
    return out


def call(tool: str, arguments: dict[str, Any], call_id: str, pending: bool = False) -> Message:
    """An assistant message calling one tool; ``pending``: the call never runs (no span)."""
    return {"role": "assistant", "tool_calls": [
        {"id": call_id, "function": {"name": tool, "arguments": json.dumps(arguments)},
         "pending": pending}]}


def scripted(conversation: str, key: str, turns: list[tuple[str, list[Message]]],
             service: str = "airline") -> list[tuple[str, dict[str, Any]]]:
    """Hand-written turns: (user message, assistant messages) each, sent by ``service``."""
    out = []
    for number, (user, replies) in enumerate(turns):
        name = f"{conversation}:{number}" + ("" if service == "airline" else f":{service}")
        trace_id = _hex(name, 32)
        results = {str(c["id"]): "ok" for r in replies for c in r.get("tool_calls") or ()}
        out.append((trace_id, turn_body(trace_id, BASE_NS + number * TURN_NS, key,
                                        conversation, user, replies, results, service)))
    return out
