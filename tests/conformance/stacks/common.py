"""Agent-side code shared by the stacks' agent programs (runs in a stack's venv, not otel-eval's).

- ``setup()``: the OTel SDK as a user sets it up: TracerProvider + BatchSpanProcessor + the
  OTLP/HTTP protobuf span exporter, and (``logs=True``) a LoggerProvider + the OTLP log
  exporter for stacks that emit GenAI events as log records. Endpoint, protocol and service
  name come from the standard OTEL_* environment set by ``record.py``.
- ``prompt()``, ``OPENAI_TOOL``: the user prompt with its ``[scenario:NAME]`` marker and the
  get_weather tool as offered to the LLM.
- ``Tool``: the tool body; raises for Atlantis, and in ``non_terminating`` flushes telemetry
  and ``os._exit(0)``s on its 3rd call (a run that never ends: its open spans are never sent).
- ``remote_parent()``: the context extracted from a fixed W3C traceparent (remote_parent only).
- ``chat_loop()``: a small agent loop with the official ``openai`` client (ask with the tool
  offered, run requested tools, feed results back, until a final answer), streaming in the
  ``streaming`` scenario; ``messages_loop()``: the same with the official ``anthropic`` client
  (Messages API: ``tool_use`` blocks answered by ``tool_result`` blocks).
- ``turns()``: the conversation scenario's user prompts; each stack's agent runs one turn per
  prompt (each its own trace) under the conversation id its users set (``CONVERSATION_ID``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import scenarios

AGENT_NAME = scenarios.WEATHER_AGENT
COORDINATOR = scenarios.COORDINATOR  # the multi_agent scenario's first agent
MODEL = "gpt-4o-mini"
ANTHROPIC_MODEL = "claude-3-5-haiku-20241022"
# Bounds every loop (the scripted scenarios need at most 7); in max_turns, the scenario run as
# ``agent.py max_turns``, the cap the stack's framework is given (scenarios.LIMITED_TURNS).
LIMITED = sys.argv[1:2] == ["max_turns"]
MAX_TURNS = scenarios.LIMITED_TURNS if LIMITED else 12
CONVERSATION_ID = scenarios.CONVERSATION_ID
OPENAI_TOOL = {"type": "function",
               "function": {"name": scenarios.TOOL_NAME, "description": scenarios.TOOL_DESCRIPTION,
                            "parameters": scenarios.TOOL_PARAMETERS}}
_providers: list[Any] = []


def setup(logs: bool = False, provider_class: Any = None) -> None:
    """Install the global tracer (and logger) providers exporting OTLP/HTTP protobuf;
    ``provider_class``: a TracerProvider subclass a stack's docs tell users to use."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()  # service.name from OTEL_SERVICE_NAME
    tp = (provider_class or TracerProvider)(resource=resource)
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(tp)
    _providers.append(tp)
    if logs:
        from opentelemetry._logs import set_logger_provider
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

        lp = LoggerProvider(resource=resource)
        lp.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
        set_logger_provider(lp)
        _providers.append(lp)
        try:  # the Events API, still used by some instrumentations
            from opentelemetry._events import set_event_logger_provider
            from opentelemetry.sdk._events import EventLoggerProvider
            set_event_logger_provider(EventLoggerProvider(lp))
        except ImportError:
            pass


def _installed() -> list[Any]:
    """The providers ``setup()`` made, else the global ones a stack's SDK installed."""
    if _providers:
        return _providers
    from opentelemetry import trace
    from opentelemetry._logs import get_logger_provider
    return [p for p in (trace.get_tracer_provider(), get_logger_provider())
            if hasattr(p, "force_flush")]


def flush() -> None:
    for p in _installed():
        p.force_flush()


def shutdown() -> None:
    for p in _installed():
        p.shutdown()


def prompt(scenario: str) -> str:
    return scenarios.prompt(scenario)


def turns() -> list[str]:
    """The user prompts of the conversation scenario, one per turn, in order."""
    return [scenarios.turn_prompt(n) for n in range(1, len(scenarios.CONVERSATION_CITIES) + 1)]


