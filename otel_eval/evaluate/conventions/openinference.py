"""OpenInference (Arize Phoenix; smolagents, LlamaIndex, LangChain instrumentations).

Marker ``openinference.span.kind`` (AGENT, LLM, TOOL, CHAIN; RETRIEVER, EMBEDDING, RERANKER,
GUARDRAIL, EVALUATOR, PROMPT read as ``other``). Raw text in ``input.value`` /
``output.value``; flattened messages ``llm.input_messages.N.message.*`` and tool calls
``llm.output_messages.N.message.tool_calls.M.tool_call.function.{name,arguments}``; usage
``llm.token_count.*``; model ``llm.model_name``; offered tools ``llm.tools.N.tool.json_schema``;
tool spans ``tool.name`` / ``tool.parameters`` (the tool's parameter schema: the actual
arguments are in ``input.value``), the span's own tool (``Adapter.described``: it names the
arguments, and is no offer). smolagents managed agents are named from the enclosing
agent's ``smolagents.managed_agents.N.name``, others by ``agent.name``, else the span name
(smolagents' ``<name>.run`` read as ``<name>``). A LangGraph node span marked AGENT (the
ReAct graph's ``agent`` node: ``metadata.langgraph_node`` is its own name) is a chain step
of the graph, not an agent; a span marked AGENT with ``tool.name`` is a tool step (the
LangChain instrumentation marks every run whose name holds "agent" AGENT, a tool run too:
``ask_weather_agent``, an agent called as a tool). LangChain's agents stamp their name on
every run of the agent as ``metadata.lc_agent_name`` (``create_agent(name=...)``, Python and
JS): ``stamped_agent_name`` reads it, for spans that are not agent spans (LangChain.js's graph
root is a CHAIN span). Tool
inputs are read as carried (LlamaIndex's ``{"kwargs": ...}``,
smolagents' ``{"args", "kwargs"}`` are taken off by ``trajectory.envelopes``).

DSPy (OpenInference's DSPy instrumentation) marks every module CHAIN, the user's own module
too: a trace is DSPy's when a span comes from that instrumentation's scope
(``openinference.instrumentation.dspy``) or carries DSPy's own span names
(``Predict.forward``, ``Predict(<signature>).forward``, ``ChatAdapter.__call__`` and the
other adapters', ``LM.__call__``: ``dspy_marked``). There, a CHAIN span named
``<Class>.forward`` (``aforward``) is a module's run (``dspy_module``); the outermost one
outside any agent is the run's agent when its class is the user's
(``agent_names.dspy_agent_name``: DSPy's ReAct, ChainOfThought, Predict ... are no names),
and its ``output.value``, the DSPy ``Prediction`` as JSON (``{"trajectory", "reasoning",
"answer"}``), gives the run's answer in its ``answer`` field
(``prediction_answer``; any other value is unknown).

Haystack (OpenInference's Haystack instrumentation, scope
``openinference.instrumentation.haystack``) marks its ``Agent`` component's run a CHAIN span
``Agent.run`` (``run_async``): read as an agent step (``haystack_agent``). No attribute names
it; its name is the one the user gave the component in the pipeline, a key of the enclosing
``Pipeline.run`` span's inputs (``input.value``'s ``data``) and outputs (``output.value``):
``haystack_component`` takes the one key whose value is the agent span's own input (else
output), parsed. None or several such keys: unknown, never a guess. Its tool messages are
flattened with their role only; their call id, result and error flag are read from the
``ChatMessage`` reprs of ``input.value`` (``conventions.haystack``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from otel_eval.base.configcheck import ascii_int
from otel_eval.base.model import Span
from otel_eval.base.steps import Step, StepKind, ToolCall
from otel_eval.evaluate.conventions.adapter import Adapter, Attrs, Described, undefined_value
from otel_eval.evaluate.conventions.agent_names import MAX_AGENT_NAME, agent_name
from otel_eval.evaluate.conventions.haystack import call_ids, offered_tools, tool_results
from otel_eval.evaluate.conventions.messages import (
    STOP_REASONS,
    data_url,
    finish_reasons,
    message_text,
    reply_calls,
    request_messages,
    response_message,
)
from otel_eval.evaluate.conventions.values import (
    UNREAD_OFFER,
    as_int,
    as_list_of_str,
    as_name,
    as_str,
    calls_full,
    decode_json_string,
    first,
    parse_json,
    tool_definition,
)

# DSPy's own markers: its instrumentation's scope, the span names of its predictor, adapters
# and LM (``Predict(StringSignature).forward``, ``ChatAdapter.__call__``, ``LM.__call__``).
DSPY_SCOPE = "openinference.instrumentation.dspy"
HAYSTACK_SCOPE = "openinference.instrumentation.haystack"
LLAMA_INDEX_SCOPE = "openinference.instrumentation.llama_index"
_HAYSTACK_AGENT_SPANS = frozenset({"Agent.run", "Agent.run_async"})
_DSPY_NAMES = re.compile(r"(?:Predict(?:\([A-Za-z_]\w*\))?\.forward"
                         r"|(?:Chat|JSON|XML|TwoStep|BAML)Adapter\.__call__|LM\.__call__)\Z")
_DSPY_NAME_CHARS = 200  # of a span name matched against DSPy's (longer ones are none of them)
_MODULE_METHODS = frozenset({"forward", "aforward"})
_KINDS: dict[str, StepKind] = {"AGENT": "agent", "LLM": "llm", "TOOL": "tool", "CHAIN": "chain"}
# the other span kinds OpenInference defines (``UNKNOWN`` says the kind is unknown: it is)
_OTHER_KINDS = frozenset({"RETRIEVER", "EMBEDDING", "RERANKER", "GUARDRAIL", "EVALUATOR",
                          "PROMPT"})
# the ``3`` of ``llm.input_messages.3.message.role``: 1-9 digits 0-9, else no position (that key
# is no message)
_POSITION_DIGITS = 9
_OUT_PREFIX = "llm.output_messages."
_FIRST_PART_TEXT = "0.message.contents.0.message_content.text"  # a reply recorded in parts
_JSON_MIME = "application/json"  # output.mime_type of a value recorded as JSON
_CALL_MARK = ".message.tool_calls."


def _explicit(span: Span, attrs: Attrs) -> StepKind | None:
    kind = attrs.get("openinference.span.kind")
    if kind is None:
        return None
    found = _KINDS.get(str(kind).upper(), "other")
    if (found == "llm" and span.scope == LLAMA_INDEX_SCOPE
            and "llm.input_messages.0.message.role" not in attrs
            and "llm.output_messages.0.message.role" not in attrs
            and "llm.token_count.prompt" not in attrs and "llm.prompts" not in attrs):
        # a method of LlamaIndex's LLM object that made no call (``_prepare_chat_with_tools``
        # builds the request): the instrumentation makes every such method an LLM span, and
        # only a call gets the messages, prompts and tokens of LlamaIndex's LLM events
        return "other"
    if found == "agent" and _langgraph_node(span, attrs):
        return "chain"  # a node of a LangGraph graph (the ReAct "agent" node), not an agent
    if found == "agent" and "tool.name" in attrs:
        # a tool run LangChain's instrumentation marked AGENT for its name (every run whose
        # name holds "agent" is: a tool ask_weather_agent); only a tool run has tool.name
        return "tool"
    if found == "chain" and haystack_agent(span):
        return "agent"
    return found


def _langgraph_node(span: Span, attrs: Attrs) -> bool:
    """Whether a span is a LangGraph node's run: its metadata's ``langgraph_node`` is the
    span's own name (the graph itself carries no node)."""
    raw = attrs.get("metadata")
    if not isinstance(raw, str) or '"langgraph_node"' not in raw:
        return False
    meta = parse_json(raw)
    return isinstance(meta, dict) and meta.get("langgraph_node") == span.name


