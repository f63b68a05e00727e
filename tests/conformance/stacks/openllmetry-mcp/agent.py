"""openllmetry-mcp: tool calls over MCP. An agent loop on the official ``openai`` client whose
tool is served by an MCP server (server.py, the MCP SDK's FastMCP over stdio): the tools
offered to the LLM are the server's ``tools/list``, each call is a ``tools/call`` through the
MCP ``ClientSession``, as an MCP host does. Traced by Traceloop's SDK (``@agent`` around the
run, which connects to the server) with its MCP and OpenAI instrumentations, in the client.
``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import common

SERVER = Path(__file__).resolve().parent / "server.py"


def main(scenario: str) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from openai import OpenAI
    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import agent

    Traceloop.init(app_name=os.environ["OTEL_SERVICE_NAME"], telemetry_enabled=False,
                   api_endpoint=os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"])
    calls = 0

    async def loop(session: Any, tools: list[dict[str, Any]], question: str) -> str:
        nonlocal calls
        client = OpenAI()
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a weather assistant. Use get_weather."},
            {"role": "user", "content": question}]
        for _ in range(common.MAX_TURNS):
            msg = common.ask(client, messages, scenario == "streaming", tools)
            messages.append(msg)
            if not msg.get("tool_calls"):
                return str(msg.get("content") or "")
            for call in msg["tool_calls"]:
                calls += 1
                if scenario == "non_terminating" and calls == 3:
                    common.flush()  # finished spans are exported; the open ones never are
                    os._exit(0)
                result = await session.call_tool(call["function"]["name"],
                                                 common.arguments(call))
                text = "".join(getattr(c, "text", "") for c in result.content)
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": f"Error: {text}" if result.isError else text})
        raise common.TurnLimitError(common.MAX_TURNS)

    @agent(name=common.AGENT_NAME)
    async def weather_agent(question: str) -> str:
        """One run: connect to the MCP server, offer its tools, loop until the answer."""
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER)],
                                       env=dict(os.environ))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            tools = [{"type": "function",
                      "function": {"name": t.name, "description": t.description,
                                   "parameters": t.inputSchema}} for t in listed.tools]
            return await loop(session, tools, question)

    @agent(name=common.COORDINATOR)
    async def triage_agent(question: str) -> str:
        """multi_agent: a loop offering one tool, ask_weather_agent, that runs the weather
        agent (its MCP session its own)."""
        client = OpenAI()
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": common.COORDINATOR_SYSTEM},
            {"role": "user", "content": question}]
        for _ in range(common.MAX_TURNS):
            msg = common.ask(client, messages, False, [common.DELEGATE_TOOL])
            messages.append(msg)
            if not msg.get("tool_calls"):
                return str(msg.get("content") or "")
            for call in msg["tool_calls"]:
                result = await weather_agent(common.arguments(call)["question"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        raise common.TurnLimitError(common.MAX_TURNS)

    if scenario == "conversation":  # one run per user turn, the session as an association
        for question in common.turns():  # property (Traceloop's docs)
            Traceloop.set_association_properties({"session_id": common.CONVERSATION_ID})
            if not asyncio.run(weather_agent(question)):
                raise RuntimeError("a turn without an answer")
        common.shutdown()
        return
    with common.attached(common.remote_parent(scenario)):
        run = triage_agent if scenario == "multi_agent" else weather_agent
        answer = asyncio.run(run(common.prompt(scenario)))
    if not answer and scenario != "empty_answer":
        raise RuntimeError("no final answer")
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
