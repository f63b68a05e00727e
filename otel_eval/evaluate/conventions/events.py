"""Stage: trajectory (part). GenAI events sent as OTLP log records, laid over their span.

Instrumentations that keep message content out of span attributes send it as log records
tied to the span by trace and span id (``opentelemetry-instrumentation-openai-v2`` does in its
default mode). Two shapes exist:

- current: one ``gen_ai.client.inference.operation.details`` event whose attributes are the
  span's ``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``
  and ``gen_ai.tool.definitions``;
- older: one event per message, the message in the record's body: ``gen_ai.system.message``,
  ``gen_ai.user.message``, ``gen_ai.assistant.message`` (``content``, ``tool_calls``),
  ``gen_ai.tool.message`` (``content``, ``id``) and ``gen_ai.choice`` (``index``,
  ``finish_reason``, ``message``).

The older shape also comes as *span events* on the span itself (the GenAI convention before
log-based events; Strands Agents by default): the same event names, the message fields as
the event's attributes, JSON-encoded (``content``, ``message``, ``tool_calls``, ``id``).
``span_events`` turns them into the same records.

``overlay`` turns them into the attributes the GenAI adapter reads, so one reader serves
content on spans, in span events and in logs. Attributes the span carries itself win. On a
tool span (``execute_tool``) the tool message is the call's input and the choice its result
(as Strands records them): they become ``gen_ai.tool.call.arguments`` / ``.result``. Never
raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from otel_eval.base.model import LogEvent, Span
from otel_eval.decode.otlp_logs import CHOICE_EVENT, DETAILS_EVENT, is_genai_event
from otel_eval.decode.otlp_logs import MESSAGE_ROLES as _MESSAGE_ROLES
from otel_eval.evaluate.conventions.messages import message_text
from otel_eval.evaluate.conventions.values import dumps, parse_json

_DETAIL_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages",
                "gen_ai.system_instructions", "gen_ai.tool.definitions")


def _message(role: str, body: Any) -> dict[str, Any]:
    """An older per-message event body -> an OpenAI-shaped message (a body that is JSON text,
    as Semantic Kernel logs ``json.dumps`` of the message, read as the JSON). Its role is the
    event's: the body's ``role`` is "the actual role of the message author as passed in the
    message" (``customer``, ``bot``, ``function``), set only when it differs from the one the
    event names."""
    body = parse_json(body)
    body = body if isinstance(body, Mapping) else {"content": body}
    msg: dict[str, Any] = {"role": role}
    if body.get("content") is not None:
        msg["content"] = body["content"]
    if isinstance(body.get("tool_calls"), list):
        msg["tool_calls"] = body["tool_calls"]
    if role == "tool" and body.get("id") is not None:
        msg["tool_call_id"] = body["id"]
    return msg


def _choice(body: Any) -> tuple[int, dict[str, Any]]:
    body = parse_json(body)
    body = body if isinstance(body, Mapping) else {}
    inner = parse_json(body.get("message"))
    msg = _message("assistant", inner if isinstance(inner, Mapping) else {})
    if body.get("finish_reason") is not None:
        msg["finish_reason"] = body["finish_reason"]
    index = body.get("index")
    return (index if isinstance(index, int) and not isinstance(index, bool) else 0), msg


# Fields of a span event that hold JSON-encoded structure (a body's fields are structured).
_JSON_FIELDS = ("content", "message", "tool_calls")


def span_events(span: Span) -> list[LogEvent]:
    """The span's own GenAI content events as records ``overlay`` reads (none: [])."""
    if not span.events:
        return []
    out = []
    for event in span.events:
        if not is_genai_event(event.name):
            continue
        if event.name == DETAILS_EVENT:
            out.append(LogEvent(span.trace_id, span.span_id, event.name, event.time_unix_nano,
                                dict(event.attributes), None))
            continue
        body = dict(event.attributes)
        for key in _JSON_FIELDS:
            if isinstance(body.get(key), str):
                body[key] = parse_json(body[key])
        message = body.get("message")
        if event.name == CHOICE_EVENT and not isinstance(message, Mapping):
            body["message"] = {"role": "assistant", "content": message}
        out.append(LogEvent(span.trace_id, span.span_id, event.name, event.time_unix_nano, {},
                            body))
    return out