# LlamaIndex's agent workflow steps whose event (recorded as its repr in ``input.value``)
# ends with the workflow's state: ``AgentSetup(input=[...], current_agent_name='weather_agent')``
# (an AgentWorkflow of several agents: ``AgentWorkflow.setup_agent`` ..., the agent handed to)
_LLAMA_INDEX_STATE_STEPS = ("BaseWorkflowAgent.setup_agent", "BaseWorkflowAgent.run_agent_step",
                            "AgentWorkflow.setup_agent", "AgentWorkflow.run_agent_step")
_CURRENT_AGENT = "current_agent_name="


def workflow_agent_name(span: Span, attrs: Attrs) -> str | None:
    """The agent a LlamaIndex agent workflow's step names under OpenInference: its event's repr
    (``input.value``) ends with ``current_agent_name='<name>'``, after the chat history (the
    last one is the state's own, whatever the messages say). None for any other span, or a
    name that is no plain quoted string (a backslash: escaped, not read)."""
    if span.name not in _LLAMA_INDEX_STATE_STEPS or span.scope != LLAMA_INDEX_SCOPE:
        return None
    raw = attrs.get("input.value")
    if not isinstance(raw, str) or (at := raw.rfind(_CURRENT_AGENT)) < 0:
        return None
    rest = raw[at + len(_CURRENT_AGENT):at + len(_CURRENT_AGENT) + MAX_AGENT_NAME + 4]
    # the repr's quote: ' (Python's), or " (a name holding a ') escaped in the JSON text
    quote = next((q for q in ("'", '\\"', '"') if rest.startswith(q)), "")
    end = rest.find(quote, len(quote)) if quote else -1
    name = rest[len(quote):end] if end > 0 else ""
    return name if name and "\\" not in name else None


