"""openinference-anthropic: OpenInference's Anthropic instrumentation, and the agent and tool
spans made with OpenInference's own tracer decorators (``@tracer.agent``, ``@tracer.tool``), as
its docs show; the agent loop on the official ``anthropic`` client (Messages API).
``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import sys

import common
import scenarios


def main(scenario: str) -> None:
    from openinference.instrumentation import TracerProvider

    common.setup(provider_class=TracerProvider)
    from anthropic import Anthropic
    from openinference.instrumentation.anthropic import AnthropicInstrumentor
    from opentelemetry import trace

    AnthropicInstrumentor().instrument()
    tracer = trace.get_tracer(__name__)  # an OITracer: the provider is OpenInference's
    tool = common.Tool(scenario)

    @tracer.tool(name="get_weather", description=scenarios.TOOL_DESCRIPTION,
                 parameters=scenarios.TOOL_PARAMETERS)
    def get_weather(city: str) -> str:
        return tool(city)

    @tracer.agent(name=common.AGENT_NAME)
    def weather_agent(question: str) -> str:
        return common.messages_loop(Anthropic(max_retries=0), scenario,
                                    lambda block: get_weather(**block.input), question)

    @tracer.tool(name=common.DELEGATE_TOOL_NAME, description="Ask the weather agent.",
                 parameters=common.DELEGATE_TOOL["function"]["parameters"])
    def ask_weather_agent(question: str) -> str:
        return weather_agent(question)

    @tracer.agent(name=common.COORDINATOR)
    def triage_agent(question: str) -> str:  # multi_agent: calls the weather agent as a tool
        return common.delegating_messages_loop(Anthropic(max_retries=0), scenario,
                                               ask_weather_agent, question)

    if scenario == "conversation":  # one run per user turn, in the session (using_session)
        from openinference.instrumentation import using_session
        for question in common.turns():
            with using_session(common.CONVERSATION_ID):
                weather_agent(question)
        common.shutdown()
        return

    with common.attached(common.remote_parent(scenario)):
        (triage_agent if scenario == "multi_agent" else weather_agent)(common.prompt(scenario))
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
