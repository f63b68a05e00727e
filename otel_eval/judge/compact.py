"""Prompt compaction: the judge sees a trajectory once, with long texts cut to head + tail.

Agents resend their whole history on every LLM call, so the raw input of a run grows with the
square of its length. The judge instead reads each message once: ``MessageLog`` parses the
messages carried by an LLM span and yields only those not seen before (a system prompt
repeated by every call is shown once), and ``trim`` cuts long texts keeping both ends (tool
outputs put errors at the end, documents put their subject at the start).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any


def trim(text: str, max_chars: int, head_ratio: float = 0.6) -> str:
    """``text`` if short enough, else its head and tail around a marker saying how much went."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    keep = max(max_chars - 40, 2)  # room for the marker
    head = int(keep * head_ratio)
    tail = keep - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} chars trimmed ...]\n{text[len(text) - tail:]}"


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # system | user | assistant | tool | raw
    content: str
    tool_calls: str = ""  # rendered "name(args); name(args)" when the message requested tools


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI / Anthropic content parts
        parts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text") or part.get("content")
                parts.append(text if isinstance(text, str) else f"[{part.get('type', 'part')}]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, default=str)


def _tool_calls_text(calls: Any) -> str:
    if not isinstance(calls, list):
        return ""
    out = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
        args = fn.get("arguments", fn.get("input", ""))
        args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        out.append(f"{fn.get('name', '?')}({args_text})")
    return "; ".join(out)


def _message_list(data: Any) -> list[Any] | None:
    if isinstance(data, dict):
        for key in ("messages", "input", "prompt"):
            if isinstance(data.get(key), list):
                return list(data[key])
        if "role" in data:
            return [data]
        return None
    if isinstance(data, list) and all(isinstance(m, dict) for m in data):
        return data
    return None


def parse_messages(text: str | None) -> list[Message]:
    """Messages carried by a span (a JSON list of chat messages, ``{"messages": [...]}``, a
    single message) or one ``raw`` message holding the text as is."""
    if not text:
        return []
    data: Any = None
    stripped = text.lstrip()
    if stripped[:1] in "[{":
        try:
            data = json.loads(text)
        except ValueError:
            data = None
    items = _message_list(data)
    if items is None:
        return [Message("raw", text)]
    messages = []
    for m in items:
        role = str(m.get("role") or m.get("type") or "raw")
        if isinstance(m.get("parts"), list):  # OTel GenAI semantic conventions
            content, calls = _parts_text(m["parts"])
        else:
            content = _content_text(m.get("content", m.get("text")))
            calls = _tool_calls_text(m.get("tool_calls"))
        messages.append(Message(role, content, calls))
    return messages


def _parts_text(parts: list[Any]) -> tuple[str, str]:
    """(text, tool calls) of ``gen_ai.*.messages`` parts: text, tool_call, tool_call_response."""
    texts, calls = [], []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "tool_call":
            calls.append(part)
        elif kind == "tool_call_response":
            texts.append(_content_text(part.get("response", part.get("result"))))
        elif isinstance(part.get("content"), str):
            texts.append(part["content"])
        else:
            texts.append(f"[{kind or 'part'}]")
    return "\n".join(texts), _tool_calls_text(calls)


def _fingerprint(m: Message) -> str:
    h = hashlib.blake2b(digest_size=12)
    for part in (m.role, m.content, m.tool_calls):
        h.update(part.encode("utf-8", "replace"))
        h.update(b"\0")
    return h.hexdigest()


class MessageLog:
    """Remembers messages already shown; ``new(messages)`` keeps the unseen ones in order."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def new(self, messages: list[Message]) -> list[Message]:
        out = []
        for m in messages:
            fp = _fingerprint(m)
            if fp not in self._seen:
                self._seen.add(fp)
                out.append(m)
        return out

    def mark(self, messages: list[Message]) -> None:
        """Record messages shown elsewhere (an LLM's output reappears in the next input)."""
        self._seen.update(_fingerprint(m) for m in messages)