def stamped_agent_name(attrs: Attrs) -> str | None:
    """The agent LangChain stamped on a span's run, ``metadata.lc_agent_name``, if any."""
    raw = attrs.get("metadata")
    if not isinstance(raw, str) or '"lc_agent_name"' not in raw:
        return None
    meta = parse_json(raw)
    return as_str(meta.get("lc_agent_name")) if isinstance(meta, dict) else None


def dspy_marked(span: Span) -> bool:
    """Whether a span carries DSPy's own markers (module docstring)."""
    if span.scope.startswith(DSPY_SCOPE):
        return True
    name = span.name
    return len(name) <= _DSPY_NAME_CHARS and _DSPY_NAMES.match(name) is not None


def dspy_module(span: Span, attrs: Attrs) -> str | None:
    """The class of the module whose run a DSPy CHAIN span is (``<Class>.forward``, the
    signature of ``Predict(<signature>)`` taken off), or None. Whether the trace is DSPy's is
    the caller's to tell (``dspy_marked``)."""
    kind = attrs.get("openinference.span.kind")
    if not isinstance(kind, str) or kind.upper() != "CHAIN":
        return None
    head, dot, method = span.name.rpartition(".")
    if not dot or method not in _MODULE_METHODS:
        return None
    module_class = head.partition("(")[0]
    return module_class if module_class.isidentifier() else None


def haystack_agent(span: Span) -> bool:
    """Whether a span is the run of Haystack's ``Agent`` component (module docstring)."""
    return span.name in _HAYSTACK_AGENT_SPANS and span.scope.startswith(HAYSTACK_SCOPE)


def haystack_pipeline(attrs: Attrs) -> tuple[Any, Any]:
    """(the components' inputs, the components' outputs) a ``Pipeline.run`` span carries,
    parsed: dicts keyed by component name, else None."""
    data = parse_json(as_str(attrs.get("input.value")))
    data = data.get("data") if isinstance(data, dict) else None
    outputs = parse_json(as_str(attrs.get("output.value")))
    return (data if isinstance(data, dict) else None,
            outputs if isinstance(outputs, dict) else None)


def haystack_component(pipeline: tuple[Any, Any], attrs: Attrs) -> str | None:
    """The name the pipeline (``haystack_pipeline`` of its span) gave the component whose
    span has ``attrs``: the one key of its inputs whose value is the span's ``input.value``,
    else the one key of its outputs whose value is the span's ``output.value``; None when
    no key or several match (a real name, ``agent_names.agent_name``). Arguments ``None``
    are left out of both: a run that raised records its parameters' defaults too
    (``streaming_callback``, ``tools``... ``None``), the pipeline what it was given."""
    for whole, key in zip(pipeline, ("input.value", "output.value"), strict=True):
        if not whole:
            continue
        own = parse_json(as_str(attrs.get(key)))
        if not isinstance(own, dict) or not own:
            continue
        own = _given(own)
        names = [name for name, value in whole.items()
                 if isinstance(value, dict) and _given(value) == own]
        if len(names) == 1:
            return agent_name(names[0])
    return None


