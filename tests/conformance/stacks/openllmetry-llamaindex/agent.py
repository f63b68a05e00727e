"""openllmetry-llamaindex: LlamaIndex's ``FunctionAgent`` (agent workflow, named
weather_agent) over llama-index-llms-openai's ``OpenAI``, instrumented by Traceloop's
(OpenLLMetry's) LlamaIndex instrumentation and, for the LLM calls (which it leaves to the
instrumentation of the LLM's client), Traceloop's OpenAI instrumentation, as Traceloop.init
would install them.
``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import asyncio
import sys

import common
import scenarios

# Far above what any scenario needs (distinct: 7 LLM turns).
MAX_ITERATIONS = 40


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
    with common.attached(common.remote_parent(scenario)):
        await agent.run(user_msg=common.prompt(scenario), max_iterations=MAX_ITERATIONS)


def main(scenario: str) -> None:
    common.setup()
    from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    LlamaIndexInstrumentor().instrument()
    OpenAIInstrumentor().instrument()
    asyncio.run(run(scenario))
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
