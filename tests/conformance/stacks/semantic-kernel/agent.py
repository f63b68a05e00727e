"""semantic-kernel: Semantic Kernel's ``ChatCompletionAgent`` named weather_agent on its
``OpenAIChatCompletion`` service (an ``AsyncOpenAI`` client pointed at the scripted LLM), with a
``WeatherPlugin`` whose ``get_weather`` kernel function is auto-invoked. Traced by Semantic
Kernel itself, as its telemetry docs show: the OTel SDK's tracer and logger providers, the
``SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE`` switch (stack env) and a
``LoggingHandler`` for the ``semantic_kernel`` loggers, through which the messages leave as log
records. ``maximum_auto_invoke_attempts`` is raised from its default (5) so the distinct run's
six calls are made. ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import common
import scenarios


def main(scenario: str) -> None:
    common.setup(logs=True)
    from opentelemetry.sdk._logs import LoggingHandler

    handler = LoggingHandler()
    handler.addFilter(logging.Filter("semantic_kernel"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)

    from openai import AsyncOpenAI
    from semantic_kernel.agents import ChatCompletionAgent
    from semantic_kernel.connectors.ai import FunctionChoiceBehavior
    from semantic_kernel.connectors.ai.open_ai import (
        OpenAIChatCompletion,
        OpenAIChatPromptExecutionSettings,
    )
    from semantic_kernel.functions import KernelArguments, kernel_function

    body = common.Tool(scenario)

    class WeatherPlugin:
        @kernel_function(name=scenarios.TOOL_NAME, description=scenarios.TOOL_DESCRIPTION)
        def get_weather(self, city: str) -> str:
            return body(city)

    service = OpenAIChatCompletion(ai_model_id=common.MODEL, async_client=AsyncOpenAI(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]))
    settings = OpenAIChatPromptExecutionSettings(
        function_choice_behavior=FunctionChoiceBehavior.Auto(
            maximum_auto_invoke_attempts=common.MAX_TURNS))
    agent = ChatCompletionAgent(service=service, name=common.AGENT_NAME,
                                instructions="You are a weather assistant. Use get_weather.",
                                plugins=[WeatherPlugin()],
                                arguments=KernelArguments(settings=settings))

    if scenario == "multi_agent":  # Semantic Kernel's agents as plugins: the coordinator is
        agent = ChatCompletionAgent(  # given the weather agent as a plugin
            service=service, name=common.COORDINATOR, plugins=[agent],
            instructions="Ask the weather agent about the weather.",
            arguments=KernelArguments(settings=settings))

    async def run() -> str:
        if scenario == "streaming":
            return "".join([str(r.content) async for r in
                            agent.invoke_stream(messages=common.prompt(scenario))])
        return str((await agent.get_response(messages=common.prompt(scenario))).content)

    with common.attached(common.remote_parent(scenario)):
        answer = asyncio.run(run())
    if not answer and scenario != "empty_answer":
        raise RuntimeError("no final answer")
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