def _tool_io(out: dict[str, Any], inputs: list[dict[str, Any]],
             choices: list[tuple[int, dict[str, Any]]]) -> None:
    """A tool span's tool message (its input: a JSON object) and choice (its result)."""
    if out.get("gen_ai.tool.call.arguments") in (None, ""):
        for msg in inputs:
            content = msg.get("content")
            if msg.get("role") == "tool" and isinstance(content, Mapping):
                out["gen_ai.tool.call.arguments"] = dumps(content)
                break
    if out.get("gen_ai.tool.call.result") in (None, "") and choices:
        text = message_text(choices[0][1])
        if text is not None:
            out["gen_ai.tool.call.result"] = text


def overlay(attributes: Mapping[str, Any], events: Iterable[LogEvent]) -> dict[str, Any]:
    """``attributes`` plus what the span's GenAI events say (the span's own values win)."""
    out = dict(attributes)
    inputs: list[dict[str, Any]] = []
    choices: list[tuple[int, dict[str, Any]]] = []
    for event in _in_order(events):
        if event.name == DETAILS_EVENT:
            for key in _DETAIL_KEYS:
                value = event.attributes.get(key)
                if value is not None and out.get(key) in (None, ""):
                    out[key] = value if isinstance(value, str) else dumps(value)
        elif event.name == CHOICE_EVENT:
            choices.append(_choice(event.body))
        elif event.name in _MESSAGE_ROLES:
            inputs.append(_message(_MESSAGE_ROLES[event.name], event.body))
    if out.get("gen_ai.operation.name") == "execute_tool":
        _tool_io(out, inputs, choices)
    if inputs and out.get("gen_ai.input.messages") in (None, ""):
        out["gen_ai.input.messages"] = dumps(inputs)
    if choices and out.get("gen_ai.output.messages") in (None, ""):
        choices.sort(key=_first)
        out["gen_ai.output.messages"] = dumps([m for _, m in choices])
        reasons = [m["finish_reason"] for _, m in choices if isinstance(
            m.get("finish_reason"), str)]
        if reasons and "gen_ai.response.finish_reasons" not in out:
            out["gen_ai.response.finish_reasons"] = reasons
    return out


def _in_order(events: Iterable[LogEvent]) -> list[LogEvent]:
    """``events`` by time, then by observed time, then as received. Records of one span
    stamped alike (a coarse clock; the per-message shape, one request's messages stamped
    with its time) are told apart by when their sender's SDK took each (observed time): a
    batching exporter sends them in chunks that a concurrent one delivers in any order, so
    the order received is the sender's only within one request. Where both times tie, the
    order received stands: within a request that is the sender's own; across requests
    nothing the sender sent says which came first. An observed time of 0 is unknown (OTLP
    logs.proto), as it is for every span event: such an event goes after those received
    before it at its time (it takes the latest observed time among them; first when none
    was), never before every record of that time as if observed in 1970, and never moves
    the others. A record whose time is unknown (0: neither time nor observed time) keeps
    its place right after the one received before it (first when none was)."""
    keyed: list[tuple[int, int, int, LogEvent]] = []
    last = (-1, -1)
    latest: dict[int, int] = {}  # time -> the latest observed time received at it
    for i, event in enumerate(events):
        t, known = event.time_unix_nano, event.observed_time_unix_nano
        if t:
            seen = latest.get(t, -1)
            if known:
                latest[t] = max(seen, known)
            last = (t, known or seen)
        keyed.append((*last, i, event))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


def _first(item: tuple[int, dict[str, Any]]) -> int:
    return item[0]
