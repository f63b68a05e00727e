"""openllmetry-openai: Traceloop's SDK (``Traceloop.init``, ``@agent`` / ``@tool``) with its
OpenAI instrumentation, exporting to the collector as its docs show for a self-hosted backend.
``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import os
import sys

import common


def main(scenario: str) -> None:
    from openai import OpenAI
    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import agent, tool

    Traceloop.init(app_name=os.environ["OTEL_SERVICE_NAME"], telemetry_enabled=False,
                   api_endpoint=os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"])
    body = common.Tool(scenario)

    @tool(name="get_weather")
    def get_weather(city: str) -> str:
        return body(city)

    @agent(name=common.AGENT_NAME)
    def weather_agent(question: str) -> str:
        return common.chat_loop(OpenAI(), scenario,
                                lambda call: get_weather(**common.arguments(call)), question)

    @tool(name=common.DELEGATE_TOOL_NAME)
    def ask_weather_agent(question: str) -> str:
        return weather_agent(question)

    @agent(name=common.COORDINATOR)
    def triage_agent(question: str) -> str:  # multi_agent: calls the weather agent as a tool
        return common.delegating_loop(OpenAI(), scenario, ask_weather_agent, question)

    if scenario == "conversation":  # one run per user turn, the session as Traceloop's docs
        for question in common.turns():  # associate it: an association property
            Traceloop.set_association_properties({"session_id": common.CONVERSATION_ID})
            weather_agent(question)
        common.shutdown()
        return
    with common.attached(common.remote_parent(scenario)):
        (triage_agent if scenario == "multi_agent" else weather_agent)(common.prompt(scenario))
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
