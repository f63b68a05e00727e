"""smolagents: smolagents' ``ToolCallingAgent`` (named weather_agent) over
``OpenAIServerModel``, instrumented by OpenInference's smolagents instrumentation, as its docs
show; in ``multi_agent`` the managed agent of a coordinator of the same kind.
``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import os
import sys

import common

# Far above what any scenario needs (distinct: 6 tool steps and the final answer).
MAX_STEPS = common.MAX_TURNS if common.LIMITED else 20


def main(scenario: str) -> None:
    common.setup()
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    SmolagentsInstrumentor().instrument()
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    body = common.Tool(scenario)

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city to get the weather for.
        """
        return body(city)

    model = OpenAIServerModel(model_id=common.MODEL, api_base=os.environ["OPENAI_BASE_URL"],
                              api_key=os.environ["OPENAI_API_KEY"])
    agent = ToolCallingAgent(tools=[get_weather], model=model, name=common.AGENT_NAME,
                             description="Answers weather questions.", max_steps=MAX_STEPS,
                             stream_outputs=scenario == "streaming", verbosity_level=0)
    if scenario == "multi_agent":  # smolagents' managed agents: the manager calls it as a tool
        agent = ToolCallingAgent(tools=[], model=model, managed_agents=[agent],
                                 name=common.COORDINATOR, max_steps=MAX_STEPS,
                                 verbosity_level=0)
    if scenario == "conversation":  # one run per user turn, the agent keeping its memory
        from openinference.instrumentation import using_session  # (reset=False), in
        for number, question in enumerate(common.turns()):  # OpenInference's session
            with using_session(common.CONVERSATION_ID):
                agent.run(question, reset=number == 0)
        common.shutdown()
        return
    with common.attached(common.remote_parent(scenario)):
        agent.run(common.prompt(scenario))
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
