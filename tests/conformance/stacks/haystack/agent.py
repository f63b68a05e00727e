"""haystack: a Haystack ``Agent`` (haystack.components.agents) added to a ``Pipeline`` as the
component weather_agent, on ``OpenAIChatGenerator`` pointed at the scripted LLM, get_weather as
a ``haystack.tools.Tool`` with its JSON schema, instrumented by OpenInference's Haystack
instrumentation (``HaystackInstrumentor``), as Phoenix's docs show. The streaming scenario gives
the generator a ``streaming_callback``. ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import os
import sys

import common
import scenarios


def main(scenario: str) -> None:
    # A script's imports first, then the instrumentor: it wraps the run methods of the
    # components imported so far (the Agent calls its generator and tool invoker directly,
    # outside the pipeline, so only those wrapped here get spans).
    from haystack import Pipeline
    from haystack.components.agents import Agent
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.dataclasses import ChatMessage
    from haystack.tools import Tool
    from haystack.utils import Secret
    from openinference.instrumentation.haystack import HaystackInstrumentor

    common.setup()
    HaystackInstrumentor().instrument()

    body = common.Tool(scenario)
    tool = Tool(name=scenarios.TOOL_NAME, description=scenarios.TOOL_DESCRIPTION,
                parameters=scenarios.TOOL_PARAMETERS, function=body)
    streamed: list[str] = []
    generator = OpenAIChatGenerator(
        model=common.MODEL, api_base_url=os.environ["OPENAI_BASE_URL"],
        api_key=Secret.from_env_var("OPENAI_API_KEY"),
        streaming_callback=(lambda chunk: streamed.append(chunk.content or ""))
        if scenario == "streaming" else None)
    agent = Agent(chat_generator=generator, tools=[tool],
                  system_prompt="You are a weather assistant. Use get_weather.",
                  exit_conditions=["text"], max_agent_steps=common.MAX_TURNS)
    name = common.AGENT_NAME
    if scenario == "multi_agent":  # Haystack's agent as a tool: a ComponentTool runs it
        from haystack.tools import ComponentTool
        weather = ComponentTool(component=agent, name="ask_weather_agent",
                                description="Ask the weather agent a weather question.",
                                outputs_to_string={"source": "last_message"})
        agent = Agent(chat_generator=generator, tools=[weather],
                      system_prompt="Ask the weather agent about the weather.",
                      exit_conditions=["text"], max_agent_steps=common.MAX_TURNS)
        name = common.COORDINATOR
    pipeline = Pipeline()
    pipeline.add_component(name, agent)
    if scenario == "conversation":  # one pipeline run per user turn, in OpenInference's
        from openinference.instrumentation import using_session  # session
        for question in common.turns():
            with using_session(common.CONVERSATION_ID):
                pipeline.run({common.AGENT_NAME: {"messages": [ChatMessage.from_user(question)]}})
        common.shutdown()
        return
    with common.attached(common.remote_parent(scenario)):
        result = pipeline.run(
            {name: {"messages": [ChatMessage.from_user(common.prompt(scenario))]}})
    answer = result[name]["messages"][-1].text
    # at max_agent_steps it returns the last message; empty_answer: nothing
    if not answer and not common.LIMITED and scenario != "empty_answer":
        raise RuntimeError("no final answer")
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
