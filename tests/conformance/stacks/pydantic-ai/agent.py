"""pydantic-ai: a framework that emits the GenAI semantic conventions itself: an ``Agent`` with
the ``Instrumentation`` capability with ``InstrumentationSettings(version=6)`` (its newest
data format; this release replaced ``Agent(instrument=...)`` by the capability) and an OpenAI chat
model pointed at the scripted LLM, exported by the OTel SDK. The tool's error is raised as
``ModelRetry``, pydantic-ai's way of telling the model a call failed. In ``multi_agent`` a
coordinator delegates to it through a tool, as pydantic-ai's multi-agent docs show.
``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import asyncio
import os
import sys

import common


def main(scenario: str) -> None:
    common.setup()
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    tool = common.Tool(scenario)

    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        try:
            return tool(city)
        except ValueError as e:
            raise ModelRetry(str(e)) from e

    model = OpenAIChatModel(common.MODEL, provider=OpenAIProvider(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]))
    agent = Agent(model, name=common.AGENT_NAME, tools=[get_weather],
                  instructions="You are a weather assistant. Use get_weather.",
                  capabilities=[Instrumentation(settings=InstrumentationSettings(version=6))])

    if scenario == "multi_agent":  # agent delegation (its docs): a tool of the coordinator
        weather = agent             # runs the weather agent
        agent = Agent(model, name=common.COORDINATOR,
                      instructions="Ask the weather agent about the weather.",
                      capabilities=[Instrumentation(settings=InstrumentationSettings(version=6))])

        @agent.tool_plain
        async def ask_weather_agent(question: str) -> str:
            """Ask the weather agent a weather question."""
            return (await weather.run(question)).output

    async def streamed() -> str:
        async with agent.run_stream(common.prompt(scenario)) as result:
            return "".join([t async for t in result.stream_text(delta=True)])

    if scenario == "conversation":  # a chat: the id given on the first turn, the later
        first, *later = common.turns()  # turns continue its message_history (and inherit it)
        result = agent.run_sync(first, conversation_id=common.CONVERSATION_ID)
        for question in later:
            result = agent.run_sync(question, message_history=result.all_messages())
        common.shutdown()
        return
    with common.attached(common.remote_parent(scenario)):
        if scenario == "streaming":
            answer = asyncio.run(streamed())
        else:
            from pydantic_ai.usage import UsageLimits  # its cap on requests (default 50)
            answer = agent.run_sync(common.prompt(scenario), usage_limits=UsageLimits(
                request_limit=common.MAX_TURNS)).output
    if not answer and scenario != "empty_answer":
        raise RuntimeError("no final answer")
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
