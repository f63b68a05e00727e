"""llamaindex: LlamaIndex's ``FunctionAgent`` (agent workflow, named weather_agent) over
llama-index-llms-openai's ``OpenAI``, instrumented by OpenInference's LlamaIndex
instrumentation, as its docs show; in ``multi_agent`` an ``AgentWorkflow`` whose root agent
hands off to it. ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import asyncio
import sys

import common
import scenarios

# Far above what any scenario needs (distinct: 7 LLM turns).
# a workflow's steps: two or more a turn
MAX_ITERATIONS = 2 * common.MAX_TURNS if common.LIMITED else 40


async def run(scenario: str) -> None:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai import OpenAI

    body = common.Tool(scenario)

    def get_weather(city: str) -> str:
        return body(city)

    agent = FunctionAgent(
        name=common.AGENT_NAME, description="Answers weather questions.",
        tools=[FunctionTool.from_defaults(get_weather, name=scenarios.TOOL_NAME,
                                          description=scenarios.TOOL_DESCRIPTION)],
        llm=OpenAI(model=common.MODEL),
        system_prompt="You are a weather assistant. Use get_weather.",
        # FunctionAgent streams by default; the non-streaming scenarios turn it off.
        streaming=scenario == "streaming")
    if scenario == "multi_agent":  # an AgentWorkflow whose root agent hands off to it
        from llama_index.core.agent.workflow import AgentWorkflow

        triage = FunctionAgent(name=common.COORDINATOR, description="Routes questions.",
                               tools=[], llm=OpenAI(model=common.MODEL), streaming=False,
                               system_prompt="Hand weather questions to weather_agent.",
                               can_handoff_to=[common.AGENT_NAME])
        workflow = AgentWorkflow(agents=[triage, agent], root_agent=common.COORDINATOR)
        await workflow.run(user_msg=common.prompt(scenario), max_iterations=MAX_ITERATIONS)
        return
    if scenario == "conversation":  # one run per user turn in one Context (the chat's
        from llama_index.core.workflow import Context  # memory), in OpenInference's session
        from openinference.instrumentation import using_session

        ctx = Context(agent)
        for question in common.turns():
            with using_session(common.CONVERSATION_ID):
                await agent.run(user_msg=question, ctx=ctx, max_iterations=MAX_ITERATIONS)
        return
    with common.attached(common.remote_parent(scenario)):
        await agent.run(user_msg=common.prompt(scenario), max_iterations=MAX_ITERATIONS)


def main(scenario: str) -> None:
    common.setup()
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument()
    asyncio.run(run(scenario))
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