def _given(arguments: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in arguments.items() if v is not None}


def prediction_answer(value: str | None) -> str | None:
    """The ``answer`` field of a DSPy ``Prediction`` recorded as JSON (a module span's
    ``output.value``); None for any other value (not understood: unknown)."""
    if not value or '"answer"' not in value:
        return None
    parsed = parse_json(value)
    answer = parsed.get("answer") if isinstance(parsed, dict) else None
    return answer if isinstance(answer, str) else None


def _implicit(span: Span, attrs: Attrs) -> StepKind | None:
    if "tool.name" in attrs:
        return "tool"
    if ("llm.model_name" in attrs or "llm.input_messages.0.message.role" in attrs
            or "llm.output_messages.0.message.role" in attrs):
        return "llm"
    return None


def _tool_calls(attrs: Attrs) -> tuple[list[ToolCall], int]:
    """Tool calls from flattened output messages, ordered by (message, call) index, and how
    many more were recorded with no name (unknown calls)."""
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(_OUT_PREFIX) or _CALL_MARK not in key:
            continue
        head, _, tail = key[len(_OUT_PREFIX):].partition(_CALL_MARK)
        call_idx, _, field = tail.partition(".tool_call.")
        message = ascii_int(head, _POSITION_DIGITS)
        call = ascii_int(call_idx, _POSITION_DIGITS)
        if message is None or call is None:
            continue
        found.setdefault((message, call), {})[field] = value
    calls: list[ToolCall] = []
    for _, fields in sorted(found.items()):
        if calls_full(calls):
            break
        name = as_name(fields.get("function.name"))
        if name is not None:
            calls.append(ToolCall(name, parse_json(fields.get("function.arguments")),
                                  as_str(fields.get("id"))))
    return calls, len(found) - len(calls)


def _fill(step: Step, span: Span, attrs: Attrs) -> None:
    kind = step.kind
    if kind == "tool":
        step.tool_name = as_name(first(attrs, "tool.name", "tool_call.function.name"))
        # as carried: the smolagents / LlamaIndex envelopes are taken off by
        # ``trajectory.envelopes`` (with every other convention's)
        step.arguments = parse_json(first(attrs, "tool_call.function.arguments", "input.value"))
        out = attrs.get("output.value")
        # a value its mime type says is JSON: a string result is a JSON string literal; so is
        # the AI SDK's JSON of the result, which OpenInference's span processor copies as
        # text/plain beside the SDK's own ``ai.toolCall.result``
        json_text = (attrs.get("output.mime_type") == _JSON_MIME
                     or (out is not None and out == attrs.get("ai.toolCall.result")))
        step.result = decode_json_string(out) if json_text else as_str(out)
        return
    step.input_tokens = as_int(attrs.get("llm.token_count.prompt"), 0)
    step.output_tokens = as_int(attrs.get("llm.token_count.completion"), 0)
    step.input_text = as_str(attrs.get("input.value"))
    if kind == "llm":
        _fill_llm(step, attrs)
    else:
        step.result = as_str(attrs.get("output.value"))


