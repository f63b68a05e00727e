"""beeai: a BeeAI ``RequirementAgent`` named weather_agent on BeeAI's ``OpenAIChatModel``
(LiteLLM underneath) pointed at the scripted LLM, get_weather as a ``@tool`` function,
instrumented by OpenInference's BeeAI instrumentation (``BeeAIInstrumentor``), as its docs show.
The agent ends by calling its final_answer tool (the scripted LLM does so when that tool is
offered). The streaming scenario gives the model ``ChatModelParameters(stream=True)``; the parallel
one ``allow_parallel_tool_calls=True`` (BeeAI's setting, off by default).
``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import asyncio
import os
import sys

import common


async def run(scenario: str) -> str:
    from beeai_framework.adapters.openai import OpenAIChatModel
    from beeai_framework.agents.requirement import RequirementAgent
    from beeai_framework.backend import ChatModelParameters
    from beeai_framework.tools import tool

    body = common.Tool(scenario)

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: the city
        """
        return body(city)

    llm = OpenAIChatModel(common.MODEL, api_key=os.environ["OPENAI_API_KEY"],
                          base_url=os.environ["OPENAI_BASE_URL"],
                          parameters=ChatModelParameters(stream=scenario == "streaming"),
                          # a base_url makes BeeAI assume no tool_choice "required" (and force
                          # tool calls through a JSON response format): this server has it
                          tool_choice_support={"required", "none", "single", "auto"},
                          # off by default: a reply of several calls fails the run
                          allow_parallel_tool_calls=scenario == "parallel")
    agent = RequirementAgent(llm=llm, tools=[get_weather], name=common.AGENT_NAME,
                             instructions="You are a weather assistant. Use get_weather.")
    if scenario == "multi_agent":  # BeeAI's HandoffTool: the coordinator hands off the task
        from beeai_framework.tools.handoff import HandoffTool
        ask = HandoffTool(agent, name="ask_weather_agent",
                          description="Ask the weather agent a weather question.")
        agent = RequirementAgent(llm=llm, tools=[ask], name=common.COORDINATOR,
                                 instructions="Ask the weather agent about the weather.")
    if scenario == "conversation":  # one run per user turn (the agent keeps its memory),
        from openinference.instrumentation import using_session  # in OpenInference's session
        for question in common.turns():
            with using_session(common.CONVERSATION_ID):
                out = await agent.run(question)
        return str(out.last_message.text or "")
    with common.attached(common.remote_parent(scenario)):
        # its cap on iterations (default 20; the run's error at it)
        out = await agent.run(common.prompt(scenario), max_iterations=common.MAX_TURNS)
    return str(out.last_message.text or "")


def main(scenario: str) -> None:
    common.setup()
    from openinference.instrumentation.beeai import BeeAIInstrumentor

    BeeAIInstrumentor().instrument()
    if not asyncio.run(run(scenario)) and scenario != "empty_answer":
        raise RuntimeError("no final answer")
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
