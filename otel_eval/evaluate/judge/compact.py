"""Prompt compaction: the judge sees a trajectory once, with long texts cut to head + tail.

Agents resend their whole history on every LLM call, so the raw input of a run grows with the
square of its length. The judge instead reads each text once: ``MessageLog`` parses the
messages carried by an LLM span and yields only what was not shown before. Exact repeats go
whole; a message that re-sends earlier text rewrapped (smolagents puts earlier outputs under
``[FACTS LIST]:`` / ``[PLAN]:``, tool results under ``Observation:``, the task inside each
prompt template) keeps only its new lines, each run of repeated lines replaced by one marker.
Lines are compared after collapsing whitespace and stripping known wrappers. ``trim`` cuts
long texts keeping both ends (tool outputs put errors at the end, documents their subject at
the start).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from otel_eval.base.pysource import literal
from otel_eval.base.text import load_content
from otel_eval.evaluate.conventions.messages import (
    REASONING_TYPES,
    result_part_text,
    shown_part,
)
from otel_eval.evaluate.detectors.canonical import canonical_arguments


def trim(text: str, max_chars: int, head_ratio: float = 0.6) -> str:
    """``text`` if short enough, else its head and tail around a marker saying how much went."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    head, tail = split(text, max_chars, head_ratio)
    return f"{head}\n[... {len(text) - len(head) - len(tail)} chars trimmed ...]\n{tail}"


def split(text: str, max_chars: int, head_ratio: float) -> tuple[str, str]:
    """The head and the tail ``trim`` keeps of ``text`` (longer than ``max_chars``)."""
    keep = max(max_chars - 40, 2)  # room for the marker
    head = int(keep * head_ratio)
    return text[:head], text[len(text) - (keep - head):]


def compact_json(text: str) -> str:
    """JSON text re-written without the spaces after ``,`` and ``:`` (a fifth fewer tokens
    on tau-bench's tool results, the same values); any other text as it is."""
    if text[:1] not in ("{", "[") or len(text) > _COMPACT_MAX_CHARS:
        return text
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        return text


