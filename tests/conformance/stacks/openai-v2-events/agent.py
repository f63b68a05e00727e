"""openai-v2-events: the official OpenAI instrumentation (GenAI events as log records) and
hand-made GenAI agent/tool spans. ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common


def main(scenario: str) -> None:
    common.setup(logs=True)
    from openai import OpenAI
    from opentelemetry import trace
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    OpenAIInstrumentor().instrument()
    tracer = trace.get_tracer("conformance.weather_agent")
    tool = common.Tool(scenario)

    def run_tool(call: dict[str, Any]) -> str:
        # As many users write it: name and call id on the tool span, no arguments.
        with tracer.start_as_current_span("execute_tool get_weather", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.type": "function", "gen_ai.tool.call.id": call["id"]}):
            return tool(**common.arguments(call))

    with tracer.start_as_current_span(
            f"invoke_agent {common.AGENT_NAME}", context=common.remote_parent(scenario),
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.system": "openai",
                        "gen_ai.agent.name": common.AGENT_NAME}):
        common.chat_loop(OpenAI(), scenario, run_tool)
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
