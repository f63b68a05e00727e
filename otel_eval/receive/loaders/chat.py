"""Chat-message logs -> spans in the current OTel GenAI conventions.

One conversation becomes one trace: an ``invoke_agent`` root, a ``chat`` span per model
turn (``gen_ai.input.messages`` = the history sent, ``gen_ai.output.messages`` = the reply,
both JSON messages made of ``parts``) and an ``execute_tool`` span per tool call, children of
the root in conversation order. Ids derive from a hash of (file name, run index, 8 hex
digits of the file's content: ``file_digest``; a conversation's, with ``--turns``, of the
run's: ``content_digest``) and times are synthetic and monotonic (1 ms
per span from a fixed base), so loading a file twice, or replaying it over OTLP and receiving
it back, gives identical traces, and a runs file of the same name in another directory (another
run of the benchmark) other ones.

A call's input is the whole history before it until a run's inputs hold ``MAX_INPUT_CHARS``
in all; past that, the messages added since the previous call: the
history sent again at every call is quadratic in the run's length (a 3 MB runs file of one
run of 12,000 messages made 18 GB of inputs), so a chat log costs time and memory linear in
its size.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

from otel_eval.base.model import Span, Trace
from otel_eval.base.text import checked
from otel_eval.evaluate.conventions.values import dumps

DIGEST_HEX = 8  # hex digits of a run's content digest in its ids (and conversation id)
# 2024-01-01T00:00:00Z; run i starts i hours later, each span lasts 1 ms.
_BASE_NS = 1_704_067_200 * 1_000_000_000
_RUN_GAP_NS = 3_600 * 1_000_000_000
_TICK_NS = 1_000_000
# instrumentation scope of the synthetic spans
SCOPE = "otel_eval.receive.loaders"


# what ``dumps`` does with a string (C when available), without the per-call set-up
_encode_str = json.encoder.encode_basestring


_DECODER = json.JSONDecoder()


def _value(value: Any) -> str:
    return _encode_str(value) if isinstance(value, str) else dumps(value)


def _plain_json(value: Any) -> str | None:
    """What ``dumps`` makes of a value parsed from JSON, for the usual small tool arguments
    (dicts, lists, strings, ints, bool, null; None for anything else, e.g. floats): the
    encoder's per-call set-up costs more than encoding such a value."""
    kind = type(value)
    if kind is str:
        return _encode_str(value)
    if kind is dict:
        items = []
        for k, v in value.items():
            inner = _plain_json(v)
            if inner is None:
                return None
            items.append(f"{_encode_str(k)}: {inner}")  # keys of parsed JSON are strings
        return f"{{{', '.join(items)}}}"
    if kind is list:
        elements = []
        for v in value:
            inner = _plain_json(v)
            if inner is None:
                return None
            elements.append(inner)
        return f"[{', '.join(elements)}]"
    if kind is int:
        return int.__repr__(value)
    if value is None or kind is bool:
        return "null" if value is None else "true" if value else "false"
    return None


def _arguments_json(args: Any) -> str:
    """``dumps`` of tool-call arguments as ``genai_message`` leaves them (parsed when JSON)."""
    if not isinstance(args, str):
        return dumps(args)
    try:
        if not args or args[0] in " \t\n\r":
            parsed = _DECODER.decode(args)
        else:  # = json.loads, without the whitespace skipping it does not need here
            parsed, end = _DECODER.raw_decode(args)
            if end != len(args):
                parsed = _DECODER.decode(args)  # trailing whitespace, or extra data (invalid)
        parsed = checked(parsed, args)
    except (ValueError, RecursionError):
        return _encode_str(args)  # invalid JSON stays the raw string
    fast = _plain_json(parsed)
    return fast if fast is not None else dumps(parsed)


def with_finish_reason(message_json: str, reason: str) -> str:
    """A serialized GenAI message plus its ``finish_reason`` (without re-serializing it)."""
    return f'{message_json[:-1]}, "finish_reason": {_value(reason)}}}'


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


