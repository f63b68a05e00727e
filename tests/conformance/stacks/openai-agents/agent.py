"""openai-agents: the OpenAI Agents SDK (Responses API, its default) traced by OpenInference's
openai-agents instrumentation, which turns the SDK's own trace events into OTel spans.
``python agent.py SCENARIO`` (in the stack's venv).

The instrumentor's processor is exclusive (its default): it replaces the SDK's processor that
exports traces to OpenAI, so the run makes no call but to the scripted LLM."""

from __future__ import annotations

import asyncio
import sys

import common


async def conversation(agent: object) -> str:
    """One run per user turn (each its own trace), grouped as the SDK's docs say
    (``RunConfig.group_id``, "e.g. a chat thread ID") and in OpenInference's session
    (``using_session``: the instrumentation exports no group_id)."""
    from agents import RunConfig, Runner
    from openinference.instrumentation import using_session

    answer = ""
    for question in common.turns():
        with using_session(common.CONVERSATION_ID):
            result = await Runner.run(agent, question, max_turns=common.MAX_TURNS,
                                      run_config=RunConfig(group_id=common.CONVERSATION_ID))
        answer = str(result.final_output)
    return answer


async def run(agent: object, scenario: str) -> str:
    from agents import Runner

    if scenario == "conversation":
        return await conversation(agent)
    if scenario != "streaming":
        result = await Runner.run(agent, common.prompt(scenario), max_turns=common.MAX_TURNS)
        return str(result.final_output)
    streamed = Runner.run_streamed(agent, common.prompt(scenario), max_turns=common.MAX_TURNS)
    async for _ in streamed.stream_events():
        pass
    return str(streamed.final_output)


def main(scenario: str) -> None:
    common.setup()
    from agents import Agent, function_tool
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(exclusive_processor=True)
    tool = common.Tool(scenario)

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return tool(city)

    agent = Agent(name=common.AGENT_NAME, model=common.MODEL, tools=[get_weather],
                  instructions="You are a weather assistant. Use get_weather.")
    if scenario == "multi_agent":  # the SDK's hand-off: transfer_to_weather_agent
        agent = Agent(name=common.COORDINATOR, model=common.MODEL, handoffs=[agent],
                      instructions="Hand weather questions to the weather agent.")
    with common.attached(common.remote_parent(scenario)):
        answer = asyncio.run(run(agent, scenario))
    if not answer and scenario != "empty_answer":
        raise RuntimeError("no final answer")
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