def sent_chars(text: str | None) -> int:
    """Characters of a span's messages as the judge is shown them: the text's length, but a
    file part (an image, audio, a PDF) counts as its placeholder (``shown_part``:
    ``[image/png, 49 kB]``, its audio's transcript below it), not as its base64 bytes. Linear
    in the text."""
    if not text:
        return 0
    if text.lstrip()[:1] not in ("[", "{"):
        return len(text)
    try:
        data = load_content(text)
    except ValueError:
        return len(text)
    saved, stack = 0, [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if (shown := shown_part(value)) is not None:
                saved += len(json.dumps(value, ensure_ascii=False)) - len(shown)
            else:
                stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return max(len(text) - saved, 0)


# Longest JSON text re-written by ``compact_json`` (a longer one is cut to head and tail
# anyway; parsing it whole would cost more than the spaces it saves).
_COMPACT_MAX_CHARS = 200_000


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # system | user | assistant | tool | raw
    content: str
    tool_calls: str = ""  # rendered "name(args); name(args)" when the message requested tools
    # each call's arguments in the one canonical form (``detectors.canonical``): a tool step
    # whose arguments have the same form ran that call
    call_args: tuple[str, ...] = ()


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI / Anthropic / AI SDK / Bedrock content parts
        parts = []
        for part in content:
            if (shown := shown_part(part)) is not None:
                parts.append(shown)  # an image's bytes are no text: its type and size
            elif (thought := _reasoning(part)) is not None:
                parts.append(thought)
            elif isinstance(part, dict):
                text = part.get("text") or part.get("content")
                if not isinstance(text, str):  # a tool result's part: what it returned
                    text = result_part_text(part)
                parts.append(text if isinstance(text, str) else f"[{part.get('type', 'part')}]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, default=str)


def _reasoning(part: Any) -> str | None:
    """A reasoning part (``messages.REASONING_TYPES``) as the judge reads it: marked as the
    model's reasoning, never as what it said; None for any other part."""
    if not isinstance(part, dict) or part.get("type") not in REASONING_TYPES:
        return None
    text = next((t for k in ("content", "text", "thinking")
                 if isinstance(t := part.get(k), str) and t), None)
    return f"[reasoning] {text}" if text is not None else "[reasoning]"


def _tool_calls(calls: Any) -> tuple[str, tuple[str, ...]]:
    """("name(args); name(args)", the canonical arguments of each call)."""
    if not isinstance(calls, list):
        return "", ()
    out, canon = [], []
    for call in calls:
        if not isinstance(call, dict):
            continue
        fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
        args = fn.get("arguments", fn.get("input", ""))
        args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        out.append(f"{fn.get('name', '?')}({args_text})")
        canon.append(canonical_arguments(args))
    return "; ".join(out), tuple(canon)


# A chat message has one of these (a role, or a typed part's type, and its content).
_MESSAGE_KEYS = frozenset({"role", "type", "parts", "content", "text"})


def _message_list(data: Any) -> list[Any] | None:
    if isinstance(data, dict):
        for key in ("messages", "input", "prompt"):
            found = data.get(key)
            if isinstance(found, list) and all(isinstance(m, dict) for m in found):
                return list(found)
        if "role" in data:
            return [data]
        return None
    if isinstance(data, list) and all(isinstance(m, dict) and not _MESSAGE_KEYS.isdisjoint(m)
                                      for m in data):
        return data  # (a list of other objects, as the AI SDK's ai.response.toolCalls, is none)
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
            data = load_content(text)
        except ValueError:
            data = None
    items = _message_list(data)
    if items is None:
        return [Message("raw", text)]
    messages = []
    for m in items:
        role = str(m.get("role") or m.get("type") or "raw")
        if isinstance(m.get("parts"), list):  # OTel GenAI semantic conventions
            content, (calls, args) = _parts_text(m["parts"])
        else:
            raw, requested = _content_calls(m.get("content", m.get("text")))
            content = _content_text(raw)
            listed = m.get("tool_calls")  # calls not in a list are not understood: none
            calls, args = _tool_calls((listed if isinstance(listed, list) else []) + requested)
        messages.append(Message(role, content, calls, args))
    return messages


def reply_message(text: str | None, calls: list[tuple[str, Any]]) -> Message:
    """An assistant message from a reply already read (its text, its calls' names and
    arguments): what the judge is shown instead of the response object it was read from."""
    rendered, canon = _tool_calls([{"name": n, "arguments": a} for n, a in calls])
    return Message("assistant", text or "", rendered, canon)


def is_raw_reply(messages: list[Message]) -> bool:
    """Whether a span's output parsed as no messages but one raw value: a provider's or
    framework's response object, or a reply's text recorded apart from its calls."""
    return len(messages) == 1 and messages[0].role == "raw"


def _call_part(part: Any) -> dict[str, Any] | None:
    """A content part that requests a call, as ``{"name", "arguments"}``: Anthropic's
    ``tool_use``, the AI SDK's ``tool-call`` (``input``; ``args`` before v5), Bedrock
    Converse's ``toolUse``; None for any other part."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind == "tool_use":
        return {"name": part.get("name"), "arguments": part.get("input", "")}
    if kind == "tool-call":
        return {"name": part.get("toolName"), "arguments": part.get("input", part.get("args"))}
    use = part.get("toolUse")
    return {"name": use.get("name"), "arguments": use.get("input", "")} if isinstance(
        use, dict) else None


def _content_calls(content: Any) -> tuple[Any, list[Any]]:
    """(content without the parts that request calls, those calls): a message's requested
    calls read as calls, not as text."""
    if not isinstance(content, list):
        return content, []
    rest, calls = [], []
    for part in content:
        call = _call_part(part)
        if call is None:
            rest.append(part)
        else:
            calls.append(call)
    return (rest if calls else content), calls


def _parts_text(parts: list[Any]) -> tuple[str, tuple[str, tuple[str, ...]]]:
    """(text, tool calls) of ``gen_ai.*.messages`` parts: text, tool_call, tool_call_response."""
    texts, calls = [], []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if (shown := shown_part(part)) is not None:
            texts.append(shown)  # a blob's content is its bytes: its type and size
        elif (thought := _reasoning(part)) is not None:
            texts.append(thought)
        elif kind == "tool_call":
            calls.append(part)
        elif kind == "tool_call_response":
            texts.append(_content_text(part.get("response", part.get("result"))))
        elif isinstance(part.get("content"), str):
            texts.append(part["content"])
        else:
            texts.append(f"[{kind or 'part'}]")
    return "\n".join(texts), _tool_calls(calls)


def _fingerprint(m: Message) -> str:
    h = hashlib.blake2b(digest_size=12)
    for part in (m.role, m.content, m.tool_calls):
        h.update(part.encode("utf-8", "replace"))
        h.update(b"\0")
    return h.hexdigest()


REPEATED = "[... repeats earlier text ...]"
# A line this long (normalized) counts as repeated when seen before; shorter ones (fences,
# headings, "```", "Yes") follow their neighbours, so new short answers are never dropped.
_MIN_LINE_CHARS = 16
_CALL_LINE_MAX_CHARS = 50_000  # as a code action (trajectory.shell.MAX_COMMAND_CHARS)
# The run of known wrappers a line starts with, matched once: ``*+`` (possessive) so the
# engine keeps no backtracking state per wrapper (a greedy ``*`` held ~80 bytes a char).
# Each wrapper is non-empty, so the run ends where no wrapper matches: what stripping them
# one at a time left.
_WRAPPERS = re.compile(
    r"(?:(?:\[[A-Z][A-Z ]{1,30}\]:|(?:Thought|Code|Observation|Calling tools|Execution logs"
    r"|Last output from code snippet|Output|Result):|Call id: \S+|```\w*|<end_code>"
    r"|Here are the facts that I know so far:"
    r"|Here is the plan of action that I will follow to solve the task:)\s*)*+")
_TRAILERS = ("```", "<end_code>", "<end_plan>")


def normalize(line: str) -> str:
    """A line as compared for repeats: whitespace collapsed, known wrappers stripped.

    Linear in the line: the wrappers and trailers move two indexes and the line is sliced
    once (a slice or a regex search of the rest per token stripped made a line of backticks
    quadratic: 40k chars took 7 s on the judge's event loop)."""
    text = " ".join(line.split())
    start, end = 0, len(text)
    if m := _WRAPPERS.match(text):
        start = m.end()
    while tok := next((t for t in _TRAILERS if text.endswith(t, start, end)), None):
        end -= len(tok)
        while end > start and text[end - 1].isspace():  # a trailer with the spaces before it
            end -= 1
    return text[start:end]


def _call_texts(line: str) -> list[str] | None:
    """Argument texts of a python-repr'd tool call list (smolagents' ``Calling tools:``); a
    line past ``_CALL_LINE_MAX_CHARS`` is compared whole (its tree would cost ~150 bytes a
    character: 865 MB for a 5 MB line)."""
    if not line.startswith("[{'id':") or len(line) > _CALL_LINE_MAX_CHARS:
        return None
    try:
        calls = literal(line)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    texts: list[str] = []
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(args, dict):
            texts.extend(str(v) for v in args.values())
        elif args is not None:
            texts.append(str(args))
    return texts


def _neighbours(status: list[str]) -> list[str]:
    """For each line, the status of the nearest non-filler line before it ("old" at the top)."""
    out, last = [], "old"
    for s in status:
        out.append(last)
        last = s if s != "filler" else last
    return out


class MessageLog:
    """Remembers what was shown; ``new(messages)`` keeps the unseen messages, cut to their new
    lines, in order."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lines: set[str] = set()

    def new(self, messages: list[Message]) -> list[Message]:
        out = []
        for m in messages:
            fp = _fingerprint(m)
            if fp in self._seen:
                continue
            self._seen.add(fp)
            content = self.fresh(m.content)
            if content or (m.tool_calls and m.tool_calls not in self._lines):
                out.append(replace(m, content=content))
            self._mark(m)
        return out

    def mark(self, messages: list[Message]) -> None:
        """Record messages shown elsewhere (an LLM's output reappears in the next input)."""
        for m in messages:
            self._seen.add(_fingerprint(m))
            self._mark(m)

    def _mark(self, m: Message) -> None:
        self.mark_text(m.content)
        self._lines.add(m.tool_calls)
        self._lines.update(normalize(a) for a in m.call_args)

    def mark_text(self, text: str) -> None:
        """Record the lines of a text shown elsewhere (the task, a tool's arguments)."""
        self._lines.update(normalize(line) for line in text.splitlines())

    def seen(self, text: str) -> bool:
        """Whether every line of ``text`` was shown before (wrappers and blanks aside)."""
        return all(self._status(line) != "new" for line in text.splitlines())

    def _status(self, line: str) -> str:
        """``old`` (shown before), ``new``, or ``filler`` (short or blank: follows neighbours)."""
        norm = normalize(line)
        if not norm:
            return "filler"
        texts = _call_texts(norm)
        if texts is not None:
            return "old" if all(self.seen(t) for t in texts) else "new"
        if norm not in self._lines:
            return "new"
        return "old" if len(norm) >= _MIN_LINE_CHARS else "filler"

    def fresh(self, text: str) -> str:
        """``text`` with each run of repeated lines as one marker; "" when nothing is new."""
        lines = text.splitlines()
        status = [self._status(line) for line in lines]
        if "old" not in status:
            return text
        if "new" not in status:
            return ""
        # a filler line stays with new text above it; a short line of text (a heading, "Task:")
        # also with new text below it; blanks and fences between repeats go with them
        before, after = _neighbours(status), _neighbours(status[::-1])[::-1]
        keep = [s == "new" or (s == "filler" and (before[i] == "new" or (
            after[i] == "new" and bool(normalize(lines[i]))))) for i, s in enumerate(status)]
        out: list[str] = []
        for line, kept in zip(lines, keep, strict=True):
            if kept:
                out.append(line)
            elif not out or out[-1] != REPEATED:
                out.append(REPEATED)
        return "\n".join(out)