def message_json(msg: dict[str, Any]) -> str:
    """``dumps(genai_message(msg))``, byte for byte (same separators, same encoder for every
    value), written directly: loaders serialize every message of every run, and building
    the dicts to encode them cost more than the encoding. Keep the two in step."""
    role = str(msg.get("role") or "user")
    content = msg.get("content")
    parts: list[str] = []
    if role == "tool":
        parts.append(f'{{"type": "tool_call_response", "id": {_value(msg.get("tool_call_id"))}, '
                     f'"response": {_value(content)}}}')
    elif content is not None and content != "":
        text = content if isinstance(content, str) else dumps(content)
        parts.append(f'{{"type": "text", "content": {_encode_str(text)}}}')
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") or {}
        parts.append(f'{{"type": "tool_call", "id": {_value(call.get("id"))}, '
                     f'"name": {_value(fn.get("name"))}, '
                     f'"arguments": {_arguments_json(fn.get("arguments"))}}}')
    return f'{{"role": {_encode_str(role)}, "parts": [{", ".join(parts)}]}}'


def file_digest(data: bytes) -> str:
    """8 hex digits of a chat-log file's bytes, for the ids of its runs: two runs files of
    one name (``a/airline.json``, ``b/airline.json``) hold other runs, the same file read
    again the same ones. One hash per file (a run's ``content_digest`` serializes it again:
    ~0.15 ms a tau-bench run, 5 % of ``eval``)."""
    return hashlib.sha256(data).hexdigest()[:DIGEST_HEX]


def content_digest(run: Any) -> str:
    """8 hex digits of a run's content: two runs files of one name (``a/airline.json``,
    ``b/airline.json``) hold other runs, the same run read again is the same one."""
    text = json.dumps(run, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_HEX]


# The text the inputs of one run's chat calls hold in all before a call's input is only the
# messages added since the previous call (far above a real run's: a tau-bench run's are
# ~1 MB, a model's context window ~4 MB per call).
MAX_INPUT_CHARS = 64 << 20


class Inputs:
    """The inputs of one run's chat calls (a conversation's, over its turns' traces): the
    history sent, until they hold ``MAX_INPUT_CHARS``; then what each call added to it."""

    __slots__ = ("chars", "seen")

    def __init__(self) -> None:
        self.chars = 0  # the text of the inputs so far
        self.seen = 0  # messages of the history at the previous call, once past the bound


class ChatTrace:
    """Accumulates the spans of one conversation."""

    def __init__(self, key: str, index: int, service: str, offset_ns: int = 0,
                 inputs: Inputs | None = None) -> None:
        """``offset_ns``: after run ``index``'s start (a later turn of the conversation);
        ``inputs``: the run's, when its calls are in several traces (its turns)."""
        self.inputs = inputs or Inputs()
        seed = hashlib.sha256(key.encode()).hexdigest()
        self.trace_id = seed[:32]
        # span ids hash f"{seed}/{n}": the seed's share of the hash is computed once
        self._seed_hash = hashlib.sha256(f"{seed}/".encode())
        self._count = 0
        self._start = _BASE_NS + index * _RUN_GAP_NS + offset_ns
        self._clock = self._start
        self.resource = {"service.name": service}
        self.root_id = self._next_id()
        self.spans: list[Span] = []

    def _next_id(self) -> str:
        self._count += 1
        h = self._seed_hash.copy()
        h.update(str(self._count).encode())
        return h.hexdigest()[:16]

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
        inputs = self.inputs  # inline: a call's cost is counted per span (tests/cost)
        if inputs.chars < MAX_INPUT_CHARS:
            sent = f"[{','.join(history)}]"
            inputs.chars += len(sent)
            if inputs.chars >= MAX_INPUT_CHARS:
                inputs.seen = len(history)
        else:
            sent = f"[{','.join(history[inputs.seen:])}]"
            inputs.seen = len(history)
        attributes = {"gen_ai.operation.name": "chat",
                      "gen_ai.input.messages": sent,
                      "gen_ai.output.messages": f"[{with_finish_reason(output, reason)}]",
                      "gen_ai.response.finish_reasons": [reason]}
        if attrs:
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