def _fill_llm(step: Step, attrs: Attrs) -> None:
    """An LLM step. ``input.value`` / ``output.value`` hold whatever the instrumentation
    serialised: the OpenAI and Anthropic instrumentations record the whole request
    (``model``, ``messages``, ``tools``) and the provider's response object; those are read
    as the request's messages and the reply message (text and tool calls), so the step has a
    prompt and an answer and no reader downstream sees a raw response object. Other shapes
    (LangChain generations, a LlamaIndex repr) stay as carried; the flattened message holds
    the reply itself."""
    step.model = as_str(attrs.get("llm.model_name"))
    step.input_text = (request_messages(step.input_text) or _flat_input(step.input_text, attrs)
                       or step.input_text)
    output = as_str(attrs.get("output.value"))
    if output is not None and output.endswith(_NO_TEXT):
        output = _textless_reply(output, attrs) or output
    if output is None:  # the reply recorded only as its flattened messages
        output = _flat_output(attrs)
    reason = attrs.get("llm.finish_reason")  # OpenInference's own, else the response's
    reasons = as_list_of_str(reason) if reason is not None else []
    step.finish_reasons = reasons or finish_reasons(output)
    reply = response_message(output)
    step.output_text = json.dumps([reply], ensure_ascii=False) if reply else output
    step.tool_calls, nameless = _tool_calls(attrs)
    if not step.tool_calls and reply:
        step.tool_calls = reply_calls(reply)
    if nameless and not step.tool_calls:
        step.unnamed_calls(nameless)
    _haystack_call_ids(step.tool_calls, output)
    step.reply = as_str(attrs.get("llm.output_messages.0.message.content"))
    if step.reply is None and _OUT_PREFIX + _FIRST_PART_TEXT in attrs:
        step.reply = message_text(_flat_message(_flattened(attrs, _OUT_PREFIX)[0]))
    if step.reply is None and reply:
        step.reply = message_text(reply)


def _haystack_call_ids(calls: list[ToolCall], output: str | None) -> None:
    """Haystack's flattened calls carry no id: take them from the reply's repr, when it
    holds the same calls by name in the same order (else they stay unknown)."""
    if not calls or any(c.call_id is not None for c in calls):
        return
    ids = call_ids(output)
    if [name for name, _ in ids] == [c.name for c in calls]:
        for call, (_, call_id) in zip(calls, ids, strict=True):
            call.call_id = call_id


_IN_PREFIX = "llm.input_messages."


def _flat_input(raw: str | None, attrs: Attrs) -> str | None:
    """The flattened input messages ``llm.input_messages.N.message.*`` as a JSON list of chat
    messages, when ``input.value`` is not one (LangChain's serialized batches, a LlamaIndex
    repr); None when it is, or when none were flattened."""
    if (raw and raw[:2] == '[{') or _IN_PREFIX + "0.message.role" not in attrs:
        return None
    found = _flattened(attrs, _IN_PREFIX)
    bare = [position for position, msg in found.items() if msg == {"role": "tool"}]
    if bare:  # Haystack flattens a tool message by its text: none; read its repr
        results = tool_results(raw)
        for position in bare:
            found[position] = results.get(position, found[position])
    return json.dumps([_flat_message(m) for _, m in sorted(found.items())], ensure_ascii=False)


# the ends of LlamaIndex's repr of a reply with no text (``_textless_reply``)
_NO_TEXT = (": None", ": ")


def _flat_output(attrs: Attrs) -> str | None:
    """The flattened output messages ``llm.output_messages.N.message.*`` as a JSON list of
    chat messages, for a span without ``output.value``: the reply was recorded in its
    structured form only. None when none were flattened."""
    if _OUT_PREFIX + "0.message.role" not in attrs:
        return None
    found = _flattened(attrs, _OUT_PREFIX)
    return json.dumps([_flat_message(m) for _, m in sorted(found.items())], ensure_ascii=False)


def _textless_reply(output: str, attrs: Attrs) -> str | None:
    """LlamaIndex records an LLM's reply as its repr, ``"{role}: {content}"``, and a reply
    with no text (tool calls only) as ``"assistant: None"`` (``"assistant: "`` streamed): not
    an answer but a message with no content, whose calls are flattened beside it. That
    message, as a JSON list of chat messages, for such an output; None for any other. With no
    calls flattened and a stop as its finish reason, it is a reply of no text: its content
    "" (an empty answer, not one unrecorded)."""
    role, _, content = output.partition(": ")
    if (content not in ("", "None") or _OUT_PREFIX + "0.message.content" in attrs
            or role != attrs.get(_OUT_PREFIX + "0.message.role")):
        return None
    found = [_flat_message(m) for _, m in sorted(_flattened(attrs, _OUT_PREFIX).items())]
    if len(found) == 1 and not found[0].get("tool_calls") \
            and (as_str(attrs.get("llm.finish_reason")) or "").lower() in STOP_REASONS:
        found[0]["content"] = ""  # no calls, and the model stopped: a reply of no text
    return json.dumps(found, ensure_ascii=False)


