"""langgraph: LangGraph's prebuilt ReAct agent (``create_react_agent``, named weather_agent)
over langchain-openai's ``ChatOpenAI``, instrumented by OpenInference's LangChain
instrumentation, as its docs show. ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import sys

import common
import scenarios

# Far above what any scenario needs (distinct: 6 tool rounds = 13 graph steps).
RECURSION_LIMIT = 60


def main(scenario: str) -> None:
    common.setup()
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument()
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import ToolNode, create_react_agent

    body = common.Tool(scenario)

    @tool("get_weather", description=scenarios.TOOL_DESCRIPTION)
    def get_weather(city: str) -> str:
        return body(city)

    streaming = scenario == "streaming"
    llm = ChatOpenAI(model=common.MODEL, streaming=streaming, stream_usage=streaming)
    # ToolNode's default re-raises a tool's own exception (ending the run); a user who wants
    # the LLM to see the error and recover turns handle_tool_errors on.
    tools = ToolNode([get_weather], handle_tool_errors=True)
    agent = create_react_agent(llm, tools, name=common.AGENT_NAME,
                               prompt="You are a weather assistant. Use get_weather.")
    with common.attached(common.remote_parent(scenario)):
        agent.invoke({"messages": [("user", common.prompt(scenario))]},
                     config={"recursion_limit": RECURSION_LIMIT})
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
