"""Stage: trajectory (part). The text of a run's task and answer, from LLM message content.

When only LLM spans carry messages (the usual case for a hand-written agent loop), the task is
the last user message of the first LLM call (``request_text``: the only one in a one-turn run;
the turn's own request when a chat sends the earlier turns again as history) and the answer the
text of the last LLM call's output. Message content comes in several shapes, all read here:
GenAI ``parts``, OpenAI chat messages (``content`` as text or typed parts), a request object
``{"messages": [...]}``, an OpenAI response ``{"choices": [{"message": ...}]}``, or plain
text. Never raises; returns None when nothing was recorded, so "unknown" never reads as
"empty".
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from otel_eval.base.steps import ToolCall
from otel_eval.evaluate.conventions.haystack import reply_finish_reasons
from otel_eval.evaluate.conventions.values import as_name, as_str, calls_full, parse_json

_DECODER = json.JSONDecoder()
# a response object's repr (``raw_finish_reasons``): its first choice, and where it is looked for
_RAW_HEAD = 1_000
_RAW_CHOICE = re.compile(r"choices=\[\w{1,80}\(finish_reason='([A-Za-z_]{1,40})'")


# Content parts that hold a file's bytes or point at one (an image, audio, a document), by
# type: the GenAI conventions' ``blob`` / ``uri`` / ``file``, OpenAI's ``image_url``,
# ``input_audio`` and ``file`` (Chat) and ``input_image`` / ``input_file`` (Responses),
# Anthropic's and the AI SDK's ``image`` / ``file`` / ``document``, pydantic-ai's ``binary``
# and ``*-url``. Never text: a blob's ``content`` is its bytes, base64.
_BINARY_TYPES = frozenset({
    "blob", "uri", "file", "image", "image_url", "input_image", "input_audio", "input_file",
    "audio", "video", "document", "binary", "image-url", "audio-url", "video-url",
    "document-url"})
# Fields of such a part (or of the object under its type's name) that hold its bytes inline,
# base64 or a ``data:`` URL; and those that point at it (a URI, a file id: never fetched).
_INLINE_KEYS = ("content", "data", "file_data", "image_url", "url", "image", "base64")
_SOURCE_KEYS = ("source", "image_url", "input_audio", "file", "image", "inline_data")
_MEDIA = re.compile(r"[a-z][a-z0-9.+-]{0,40}(?:/[a-z0-9][a-z0-9.+-]{0,60})?")


def _media(value: Any) -> str | None:
    """A MIME type or modality as written in a placeholder: only its own charset (span text
    cannot write the judge's prompt through it)."""
    return value.lower() if isinstance(value, str) and _MEDIA.fullmatch(value.lower()) else None


def _size(n: int) -> str:
    """A size of ``n`` bytes as people write it."""
    if n < 1000:
        return f"{n} B"
    return f"{n / 1000:.0f} kB" if n < 1_000_000 else f"{n / 1_000_000:.1f} MB"


def data_url(url: Any) -> tuple[str | None, int] | None:
    """(MIME type, bytes) of a ``data:`` URL's content (base64: its size from its length,
    never decoded); None for anything else."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    head, comma, _ = url[:200].partition(",")
    if not comma:
        return None
    chars = len(url) - len(head) - 1
    return _media(head[5:].split(";")[0]), chars * 3 // 4 if head.endswith(";base64") else chars


def binary_placeholder(part: Any) -> str | None:
    """What a content part that is a file (``_BINARY_TYPES``) is shown as instead of its bytes:
    ``[image/png, 12 kB]`` (its MIME type, else its modality or type, and the size of its
    inline data), ``[image/png, by URI]`` / ``[image/png, by file id]`` when it points at one,
    ``[image]`` when nothing of it was recorded. The URI is not shown: it is never fetched,
    says nothing of the content a judge could check, and a signed URL's query is a
    credential. None for any other part. Reads a few keys, never decodes the data (a
    ``data:`` URL's type is read from its first characters)."""
    if not isinstance(part, dict) or part.get("type") not in _BINARY_TYPES:
        return None
    kind = str(part["type"])
    where = [part] + [v for k in _SOURCE_KEYS if isinstance(v := part.get(k), dict)]
    mime = next((m for d in where for k in ("mime_type", "media_type", "mediaType",
                                            "mimeType", "format") if (m := _media(d.get(k)))),
                None)
    data = next((v for d in where for k in _INLINE_KEYS
                 if isinstance(v := d.get(k), str) and v), None)
    how = None
    if (inline := data_url(data)) is not None:
        mime, how = mime or inline[0], _size(inline[1])
    elif data is not None and not data.startswith(("http://", "https://")) and kind != "uri":
        how = _size(len(data) * 3 // 4)
    elif isinstance(size := part.get("size_bytes"), int):  # read before (``data_url``)
        how = _size(size)
    elif data is not None or kind == "uri" or any("uri" in d or "url" in d for d in where):
        how = "by URI"
    elif kind == "file" or any("file_id" in d for d in where):
        how = "by file id"
    what = mime or _media(part.get("modality")) or kind.replace("_url", "").replace("-url", "")
    return f"[{what}, {how}]" if how else f"[{what}]"


# The GenAI conventions' file parts (``BlobPart``, ``FilePart``, ``UriPart``) that may carry
# the ``transcript`` of their audio: what was said to the model, or what it said.
_TRANSCRIBED_TYPES = frozenset({"blob", "file", "uri"})


def audio_transcript(part: Any) -> str | None:
    """The ``transcript`` of a GenAI file part whose ``modality`` is ``audio`` (the
    conventions' input and output messages schemas: the transcription of the audio given, or
    the model's own transcript of its spoken reply); None for any other part, or when none
    was recorded."""
    if not isinstance(part, dict) or part.get("type") not in _TRANSCRIBED_TYPES \
            or part.get("modality") != "audio":
        return None
    text = part.get("transcript")
    return text if isinstance(text, str) else None


def shown_part(part: Any) -> str | None:
    """A file part as shown instead of its bytes: its ``binary_placeholder``, and below it
    its audio's transcript when one was recorded; None for any other part."""
    shown = binary_placeholder(part)
    if shown is None:
        return None
    said = audio_transcript(part)
    return shown if said is None else shown + "\n" + said


# Content parts of a model's reasoning (the GenAI conventions' ``ReasoningPart``, the AI SDK's
# ``reasoning``, Anthropic's ``thinking``): what it thought, never what it said.
REASONING_TYPES = frozenset({"reasoning", "thinking", "redacted_thinking"})


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # a file's part is no text (its content is its bytes)
        texts = [p.get("text", p.get("content")) for p in content if isinstance(p, dict)
                 and p.get("type") not in _BINARY_TYPES and p.get("type") not in REASONING_TYPES]
        found = [t for t in texts if isinstance(t, str)]
        return "\n".join(found) if found else None
    return None


def _files(msg: dict[str, Any]) -> str | None:
    """The placeholders of a message's file parts (``binary_placeholder``), one a line."""
    parts = msg.get("parts", msg.get("content"))
    shown = [p for p in map(binary_placeholder, parts if isinstance(parts, list) else ())
             if p is not None]
    return "\n".join(shown) if shown else None


def message_text(msg: Any) -> str | None:
    """The text of one message (None when it has none recorded). A file it holds (an image)
    is no text: ``shown_text`` names it; the transcript of its audio (``audio_transcript``)
    is what was said, so text."""
    if not isinstance(msg, dict):
        return msg if isinstance(msg, str) else None
    parts = msg.get("parts")
    if isinstance(parts, list):
        texts = [p.get("content") if p.get("type") == "text"
                 else audio_transcript(p) if p.get("type") in _TRANSCRIBED_TYPES else None
                 for p in parts if isinstance(p, dict)]
        found = [t for t in texts if isinstance(t, str)]
        return "\n".join(found) if found else None
    inner = msg.get("message")
    if isinstance(inner, dict):
        return message_text(inner)
    return _content_text(msg.get("content", msg.get("text")))


def shown_text(msg: Any) -> str | None:
    """A user's message as shown (the run's request): its text, then a placeholder for each
    file it holds (``binary_placeholder``: ``[image/png, 12 kB]``, never its bytes), so a
    request that is an image alone is that image, not the message's JSON."""
    text = message_text(msg)
    inner = msg.get("message") if isinstance(msg, dict) else None
    files = _files(inner if isinstance(inner, dict) else msg) if isinstance(msg, dict) else None
    if files is None:
        return text
    return files if text is None else text + "\n" + files


def tool_response(part: Any) -> str | None:
    """What a GenAI ``tool_call_response`` part says its call returned, as text: its
    ``response`` (the conventions' field), else ``result`` (pydantic-ai's); None when not
    recorded."""
    if not isinstance(part, dict):
        return None
    return as_str(part.get("response", part.get("result")))


def result_part_text(part: Any) -> str | None:
    """What a tool-result part (or item) says its call returned, as text, in the shapes LLM
    inputs record: GenAI ``tool_call_response``, Anthropic's ``tool_result`` (its text or
    text blocks), the AI SDK's ``tool-result`` (``output``'s ``value``; ``result`` before
    v5), the Responses API's ``function_call_output``, Bedrock Converse's ``toolResult`` (its
    text blocks); None for any other part."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind == "tool_call_response":
        return tool_response(part)
    if kind == "tool_result":
        return _content_text(part.get("content"))
    if kind == "tool-result":
        out = part.get("output")
        return as_str(out.get("value") if isinstance(out, dict) else part.get("result"))
    if kind == "function_call_output":
        out = part.get("output")
        return _content_text(out) if isinstance(out, list) else as_str(out)
    inner = part.get("toolResult")
    return _content_text(inner.get("content")) if isinstance(inner, dict) else None


def results_text(msg: Any) -> str | None:
    """What a message that answers tool calls says they returned (a tool message of result
    parts, a user message of tool results, a Responses ``function_call_output`` item), as
    text; None when it holds no result part. (Its own text, when it has one, is
    ``message_text``'s.)"""
    if not isinstance(msg, dict):
        return None
    if msg.get("type") == "function_call_output":
        return result_part_text(msg)
    parts = msg.get("parts", msg.get("content"))
    if not isinstance(parts, list):
        return None
    texts = [t for t in map(result_part_text, parts) if t is not None]
    return "\n".join(texts) if texts else None


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
    found = messages(raw) if raw is not None else None
    return raw if found is None else task_of(found)


def task_of(found: list[Any]) -> str | None:
    """``task_text`` of messages already parsed (``messages``)."""
    for msg in found:
        if isinstance(msg, dict) and msg.get("role") == "user":
            return shown_text(msg)
    return None


# Content parts that carry a tool's result, not the user's words (Anthropic, Responses, GenAI).
_RESULT_PARTS = frozenset({"tool_result", "function_call_output", "tool_call_response"})


def _is_request(msg: Any) -> bool:
    if not isinstance(msg, dict) or msg.get("role") != "user":
        return False
    parts = msg.get("content", msg.get("parts"))
    return not (isinstance(parts, list) and any(
        isinstance(p, dict) and p.get("type") in _RESULT_PARTS for p in parts))


def request_text(raw: str | None) -> str | None:
    """The user's request in the input of a run's first LLM call: its last user message with
    text, tool results aside (or the raw text when it is not messages). Nothing of the run has
    happened before that call, so the earlier user messages are earlier turns (history)."""
    if raw is None:
        return None
    found = messages(raw)
    return raw if found is None else request_of(found)


def request_of(found: list[Any]) -> str | None:
    """``request_text`` of messages already parsed (``messages``)."""
    for msg in reversed(found):
        if _is_request(msg) and (text := shown_text(msg)) is not None:
            return text
    return None


def answer_text(raw: str | None) -> str | None:
    """The text of an LLM output (the last message with text), raw text when not messages."""
    found = messages(raw) if raw is not None else None
    return raw if found is None else answer_of(found)


def answer_of(found: list[Any]) -> str | None:
    """``answer_text`` of messages already parsed (``messages``). A reply recorded chunk by
    chunk (Google ADK's streamed call: one output message per chunk, each but the last with an
    empty ``finish_reason``, as it did not finish there) is the chunks' text joined."""
    for i in range(len(found) - 1, -1, -1):
        text = message_text(found[i])
        if text is not None:
            first = i
            while first and _unfinished(found[first - 1]):
                first -= 1
            if first == i:
                return text
            return "".join(message_text(m) or "" for m in found[first:i + 1])
    return None


def said_nothing(raw: str | None) -> bool:
    """Whether an LLM output is a reply recorded with empty text and no calls: its last
    message's content empty ("", no parts), or LangChain's last generation's ``text`` "".
    A message whose content is absent or null says nothing either way: instrumentations
    leave content out when they do not capture it, and OpenAI's null content is also a reply
    of calls only (a call unrecorded)."""
    found = messages(raw)
    last = found[-1] if found else None
    if isinstance(last, dict) and isinstance(last.get("generations"), list):
        # an LLMResult has no messages key: ``messages`` gives it whole, as one item
        last = last["generations"][-1] if last["generations"] else None
        last = last[-1] if isinstance(last, list) and last else None
        if not isinstance(last, dict) or last.get("text") != "":
            return False
        message = last.get("message")
        kwargs = message.get("kwargs") if isinstance(message, dict) else None
        return not (isinstance(kwargs, dict) and kwargs.get("tool_calls"))
    if not isinstance(last, dict) or last.get("tool_calls"):
        return False
    if "parts" in last:
        parts = last["parts"]
        return isinstance(parts, list) and not any(
            isinstance(p, dict) and (p.get("type") != "text" or p.get("content")) for p in parts)
    return last.get("content") in ("", [])


# Finish reasons that say the model ended its turn (not for calls, a limit or a filter).
STOP_REASONS = frozenset({"stop", "end_turn", "stop_sequence", "completed"})


def reply_text(answer: str | None, raw: str | None,
               finish_reasons: Sequence[str] = ()) -> str | None:
    """The text of an LLM step's reply (its ``answer``); "" when the reply was recorded with
    empty text (an empty output, or ``said_nothing``) and its finish reason says the model
    stopped there (an empty text beside calls another convention recorded is no reply);
    None when no text is known."""
    if answer:
        return answer
    if not any(r.lower() in STOP_REASONS for r in finish_reasons):
        return None
    if answer == "":
        return ""
    return "" if raw is not None and (not raw.strip() or said_nothing(raw)) else None


def _unfinished(msg: Any) -> bool:
    return isinstance(msg, dict) and msg.get("finish_reason") == ""


def request_messages(raw: str | None) -> str | None:
    """The messages of a request-shaped input (``{"model", "messages", "tools", ...}``, what
    ``openinference-instrumentation-openai`` / ``-anthropic`` record as ``input.value``) as a
    JSON list, a top-level ``system`` (Anthropic) first; None when ``raw`` is not a request.

    The list is the request's own text, cut out where the keys after it begin (found from the
    end, parsing only those small keys): an agent resends its whole history on every call,
    so decoding and re-encoding each input would cost the square of the run's length."""
    if not raw or raw[:1] != "{" or '"messages"' not in raw:
        return None
    at = raw.find('"messages"')
    colon = raw.find(":", at + 10)
    start = raw.find("[", colon + 1)
    if colon < 0 or start < 0 or raw[at + 10:colon].strip() or raw[colon + 1:start].strip():
        return None
    head = raw[start + 1:start + _HEAD_CHARS].lstrip()
    if not (head.startswith("]") or (head.startswith("{") and '"role"' in head)):
        return None  # LangChain's batches ([[...]]) or reprs: no chat request
    found = _array_end(raw, start)
    if found is None:
        return None
    end, rest = found
    messages = raw[start:end]
    before = parse_json("{" + raw[1:at].rstrip().rstrip(",") + "}") if at > 1 else {}
    system = rest.get("system", before.get("system") if isinstance(before, dict) else None)
    if isinstance(system, str | list) and system:
        lead = json.dumps({"role": "system", "content": system}, ensure_ascii=False)
        inner = messages[1:].lstrip()
        return "[" + lead + ("]" if inner.startswith("]") else ", " + inner)
    return messages


# Characters after a request's "messages": [ read to tell a chat request from other shapes.
_HEAD_CHARS = 300
def _array_end(raw: str, start: int) -> tuple[int, dict[str, Any]] | None:
    """(index after the messages list opened at ``start``, the request's keys after it).
    The list ends at the ``]`` right after its last ``{"role": ...}`` message (that one
    message decoded); when the messages do not start with their role, the list is decoded
    whole."""
    end = _after_last_message(raw, start)
    if end < 0:
        try:
            found, end = _DECODER.raw_decode(raw, start)
        except (ValueError, RecursionError):
            return None
        if not isinstance(found, list):
            return None
    rest = raw[end:].strip()
    tail = {} if rest == "}" else parse_json("{" + rest[1:]) if rest[:1] == "," else None
    return (end, tail) if isinstance(tail, dict) else None


def _after_last_message(raw: str, start: int) -> int:
    """Index after the ``]`` that follows the last ``{"role": ...}`` object, else -1."""
    if raw[start + 1:start + _HEAD_CHARS].lstrip().startswith("]"):
        return raw.index("]", start) + 1  # no messages
    at = raw.rfind('{"role"', start)
    if at < 0:
        return -1
    try:
        _, stop = _DECODER.raw_decode(raw, at)
    except (ValueError, RecursionError):
        return -1
    close = len(raw) - len(raw[stop:].lstrip()) if raw[stop:stop + 1].isspace() else stop
    return close + 1 if raw[close:close + 1] == "]" else -1


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


def reply_calls(reply: dict[str, Any]) -> list[ToolCall]:
    """Tool calls of a reply message (OpenAI shape: ``tool_calls[].function``; anything but
    a list there holds none)."""
    calls: list[ToolCall] = []
    found = reply.get("tool_calls")
    for call in found if isinstance(found, list) else ():
        if calls_full(calls):
            break
        fn = call.get("function") if isinstance(call, dict) else None
        name = as_name(fn.get("name")) if isinstance(fn, dict) else None
        if isinstance(fn, dict) and name is not None:
            calls.append(ToolCall(name, parse_json(fn.get("arguments")),
                                  as_str(call.get("id"))))
    return calls


def finish_reasons(output: str | None) -> list[str]:
    """Finish reasons of a provider response (OpenAI's ``choices[].finish_reason``; a
    response's own ``finish_reason``, as AutoGen's ``CreateResult``), or of a framework's
    reply holding the response's repr (smolagents' ``raw``, Haystack's ``replies``); parsed
    only when the text names one."""
    if not output or "finish_reason" not in output:
        return []
    data = parse_json(output)
    if not isinstance(data, dict):
        return []
    if isinstance(data.get("finish_reason"), str):
        return [data["finish_reason"]]
    choices = data.get("choices")
    if isinstance(choices, list):
        return [str(c["finish_reason"]) for c in choices if isinstance(c, dict)
                and isinstance(c.get("finish_reason"), str)]
    if "replies" in data:
        return reply_finish_reasons(data["replies"])
    return raw_finish_reasons(data.get("raw"))


def raw_finish_reasons(raw: Any) -> list[str]:
    """The first choice's finish reason in a response object's repr, as smolagents keeps it
    in its ``ChatMessage.raw`` (``output.value``): OpenAI's ``ChatCompletion(id='...',
    choices=[Choice(finish_reason='stop', ...``, LiteLLM's ``ModelResponse(..., choices=[
    Choices(finish_reason=...``, Hugging Face's ``ChatCompletionOutput(choices=[
    ChatCompletionOutputComplete(finish_reason=...``. A choice's reason comes before its
    message, so the first ``choices=[`` (looked for in the first ``_RAW_HEAD`` characters, the
    provider's fields) is the response's own whatever the content says; anything else gives
    none."""
    at = raw.find("choices=[", 0, _RAW_HEAD) if isinstance(raw, str) else -1
    found = _RAW_CHOICE.match(raw, at) if at >= 0 else None
    return [found.group(1)] if found is not None else []


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
