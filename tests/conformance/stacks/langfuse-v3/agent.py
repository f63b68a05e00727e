"""langfuse-v3: the Langfuse Python SDK v3 (built on OpenTelemetry) as its docs show: the
agent and its tool as ``@observe(as_type="agent" | "tool")`` functions, the LLM calls through
Langfuse's OpenAI drop-in (``from langfuse.openai import OpenAI``: generation observations),
exported by the SDK's own OTLP exporter to ``{host}/api/public/otel/v1/traces`` (``host`` is
the capture server here). ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import os
import sys

import common


def main(scenario: str) -> None:
    from langfuse import Langfuse, observe, propagate_attributes
    from langfuse.openai import OpenAI

    langfuse = Langfuse(public_key="pk-lf-conformance", secret_key="sk-lf-conformance",
                        host=os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"])
    body = common.Tool(scenario)

    @observe(name="get_weather", as_type="tool")
    def get_weather(city: str) -> str:
        return body(city)

    @observe(name=common.AGENT_NAME, as_type="agent")
    def weather_agent(question: str) -> str:
        if scenario == "conversation":  # as Langfuse's docs set a session: on the turn's
            with propagate_attributes(session_id=common.CONVERSATION_ID):  # span and under it
                return common.chat_loop(OpenAI(), scenario,
                                        lambda call: get_weather(**common.arguments(call)),
                                        question)
        return common.chat_loop(OpenAI(), scenario,
                                lambda call: get_weather(**common.arguments(call)), question)

    @observe(name=common.DELEGATE_TOOL_NAME, as_type="tool")
    def ask_weather_agent(question: str) -> str:
        return weather_agent(question)

    @observe(name=common.COORDINATOR, as_type="agent")
    def triage_agent(question: str) -> str:  # multi_agent: calls the weather agent as a tool
        return common.delegating_loop(OpenAI(), scenario, ask_weather_agent, question)

    if scenario == "conversation":  # one run (trace) per user turn
        for question in common.turns():
            weather_agent(question)
        langfuse.shutdown()
        return
    with common.attached(common.remote_parent(scenario)):
        (triage_agent if scenario == "multi_agent" else weather_agent)(common.prompt(scenario))
    langfuse.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
