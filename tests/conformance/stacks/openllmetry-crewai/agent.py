"""openllmetry-crewai: the agent program of the crewai stack (a ``Crew`` of one ``Agent``, role
weather_agent, one ``Task``, CrewAI's native OpenAI LLM pointed at the scripted LLM, get_weather
as a ``@tool`` function) instrumented by Traceloop's (OpenLLMetry's) CrewAI instrumentation
and, for the LLM calls (CrewAI's native provider calls the ``openai`` client), Traceloop's
OpenAI instrumentation, as Traceloop.init installs them. The streaming scenario gives the LLM
``stream=True``. ``python agent.py SCENARIO``."""

from __future__ import annotations

import os
import sys

import common


def main(scenario: str) -> None:
    common.setup()
    from opentelemetry.instrumentation.crewai import CrewAIInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument()
    OpenAIInstrumentor().instrument()
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    body = common.Tool(scenario)

    @tool("get_weather")
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return body(city)

    llm = LLM(model=f"openai/{common.MODEL}", base_url=os.environ["OPENAI_BASE_URL"],
              api_key=os.environ["OPENAI_API_KEY"], stream=scenario == "streaming")
    agent = Agent(role=common.AGENT_NAME, goal="Answer questions about the weather.",
                  backstory="You are a weather assistant. Use get_weather.", tools=[get_weather],
                  llm=llm, max_iter=common.MAX_TURNS, verbose=False)
    agents = [agent]
    if scenario == "multi_agent":  # CrewAI's delegation: the coordinator's coworker tools
        agent = Agent(role=common.COORDINATOR, goal="Answer the user's questions.",
                      backstory="Delegate weather questions to weather_agent.",
                      allow_delegation=True, llm=llm, max_iter=common.MAX_TURNS, verbose=False)
        agents.insert(0, agent)
    task = Task(description=common.prompt(scenario), expected_output="The weather.",
                agent=agent)
    crew = Crew(agents=agents, tasks=[task], verbose=False)
    with common.attached(common.remote_parent(scenario)):
        answer = str(crew.kickoff().raw or "")
    if not answer:
        raise RuntimeError("no final answer")
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
