"""Stage: trajectory (part). The text of a run's task and answer, from LLM message content.

When only LLM spans carry messages (the usual case for a hand-written agent loop), the task is
the first user message of the first LLM call and the answer the text of the last LLM call's
output. Message content comes in several shapes, all read here: GenAI ``parts``, OpenAI chat
messages (``content`` as text or typed parts), a request object ``{"messages": [...]}``, an
OpenAI response ``{"choices": [{"message": ...}]}``, or plain text. Never raises; returns
None when nothing was recorded, so "unknown" never reads as "empty".
"""

from __future__ import annotations

import json
from typing import Any

from otel_eval.evaluate.conventions.values import parse_json


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", p.get("content")) for p in content if isinstance(p, dict)]
        found = [t for t in texts if isinstance(t, str)]
        return "\n".join(found) if found else None
    return None


def message_text(msg: Any) -> str | None:
    """The text of one message (None when it has none recorded)."""
    if not isinstance(msg, dict):
        return msg if isinstance(msg, str) else None
    parts = msg.get("parts")
    if isinstance(parts, list):
        texts = [p.get("content") for p in parts
                 if isinstance(p, dict) and p.get("type") == "text"]
        found = [t for t in texts if isinstance(t, str)]
        return "\n".join(found) if found else None
    inner = msg.get("message")
    if isinstance(inner, dict):
        return message_text(inner)
    return _content_text(msg.get("content", msg.get("text")))


def messages(raw: str | None) -> list[Any] | None:
    """The messages a span carries, or None when ``raw`` is not a structure of messages."""
    data = parse_json(raw)
    if isinstance(data, dict):
        for key in ("messages", "choices", "output"):
            if isinstance(data.get(key), list):
                return list(data[key])
        return [data]
    return data if isinstance(data, list) else None


def task_text(raw: str | None) -> str | None:
    """The first user message of an LLM input (or the raw text when it is not messages)."""
    if raw is None:
        return None
    found = messages(raw)
    if found is None:
        return raw
    for msg in found:
        if isinstance(msg, dict) and msg.get("role") == "user":
            return message_text(msg)
    return None


def answer_text(raw: str | None) -> str | None:
    """The text of an LLM output (the last message with text), raw text when not messages."""
    if raw is None:
        return None
    found = messages(raw)
    if found is None:
        return raw
    for msg in reversed(found):
        text = message_text(msg)
        if text is not None:
            return text
    return None


def request_messages(raw: str | None) -> str | None:
    """The messages of a request-shaped input (``{"model", "messages", "tools", ...}``, what
    ``openinference-instrumentation-openai`` / ``-anthropic`` record as ``input.value``) as a
    JSON list, a top-level ``system`` (Anthropic) first; None when ``raw`` is not a request."""
    if not raw or raw[:1] != "{" or '"messages"' not in raw:
        return None
    data = parse_json(raw)
    found = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(found, list) or not all(isinstance(m, dict) and "role" in m
                                              for m in found):
        return None  # LangChain's batches of serialized messages are no chat request
    found = list(found)
    system = data.get("system")
    if isinstance(system, str | list) and system:
        found.insert(0, {"role": "system", "content": system})
    return json.dumps(found, ensure_ascii=False)


def response_message(raw: str | None) -> dict[str, Any] | None:
    """The reply message of a response-shaped output: OpenAI's ChatCompletion
    (``{"choices": [{"message": ...}]}``, the first choice) or an Anthropic Message
    (``{"type": "message", "role": "assistant", "content": [...]}``, its text and
    ``tool_use`` blocks as an OpenAI-shaped message); None for anything else."""
    if not raw or raw[:1] != "{" or ('"choices"' not in raw and '"message"' not in raw):
        return None
    data = parse_json(raw)
    if not isinstance(data, dict):
        return None
    choices = data.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        msg = choices[0].get("message")
        return dict(msg) if isinstance(msg, dict) else None
    if data.get("type") == "message" and isinstance(data.get("content"), list):
        return _anthropic_reply(data["content"])
    return None


def _anthropic_reply(blocks: list[Any]) -> dict[str, Any]:
    texts = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"
             and isinstance(b.get("text"), str)]
    calls = [{"id": b.get("id"), "type": "function",
              "function": {"name": b.get("name"),
                           "arguments": json.dumps(b.get("input"), ensure_ascii=False)}}
             for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
    out: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    if calls:
        out["tool_calls"] = calls
    return out
