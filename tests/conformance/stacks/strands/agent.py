"""strands: the Strands Agents SDK, which emits the GenAI semantic conventions itself
(``StrandsTelemetry().setup_otlp_exporter()``, its documented set-up), an ``Agent`` named
weather_agent on its ``OpenAIModel`` pointed at the scripted LLM, a ``@tool`` get_weather.
Strands' default convention: the messages as span events (``gen_ai.user.message``,
``gen_ai.choice``, ``gen_ai.tool.message``), not attributes. Its model always streams; the
streaming scenario drives the agent with ``stream_async`` (what a user streaming to a UI does).
In ``multi_agent`` a coordinator calls it as a tool (Strands' "agents as tools").
``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import asyncio
import os
import sys

import common


def main(scenario: str) -> None:
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel
    from strands.telemetry import StrandsTelemetry

    StrandsTelemetry().setup_otlp_exporter()
    body = common.Tool(scenario)

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return body(city)

    model = OpenAIModel(client_args={"api_key": os.environ["OPENAI_API_KEY"],
                                     "base_url": os.environ["OPENAI_BASE_URL"]},
                        model_id=common.MODEL)
    # The conversation scenario: one Agent (it keeps the earlier turns as history), called
    # once per user turn, the session in trace_attributes as Strands' docs show.
    session = {"session.id": common.CONVERSATION_ID} if scenario == "conversation" else None
    agent = Agent(model=model, tools=[get_weather], name=common.AGENT_NAME,
                  system_prompt="You are a weather assistant. Use get_weather.",
                  callback_handler=None, trace_attributes=session)
    if scenario == "multi_agent":  # Strands' "agents as tools": a tool that runs the agent
        weather = agent

        @tool
        def ask_weather_agent(question: str) -> str:
            """Ask the weather agent a weather question."""
            return str(weather(question))

        agent = Agent(model=model, tools=[ask_weather_agent], name=common.COORDINATOR,
                      system_prompt="Ask the weather agent about the weather.",
                      callback_handler=None)
    if scenario == "conversation":
        answers = [str(agent(question)) for question in common.turns()]
        if not all(a.strip() for a in answers):
            raise RuntimeError("a turn without an answer")
        common.shutdown()
        return

    async def streamed() -> str:
        text = ""
        async for event in agent.stream_async(common.prompt(scenario)):
            text += event.get("data", "") if isinstance(event.get("data"), str) else ""
        return text

    with common.attached(common.remote_parent(scenario)):
        if scenario == "streaming":
            answer = asyncio.run(streamed())
        else:
            answer = str(agent(common.prompt(scenario)))
    if not answer.strip() and scenario != "empty_answer":
        raise RuntimeError("no final answer")
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
