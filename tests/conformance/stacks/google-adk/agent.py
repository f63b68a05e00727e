"""google-adk: an ADK ``LlmAgent`` (Gemini through google-genai, pointed at the scripted LLM's
Gemini API) with get_weather as a Python function tool, run by ADK's ``Runner`` on an
in-memory session; ADK's own telemetry (tracer ``gcp.vertex.agent``, default schema). ADK
does not answer a raising tool to the model by itself (the run fails): the agent's
``on_tool_error_callback``, ADK's hook for it, answers ``{"error": "<message>"}``. In
``multi_agent`` the weather agent is the sub-agent of a coordinator that transfers to it.
``python agent.py SCENARIO``."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import common

MODEL = "gemini-2.0-flash"


def main(scenario: str) -> None:
    common.setup(logs=True)
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    body = common.Tool(scenario)

    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return body(city)

    def on_tool_error(tool: Any, args: Any, tool_context: Any, error: Exception) -> Any:
        return {"error": str(error)}

    agent = LlmAgent(name=common.AGENT_NAME, model=MODEL,
                     instruction="You are a weather assistant. Use get_weather.",
                     tools=[get_weather], on_tool_error_callback=on_tool_error)
    if scenario == "multi_agent":  # ADK's sub-agents: the LLM transfers (transfer_to_agent)
        agent = LlmAgent(name=common.COORDINATOR, model=MODEL, sub_agents=[agent],
                         instruction="Transfer weather questions to weather_agent.")
    sessions = InMemorySessionService()
    runner = Runner(app_name="weather", agent=agent, session_service=sessions)

    async def ask(session_id: str, question: str, streaming: bool) -> str:
        from google.adk.agents.run_config import RunConfig, StreamingMode
        config = RunConfig(streaming_mode=StreamingMode.SSE if streaming else StreamingMode.NONE,
                           max_llm_calls=common.MAX_TURNS)
        answer = ""
        async for event in runner.run_async(
                user_id="user", session_id=session_id, run_config=config,
                new_message=types.Content(role="user", parts=[types.Part(text=question)])):
            if event.is_final_response() and event.content and event.content.parts:
                answer = "".join(p.text or "" for p in event.content.parts)
        return answer

    async def run() -> None:
        if scenario == "conversation":
            session = await sessions.create_session(app_name="weather", user_id="user",
                                                    session_id=common.CONVERSATION_ID)
            for question in common.turns():
                if not await ask(session.id, question, False):
                    raise RuntimeError("a turn without an answer")
            return
        session = await sessions.create_session(app_name="weather", user_id="user")
        with common.attached(common.remote_parent(scenario)):
            answer = await ask(session.id, common.prompt(scenario), scenario == "streaming")
        if not answer and scenario != "empty_answer":
            raise RuntimeError("no final answer")

    asyncio.run(run())
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