class Tool:
    """The get_weather body with the scenarios' side effects; ``calls`` counts invocations."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.calls = 0

    def __call__(self, city: str) -> str:
        self.calls += 1
        if self.scenario == "non_terminating" and self.calls == 3:
            flush()  # what was already finished reaches the collector; the open spans never do
            os._exit(0)
        return scenarios.weather(city)


def remote_parent(scenario: str) -> Any:
    """The context to run the agent in: extracted from a traceparent in remote_parent."""
    if scenario != "remote_parent":
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    return TraceContextTextMapPropagator().extract({"traceparent": scenarios.TRACEPARENT})


def ask(client: Any, messages: list[dict[str, Any]], stream: bool,
        tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One chat completion -> the assistant message as a dict (streams are accumulated);
    ``tools``: what is offered (default get_weather as ``OPENAI_TOOL``)."""
    kwargs: dict[str, Any] = {"model": MODEL, "messages": messages,
                              "tools": tools or [OPENAI_TOOL]}
    if not stream:
        msg = client.chat.completions.create(**kwargs).choices[0].message
        return msg.model_dump(exclude_none=True)
    content, calls = "", {}
    for chunk in client.chat.completions.create(**kwargs, stream=True,
                                                stream_options={"include_usage": True}):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for d in choice.delta.tool_calls or []:
                c = calls.setdefault(d.index, {"id": "", "type": "function",
                                               "function": {"name": "", "arguments": ""}})
                c["id"] += d.id or ""
                if d.function is not None:
                    c["function"]["name"] += d.function.name or ""
                    c["function"]["arguments"] += d.function.arguments or ""
    msg: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    return msg


def _run_offered(name: str, offered: set[str], run_tool: Callable[[Any], str], call: Any) -> str:
    """A hand-made loop's tool lookup: a call of a tool it does not have is an error the
    model is sent back (no tool runs), as ``tools[name]`` in a user's loop fails."""
    if name not in offered:
        raise LookupError(f"unknown tool: {name}")
    return run_tool(call)


class TurnLimitError(RuntimeError):
    """A hand-made loop's cap: what a user's own loop raises at its last turn."""

    def __init__(self, turns: int) -> None:
        super().__init__(f"Reached max turns ({turns}) without a final answer")


def chat_loop(client: Any, scenario: str, run_tool: Callable[[dict[str, Any]], str],
              question: str | None = None, tools: list[dict[str, Any]] | None = None,
              system: str = "You are a weather assistant. Use get_weather.") -> str:
    """Run the agent to its final answer. ``run_tool(call)`` runs one requested tool call
    (an OpenAI tool-call dict) and returns its result; an exception it raises is fed back to
    the LLM as the tool's result, as agent frameworks do. ``question``: the user's prompt
    (default ``prompt(scenario)``); ``tools``: what is offered (default get_weather)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": question or prompt(scenario)}]
    for _ in range(MAX_TURNS):
        msg = ask(client, messages, stream=scenario == "streaming", tools=tools)
        messages.append(msg)
        if not msg.get("tool_calls"):
            return str(msg.get("content") or "")
        offered = {t["function"]["name"] for t in tools or [OPENAI_TOOL]}
        for call in msg["tool_calls"]:
            try:
                result = _run_offered(call["function"]["name"], offered, run_tool, call)
            except Exception as e:
                result = f"Error: {e}"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise TurnLimitError(MAX_TURNS)


# The multi_agent scenario's coordinator offers this: a tool that runs the weather agent.
DELEGATE_TOOL_NAME = "ask_weather_agent"
DELEGATE_TOOL = {"type": "function", "function": {
    "name": DELEGATE_TOOL_NAME, "description": "Ask the weather agent a weather question.",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}},
                   "required": ["question"]}}}
ANTHROPIC_TOOL = {"name": scenarios.TOOL_NAME, "description": scenarios.TOOL_DESCRIPTION,
                  "input_schema": scenarios.TOOL_PARAMETERS}
COORDINATOR_SYSTEM = "Ask the weather agent about the weather."


def delegating_loop(client: Any, scenario: str, ask_weather_agent: Callable[..., str],
                    question: str | None = None) -> str:
    """The multi_agent coordinator's loop (chat completions): ``DELEGATE_TOOL`` offered, each
    call run as ``ask_weather_agent(question=...)`` (the weather agent called as a tool)."""
    return chat_loop(client, scenario, lambda call: ask_weather_agent(**arguments(call)),
                     question, tools=[DELEGATE_TOOL], system=COORDINATOR_SYSTEM)


def delegating_messages_loop(client: Any, scenario: str, ask_weather_agent: Callable[..., str],
                             question: str | None = None) -> str:
    """``delegating_loop`` on the Anthropic Messages API."""
    fn = DELEGATE_TOOL["function"]
    tool = {"name": fn["name"], "description": fn["description"],
            "input_schema": fn["parameters"]}
    return messages_loop(client, scenario, lambda block: ask_weather_agent(**block.input),
                         question, tools=[tool], system=COORDINATOR_SYSTEM)


def messages_loop(client: Any, scenario: str, run_tool: Callable[[Any], str],
                  question: str | None = None, tools: list[dict[str, Any]] | None = None,
                  system: str = "You are a weather assistant. Use get_weather.") -> str:
    """``chat_loop`` on the Anthropic Messages API: ``run_tool(block)`` runs one ``tool_use``
    block; what it raises goes back as a ``tool_result`` with ``is_error``. Streams (the SDK's
    ``messages.stream`` helper) in ``streaming``."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": question or prompt(scenario)}]
    kwargs: dict[str, Any] = {"model": ANTHROPIC_MODEL, "max_tokens": 1024, "system": system,
                              "tools": tools or [ANTHROPIC_TOOL]}
    for _ in range(MAX_TURNS):
        if scenario == "streaming":
            with client.messages.stream(messages=messages, **kwargs) as stream:
                msg = stream.get_final_message()
        else:
            msg = client.messages.create(messages=messages, **kwargs)
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in msg.content]})
        if msg.stop_reason != "tool_use":
            return "".join(b.text for b in msg.content if b.type == "text")
        results = []
        offered = {t["name"] for t in kwargs["tools"]}
        for block in msg.content:
            if block.type != "tool_use":
                continue
            try:
                result, failed = _run_offered(block.name, offered, run_tool, block), False
            except Exception as e:
                result, failed = f"Error: {e}", True
            results.append({"type": "tool_result", "tool_use_id": block.id, "content": result,
                            "is_error": failed})
        messages.append({"role": "user", "content": results})
    raise TurnLimitError(MAX_TURNS)


