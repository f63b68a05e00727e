"""crewai: a CrewAI ``Crew`` of one ``Agent`` (role weather_agent) with one ``Task`` (the
prompt), CrewAI's native OpenAI LLM (``LLM(model="openai/gpt-4o-mini", base_url=...)``) pointed
at the scripted LLM, get_weather as a ``@tool`` function (native tool calling), instrumented by
OpenInference's CrewAI instrumentation (``CrewAIInstrumentor``) and, for the LLM calls (CrewAI's
native provider calls the ``openai`` client), OpenInference's OpenAI instrumentation, as
Phoenix's docs show. The
streaming scenario gives the LLM ``stream=True``. ``python agent.py SCENARIO``."""

from __future__ import annotations

import os
import sys

import common


def main(scenario: str) -> None:
    common.setup()
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument()
    OpenAIInstrumentor().instrument()
    run(scenario)
    common.shutdown()


def run(scenario: str) -> None:
    """The crew's run of ``scenario``, once the instrumentation is installed (also the
    openllmetry-crewai stack's)."""
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
    if scenario == "conversation":  # one kickoff per user turn (the task takes the turn's
        task = Task(description="{question}", expected_output="The weather.",  # question), in
                    agent=agent)  # OpenInference's session
        crew = Crew(agents=[agent], tasks=[task], verbose=False)
        from openinference.instrumentation import using_session
        for question in common.turns():
            with using_session(common.CONVERSATION_ID):
                if not str(crew.kickoff(inputs={"question": question}).raw or ""):
                    raise RuntimeError("a turn without an answer")
        return
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
    if not answer and scenario != "empty_answer":
        raise RuntimeError("no final answer")


if __name__ == "__main__":
    main(sys.argv[1])
