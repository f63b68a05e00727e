"""Stage: trajectory (part). The text of a run's task and answer, from LLM message content.

When only LLM spans carry messages (the usual case for a hand-written agent loop), the task is
the first user message of the first LLM call and the answer the text of the last LLM call's
output. Message content comes in several shapes, all read here: GenAI ``parts``, OpenAI chat
messages (``content`` as text or typed parts), a request object ``{"messages": [...]}``, an
OpenAI response ``{"choices": [{"message": ...}]}``, or plain text. Never raises; returns
None when nothing was recorded, so "unknown" never reads as "empty".
"""

from __future__ import annotations

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
