"""openai-v2-details-events: the official OpenAI instrumentation (latest experimental GenAI
semconv, content in gen_ai.client.inference.operation.details log records) and hand-made
GenAI agent/tool spans.
``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import sys

import common


def main(scenario: str) -> None:
    common.setup(logs=True)
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    OpenAIInstrumentor().instrument()
    if scenario == "conversation":  # one run per user turn; the id on the agent span
        for question in common.turns():
            common.genai_agent(scenario, "gen_ai.provider.name", question,
                               conversation_id=common.CONVERSATION_ID)
    else:
        common.genai_agent(scenario, "gen_ai.provider.name")
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
