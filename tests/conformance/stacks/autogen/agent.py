"""autogen: AutoGen AgentChat's ``AssistantAgent`` named weather_agent on autogen-ext's
``OpenAIChatCompletionClient`` pointed at the scripted LLM, get_weather as a function tool,
instrumented by OpenInference's autogen-agentchat instrumentation; autogen-core's own GenAI
spans (invoke_agent, execute_tool) stay on, as they are by default with a tracer provider set.
``max_tool_iterations``: the default (1) ends the run after the first tool round with the tool's
result as the answer; a user who wants the model to answer raises it. Streaming:
``model_client_stream=True``. ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import asyncio
import os
import sys

import common


def main(scenario: str) -> None:
    common.setup()
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    AutogenAgentChatInstrumentor().instrument()
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    body = common.Tool(scenario)

    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return body(city)

    async def run() -> str:
        client = OpenAIChatCompletionClient(model=common.MODEL,
                                            base_url=os.environ["OPENAI_BASE_URL"],
                                            api_key=os.environ["OPENAI_API_KEY"])
        agent = AssistantAgent(name=common.AGENT_NAME, model_client=client, tools=[get_weather],
                               system_message="You are a weather assistant. Use get_weather.",
                               max_tool_iterations=common.MAX_TURNS,
                               model_client_stream=scenario == "streaming")
        if scenario == "multi_agent":  # AgentChat's AgentTool: a coordinator calls it
            from autogen_agentchat.tools import AgentTool
            agent = AssistantAgent(name=common.COORDINATOR, model_client=client,
                                   tools=[AgentTool(agent)], max_tool_iterations=common.MAX_TURNS,
                                   system_message="Ask the weather agent about the weather.")
        if scenario == "conversation":  # one run per user turn (the agent keeps its model
            from openinference.instrumentation import using_session  # context), in
            for question in common.turns():  # OpenInference's session
                with using_session(common.CONVERSATION_ID):
                    result = await agent.run(task=question)
        else:
            result = await agent.run(task=common.prompt(scenario))
        await client.close()
        return str(result.messages[-1].content)

    with common.attached(common.remote_parent(scenario)):
        answer = asyncio.run(run())
    if not answer and scenario != "empty_answer":
        raise RuntimeError("no final answer")
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
