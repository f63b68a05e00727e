"""The MCP server of openllmetry-mcp: the official MCP SDK's FastMCP over stdio with one tool,
get_weather (raises for Atlantis: FastMCP answers the call with ``isError``). Not traced: with
Traceloop's SDK in this process too, its MCP instrumentation exports a ResponseStreamWriter span
per response, each the root of a trace of its own (the client's context is not joined), which
would split one agent run over several traces. Started by agent.py as ``python server.py``."""

from __future__ import annotations

import scenarios


def main() -> None:
    from mcp.server.fastmcp import FastMCP

    server = FastMCP("weather")

    @server.tool(name=scenarios.TOOL_NAME, description=scenarios.TOOL_DESCRIPTION)
    def get_weather(city: str) -> str:
        return scenarios.weather(city)

    server.run()  # stdio


if __name__ == "__main__":
    main()
