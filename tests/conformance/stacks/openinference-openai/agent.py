"""openinference-openai: OpenInference's OpenAI instrumentation, and the agent and tool spans
made with OpenInference's own tracer decorators (``@tracer.agent``, ``@tracer.tool``), as its
docs show. ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import sys

import common
import scenarios


def main(scenario: str) -> None:
    from openinference.instrumentation import TracerProvider

    common.setup(provider_class=TracerProvider)
    from openai import OpenAI
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry import context, trace

    OpenAIInstrumentor().instrument()
    tracer = trace.get_tracer(__name__)  # an OITracer: the provider is OpenInference's
    tool = common.Tool(scenario)

    @tracer.tool(name="get_weather", description=scenarios.TOOL_DESCRIPTION,
                 parameters=scenarios.TOOL_PARAMETERS)
    def get_weather(city: str) -> str:
        return tool(city)

    @tracer.agent(name=common.AGENT_NAME)
    def weather_agent(question: str) -> str:
        return common.chat_loop(OpenAI(), scenario,
                                lambda call: get_weather(**common.arguments(call)), question)

    @tracer.tool(name=common.DELEGATE_TOOL_NAME, description="Ask the weather agent.",
                 parameters=common.DELEGATE_TOOL["function"]["parameters"])
    def ask_weather_agent(question: str) -> str:
        return weather_agent(question)

    @tracer.agent(name=common.COORDINATOR)
    def triage_agent(question: str) -> str:  # multi_agent: calls the weather agent as a tool
        return common.delegating_loop(OpenAI(), scenario, ask_weather_agent, question)

    if scenario == "conversation":  # one run per user turn, in the session (using_session)
        from openinference.instrumentation import using_session
        for question in common.turns():
            with using_session(common.CONVERSATION_ID):
                weather_agent(question)
        common.shutdown()
        return
    parent = common.remote_parent(scenario)
    token = context.attach(parent) if parent is not None else None
    (triage_agent if scenario == "multi_agent" else weather_agent)(common.prompt(scenario))
    if token is not None:
        context.detach(token)
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