def arguments(call: dict[str, Any]) -> dict[str, Any]:
    return json.loads(call["function"]["arguments"] or "{}")


def genai_agent(scenario: str, provider_attribute: str, question: str | None = None,
                conversation_id: str | None = None, client: Any = None) -> None:
    """The agent loop with hand-made GenAI spans, as a user of the semantic conventions writes
    them: ``invoke_agent weather_agent`` around the loop and ``execute_tool get_weather`` per
    call with the tool name and ``gen_ai.tool.call.id`` but, as many users do, no arguments.
    ``provider_attribute`` is ``gen_ai.system`` (semconv 1.30) or ``gen_ai.provider.name``;
    ``question`` the user's prompt; ``conversation_id`` goes on the invoke_agent span as
    ``gen_ai.conversation.id``; ``client``: what the loop calls (default the ``openai``
    client). In ``multi_agent`` an ``invoke_agent triage_agent`` runs its own loop offering
    ``ask_weather_agent``, whose ``execute_tool`` span runs the weather agent's."""
    from opentelemetry import trace

    tracer = trace.get_tracer("conformance.weather_agent")
    tool = Tool(scenario)

    def run_tool(call: dict[str, Any]) -> str:
        with tracer.start_as_current_span("execute_tool get_weather", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.type": "function", "gen_ai.tool.call.id": call["id"]}):
            return tool(**arguments(call))

    if client is None:
        from openai import OpenAI
        client = OpenAI()

    def invoke(name: str, run: Callable[[], str]) -> str:
        attributes = {"gen_ai.operation.name": "invoke_agent", provider_attribute: "openai",
                      "gen_ai.agent.name": name}
        if conversation_id is not None:
            attributes["gen_ai.conversation.id"] = conversation_id
        with tracer.start_as_current_span(f"invoke_agent {name}", attributes=attributes):
            return run()

    def weather_agent(asked: str | None = None) -> str:
        return invoke(AGENT_NAME, lambda: chat_loop(client, scenario, run_tool, asked))

    def delegate(call: dict[str, Any]) -> str:
        with tracer.start_as_current_span(f"execute_tool {DELEGATE_TOOL_NAME}", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": DELEGATE_TOOL_NAME,
                "gen_ai.tool.type": "function", "gen_ai.tool.call.id": call["id"]}):
            return weather_agent(arguments(call)["question"])

    with attached(remote_parent(scenario)):
        if scenario != "multi_agent":
            weather_agent(question)
            return
        invoke(COORDINATOR, lambda: chat_loop(  # the weather agent called as a tool
            client, scenario, delegate, tools=[DELEGATE_TOOL], system=COORDINATOR_SYSTEM))


@contextlib.contextmanager
def attached(ctx: Any) -> Iterator[None]:
    """Run the block in ``ctx`` (the remote parent) when there is one."""
    from opentelemetry import context
    token = context.attach(ctx) if ctx is not None else None
    try:
        yield
    finally:
        if token is not None:
            context.detach(token)
