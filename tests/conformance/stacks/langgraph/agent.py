"""langgraph: LangGraph's prebuilt ReAct agent (``create_react_agent``, named weather_agent)
over langchain-openai's ``ChatOpenAI``, instrumented by OpenInference's LangChain
instrumentation, as its docs show; in ``multi_agent`` a coordinator of the same kind calls it as
a tool. ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import sys

import common
import scenarios

# Far above what any scenario needs (distinct: 6 tool rounds = 13 graph steps).
# LangGraph counts each node's run (the model, the tools): two a turn
RECURSION_LIMIT = 2 * common.MAX_TURNS if common.LIMITED else 60


def conversation(llm: object, tools: object) -> None:
    """One invoke per user turn on a LangGraph thread (``configurable.thread_id``, with an
    in-memory checkpointer keeping the earlier turns), as LangGraph's docs show for chats."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    agent = create_react_agent(llm, tools, name=common.AGENT_NAME, checkpointer=InMemorySaver(),
                               prompt="You are a weather assistant. Use get_weather.")
    config = {"recursion_limit": RECURSION_LIMIT,
              "configurable": {"thread_id": common.CONVERSATION_ID}}
    for question in common.turns():
        agent.invoke({"messages": [("user", question)]}, config=config)


def coordinator(llm: object, weather: object) -> object:
    """A ReAct agent that asks the weather agent through a tool calling it (LangChain's
    "subagents as tools"), the sub-agent's final message the tool's result."""
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent

    @tool("ask_weather_agent", description="Ask the weather agent a weather question.")
    def ask_weather_agent(question: str) -> str:
        state = weather.invoke({"messages": [("user", question)]},  # type: ignore[attr-defined]
                               config={"recursion_limit": RECURSION_LIMIT})
        return str(state["messages"][-1].content)

    return create_react_agent(llm, [ask_weather_agent], name=common.COORDINATOR,
                              prompt="Ask the weather agent about the weather.")


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
    if scenario == "conversation":  # a chat thread: a checkpointer keeps its history, the
        conversation(llm, tools)    # thread_id in the config names it, one invoke per turn
        common.shutdown()
        return
    agent = create_react_agent(llm, tools, name=common.AGENT_NAME,
                               prompt="You are a weather assistant. Use get_weather.")
    if scenario == "multi_agent":
        agent = coordinator(llm, agent)
    with common.attached(common.remote_parent(scenario)):
        agent.invoke({"messages": [("user", common.prompt(scenario))]},
                     config={"recursion_limit": RECURSION_LIMIT})
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
