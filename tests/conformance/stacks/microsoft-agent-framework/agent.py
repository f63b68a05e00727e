"""microsoft-agent-framework: Microsoft Agent Framework (``agent-framework-core`` with
``agent-framework-openai``): an ``Agent`` with get_weather as a Python function tool, its
model client the Chat Completions one pointed at the scripted LLM, the framework's own
OpenTelemetry instrumentation on (``enable_instrumentation(enable_sensitive_data=True)``) on
the global providers; in ``multi_agent`` a coordinator calls it through ``Agent.as_tool``.
``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import asyncio
import os
import sys

import common


def main(scenario: str) -> None:
    common.setup(logs=True)
    from agent_framework import Agent
    from agent_framework.observability import enable_instrumentation
    from agent_framework.openai import OpenAIChatCompletionClient

    enable_instrumentation(enable_sensitive_data=True)
    body = common.Tool(scenario)

    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return body(city)

    client = OpenAIChatCompletionClient(model=common.MODEL, api_key=os.environ["OPENAI_API_KEY"],
                                        base_url=os.environ["OPENAI_BASE_URL"])
    # its cap on model round trips in one run (default 40)
    client.function_invocation_configuration["max_iterations"] = common.MAX_TURNS
    agent = Agent(client, "You are a weather assistant. Use get_weather.",
                  name=common.AGENT_NAME, tools=[get_weather])
    if scenario == "multi_agent":  # the framework's agent-as-a-tool: a coordinator calls it
        ask = agent.as_tool(name="ask_weather_agent",
                            description="Ask the weather agent a weather question.")
        agent = Agent(client, "Ask the weather agent about the weather.",
                      name=common.COORDINATOR, tools=[ask])

    async def run() -> None:
        if scenario == "conversation":  # one session: the agent keeps the earlier turns
            session = agent.create_session()
            for question in common.turns():
                if not (await agent.run(question, session=session)).text:
                    raise RuntimeError("a turn without an answer")
            return
        with common.attached(common.remote_parent(scenario)):
            if scenario == "streaming":
                answer = "".join([u.text async for u in agent.run(
                    common.prompt(scenario), stream=True)])
            else:
                answer = (await agent.run(common.prompt(scenario))).text
        if not answer and scenario != "empty_answer":
            raise RuntimeError("no final answer")

    asyncio.run(run())
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