def _flattened(attrs: Attrs, prefix: str) -> dict[int, dict[str, Any]]:
    """The messages flattened under ``prefix`` (``llm.input_messages.`` or
    ``llm.output_messages.``) by position: their role, content (or its parts,
    ``message.contents.N.message_content.*``: smolagents', BeeAI's), tool call id and name,
    their calls' fields by call position, and AutoGen's function results (``function.N``,
    each a JSON text) by position (``_flat_message`` makes them chat messages)."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        head, sep, field = key[len(prefix):].partition(".message.")
        if not sep:  # AutoGen's function-role message: each result as JSON, ``.function.N``
            head, sep, field = key[len(prefix):].partition(".function.")
            field = "results." + field if sep else ""
        position = ascii_int(head, _POSITION_DIGITS)
        if position is None:
            continue
        msg = found.setdefault(position, {})
        if field in ("role", "content", "tool_call_id", "name"):
            msg[field] = value
        elif field.startswith("tool_calls.") and ".tool_call." in field:
            call_idx, _, part = field[len("tool_calls."):].partition(".tool_call.")
            calls = msg.setdefault("calls", {})
            calls.setdefault(call_idx, {})[part] = value
        elif field.startswith("contents.") and ".message_content." in field:
            part_idx, _, part = field[len("contents."):].partition(".message_content.")
            parts = msg.setdefault("contents", {})
            parts.setdefault(part_idx, {})[part] = value
        elif field.startswith("results."):
            msg.setdefault("results", {})[field[len("results."):]] = value
    return found


def _in_order(by_position: dict[str, Any]) -> list[Any]:
    """The values of a flattened list (its keys the positions as text) in position order."""
    if len(by_position) == 1:
        return list(by_position.values())
    return [v for _, v in sorted(by_position.items(),
                                 key=lambda kv: ascii_int(kv[0], _POSITION_DIGITS) or 0)]


def _content_parts(parts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A message's flattened content parts in order, as typed chat content parts: a text
    part's text; any other part (an image, reasoning) by its type only (an image's URL is
    never read, nor kept: an image inline as a ``data:`` URL by its type and size, what
    ``messages.binary_placeholder`` shows of it)."""
    out: list[dict[str, Any]] = []
    for part in _in_order(parts):
        kind, text = part.get("type"), part.get("text")
        kind = kind if isinstance(kind, str) and kind else "text"
        inline = data_url(part.get("image.image.url"))
        out.append({"type": "text", "text": text} if kind == "text" and isinstance(text, str)
                   else {"type": kind, "mime_type": inline[0], "size_bytes": inline[1]}
                   if inline is not None
                   else {"type": kind})  # reasoning is no text of the message
    return out


def _function_results(results: dict[str, Any]) -> list[dict[str, Any]]:
    """AutoGen's results (``{"name", "content", "call_id", "is_error"}`` as JSON) in order, as
    GenAI ``tool_call_response`` parts: what each call returned, by its id."""
    out = []
    for raw in _in_order(results):
        result = parse_json(raw)
        if isinstance(result, dict) and "content" in result:
            out.append({"type": "tool_call_response", "id": as_str(result.get("call_id")),
                        "response": as_str(result["content"])})
    return out


def _flat_message(fields: dict[str, Any]) -> dict[str, Any]:
    parts = fields.pop("contents", None)
    if parts and "content" not in fields:
        fields["content"] = _content_parts(parts)
    results = fields.pop("results", None)
    if results:
        fields["parts"] = _function_results(results)
    calls = fields.pop("calls", {})
    if calls:
        fields["tool_calls"] = [
            {"id": c.get("id"), "type": "function",
             "function": {"name": c.get("function.name"), "arguments": c.get("function.arguments")}}
            for c in _in_order(calls)]
    return fields


def _managed_names(enclosing: Attrs) -> list[str]:
    """The names of the enclosing agent's managed agents; none when one is not text (not
    understood: which of them a span is cannot be told)."""
    names = []
    i = 0
    while (name := enclosing.get(f"smolagents.managed_agents.{i}.name")) is not None:
        if as_name(name) is None:
            return []
        names.append(name)
        i += 1
    return names


