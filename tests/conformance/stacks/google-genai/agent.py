"""google-genai: Google's GenAI SDK (``google-genai``) pointed at the scripted LLM's Gemini API,
get_weather passed as a Python function (the SDK's automatic function calling runs the loop:
it calls the tool and feeds its result, or ``{"error": ...}`` when it raises, back to the
model), instrumented by the official OpenTelemetry Google GenAI instrumentation
(``GoogleGenAiSdkInstrumentor``, latest experimental GenAI semconv, content on spans), inside
a hand-made ``invoke_agent weather_agent`` span as a user of the conventions writes it. The
streaming scenario uses ``generate_content_stream``. ``python agent.py SCENARIO``."""

from __future__ import annotations

import os
import sys
from typing import Any

import common

MODEL = "gemini-2.0-flash"


def main(scenario: str) -> None:
    common.setup(logs=True)
    from opentelemetry.instrumentation.google_genai import GoogleGenAiSdkInstrumentor

    GoogleGenAiSdkInstrumentor().instrument()
    from google import genai
    from google.genai import types
    from opentelemetry import trace

    body = common.Tool(scenario)

    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return body(city)

    client = genai.Client(api_key=os.environ["GOOGLE_API_KEY"], http_options=types.HttpOptions(
        base_url=os.environ["GOOGLE_GEMINI_BASE_URL"]))
    config = types.GenerateContentConfig(
        system_instruction="You are a weather assistant. Use get_weather.", tools=[get_weather],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(
            maximum_remote_calls=common.MAX_TURNS))
    tracer = trace.get_tracer("conformance.weather_agent")
    if scenario == "conversation":
        _conversation(client, config, tracer)
        common.shutdown()
        return
    if scenario == "multi_agent":
        _coordinator(client, config, tracer)
        common.shutdown()
        return
    with tracer.start_as_current_span(
            f"invoke_agent {common.AGENT_NAME}", context=common.remote_parent(scenario),
            attributes={"gen_ai.operation.name": "invoke_agent",
                        "gen_ai.provider.name": "gcp.gemini",
                        "gen_ai.agent.name": common.AGENT_NAME}):
        if scenario == "streaming":
            answer = "".join(c.text or "" for c in client.models.generate_content_stream(
                model=MODEL, contents=common.prompt(scenario), config=config))
        else:
            answer = client.models.generate_content(
                model=MODEL, contents=common.prompt(scenario), config=config).text or ""
    # at maximum_remote_calls: the pending call; empty_answer: nothing
    if not answer and not common.LIMITED and scenario != "empty_answer":
        raise RuntimeError("no final answer")
    common.shutdown()


def _agent(tracer: Any, name: str) -> Any:
    return tracer.start_as_current_span(
        f"invoke_agent {name}", attributes={"gen_ai.operation.name": "invoke_agent",
                                            "gen_ai.provider.name": "gcp.gemini",
                                            "gen_ai.agent.name": name})


def _coordinator(client: Any, config: Any, tracer: Any) -> None:
    """multi_agent: a coordinator's invoke_agent whose one function runs the weather agent's
    (the SDK's automatic function calling runs both loops)."""
    from google.genai import types

    def ask_weather_agent(question: str) -> str:
        """Ask the weather agent a weather question."""
        with _agent(tracer, common.AGENT_NAME):
            return client.models.generate_content(model=MODEL, contents=question,
                                                  config=config).text or ""

    coordinator = types.GenerateContentConfig(
        system_instruction="Ask the weather agent about the weather.", tools=[ask_weather_agent],
        automatic_function_calling=config.automatic_function_calling)
    with _agent(tracer, common.COORDINATOR):
        answer = client.models.generate_content(model=MODEL, contents=common.prompt(
            "multi_agent"), config=coordinator).text
    if not answer:
        raise RuntimeError("no final answer")


def _conversation(client: Any, config: Any, tracer: Any) -> None:
    """One chat (``client.chats``: the SDK keeps the history, function calls included), each
    user turn its own invoke_agent span carrying gen_ai.conversation.id."""
    chat = client.chats.create(model=MODEL, config=config)
    for question in common.turns():
        with tracer.start_as_current_span(
                f"invoke_agent {common.AGENT_NAME}",
                attributes={"gen_ai.operation.name": "invoke_agent",
                            "gen_ai.provider.name": "gcp.gemini",
                            "gen_ai.agent.name": common.AGENT_NAME,
                            "gen_ai.conversation.id": common.CONVERSATION_ID}):
            if not chat.send_message(question).text:
                raise RuntimeError("a turn without an answer")


if __name__ == "__main__":
    main(sys.argv[1])
