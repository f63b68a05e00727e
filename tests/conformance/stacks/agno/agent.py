"""agno: an Agno ``Agent`` named weather_agent on Agno's ``OpenAIChat`` model pointed at the
scripted LLM, get_weather as a plain function tool, instrumented by OpenInference's Agno
instrumentation (``AgnoInstrumentor``), as its docs show. The streaming scenario runs the agent
with ``stream=True``. ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import os
import sys

import common


def main(scenario: str) -> None:
    common.setup()
    from openinference.instrumentation.agno import AgnoInstrumentor

    AgnoInstrumentor().instrument()
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    body = common.Tool(scenario)

    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: the city
        """
        return body(city)

    agent = Agent(name=common.AGENT_NAME,
                  model=OpenAIChat(id=common.MODEL, base_url=os.environ["OPENAI_BASE_URL"],
                                   api_key=os.environ["OPENAI_API_KEY"]),
                  tools=[get_weather], instructions="You are a weather assistant. Use get_weather.",
                  telemetry=False)  # Agno's own usage telemetry (an outbound call) off
    if scenario == "multi_agent":  # Agno's Team: the leader delegates to its member
        from agno.team import Team
        agent.id = common.AGENT_NAME  # the member id the leader names (default its name, url-safe)
        agent = Team(name=common.COORDINATOR, members=[agent],
                     model=OpenAIChat(id=common.MODEL, base_url=os.environ["OPENAI_BASE_URL"],
                                      api_key=os.environ["OPENAI_API_KEY"]),
                     instructions="Delegate weather questions to weather_agent.",
                     telemetry=False)
    if scenario == "conversation":  # one run per user turn, in the session Agno runs it in
        answers = [str(agent.run(question, session_id=common.CONVERSATION_ID).content or "")
                   for question in common.turns()]
        if not all(answers):
            raise RuntimeError("a turn without an answer")
        common.shutdown()
        return
    with common.attached(common.remote_parent(scenario)):
        if scenario == "streaming":
            answer = "".join(str(e.content or "") for e in
                             agent.run(common.prompt(scenario), stream=True)
                             if getattr(e, "event", "") == "RunContent")
        else:
            answer = str(agent.run(common.prompt(scenario)).content or "")
    if not answer and scenario != "empty_answer":
        raise RuntimeError("no final answer")
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