def _agent_name(span: Span, attrs: Attrs, enclosing: Attrs | None) -> str | None:
    name = as_str(attrs.get("agent.name"))
    if agent_name(name):
        return name
    node = as_str(attrs.get("graph.node.id"))  # the agent's node in the agent graph
    if agent_name(node):
        return node
    candidates = _managed_names(enclosing) if enclosing else []
    if len(candidates) == 1:
        return candidates[0]
    head = (as_str(attrs.get("input.value")) or "")[:500]
    for candidate in candidates:
        if f"'{candidate}'" in head or f'"{candidate}"' in head:
            return candidate
    # smolagents' "<agent name>.run" span name: ``agent_names.from_span_name``
    return name or None


# The types a JSON schema names; smolagents' own (``any``, ``image``, ``audio``) are none of
# them: such a parameter is not checked (unknown), never a schema too broken to check.
_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})


def _parameter(schema: Any) -> Any:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, str) and kind not in _JSON_TYPES:
        return {k: v for k, v in schema.items() if k != "type"}
    return schema


def _schema(params: Any) -> Any:
    """``tool.parameters`` as a JSON schema: a schema, or the map of parameter schemas
    (smolagents' ``inputs``, whose own types are dropped: ``_JSON_TYPES``); the call's
    arguments where a processor puts them there (the OpenInference processor over the AI SDK,
    autogen: ``{"city": "Paris"}``) are no schema: unknown ({})."""
    params = parse_json(params)
    if isinstance(params, dict) and "type" not in params and "properties" not in params:
        if not all(isinstance(v, dict | bool) for v in params.values()):
            return {}
        return {"type": "object", "properties": {k: _parameter(v) for k, v in params.items()}}
    return params if params is not None else {}


def _tools(attrs: Attrs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    i = 0
    while (raw := attrs.get(f"llm.tools.{i}.tool.json_schema")) is not None:
        found = tool_definition(raw)
        if not found:  # one not read (cut at a length limit): what was offered is unknown
            return UNREAD_OFFER
        out[found[0]] = found[1]
        i += 1
    if not out and attrs.get("openinference.span.kind") == "LLM":
        raw = attrs.get("input.value")  # Haystack's request: its Tool reprs
        out = offered_tools(raw) if isinstance(raw, str) else out
    names = parse_json(attrs.get("smolagents.tools_names"))
    for tool in names if isinstance(names, list) else ():
        if isinstance(tool, str):
            out.setdefault(tool, {})
    return out


def _described(attrs: Attrs) -> dict[str, Any]:
    """A TOOL span's own tool: ``tool.name`` with ``tool.json_schema`` (or ``tool.parameters``,
    a schema or, as AutoGen records it, the call's arguments)."""
    name = attrs.get("tool.name")
    if not isinstance(name, str) or not name:
        return {}
    json_schema = tool_definition(attrs.get("tool.json_schema"))
    return {name: json_schema[1] if json_schema else _schema(attrs.get("tool.parameters"))}


KEYS = {
    "tool_name": ("tool.name", "tool_call.function.name"),
    "arguments": ("tool_call.function.arguments", "input.value"),
    "result": ("output.value",),
    "input_text": ("input.value",),
    "output_text": ("output.value",),
    "reply": ("llm.output_messages.0.message.content",),
    "tool_calls": ("llm.output_messages.0.message.tool_calls.0.tool_call.function.name",),
    "model": ("llm.model_name",),
    "input_tokens": ("llm.token_count.prompt",),
    "output_tokens": ("llm.token_count.completion",),
    "finish_reasons": ("llm.finish_reason", "output.value"),
    "call_id": ("tool_call.id",),
    "agent_name": ("agent.name", "graph.node.id"),
    "tools": ("llm.tools.0.tool.json_schema", "tool.json_schema", "tool.parameters",
              "smolagents.tools_names"),
}
OPENINFERENCE = Adapter("openinference", _explicit, _implicit, _fill, _agent_name, _tools,
                        KEYS, undefined=undefined_value("openinference.span.kind",
                                                        _OTHER_KINDS | frozenset(_KINDS),
                                                        lambda v: str(v).upper()),
                        described=Described(frozenset(("tool.name",)), _described))
