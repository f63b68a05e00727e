"""openllmetry-llamaindex: the llamaindex stack's agent (``stacks/llamaindex/agent.py``'s
``run``: LlamaIndex's ``FunctionAgent`` named weather_agent over llama-index-llms-openai's
``OpenAI``, an ``AgentWorkflow`` in ``multi_agent``), instrumented by Traceloop's
(OpenLLMetry's) LlamaIndex instrumentation and, for the LLM calls (which it leaves to the
instrumentation of the LLM's client), Traceloop's OpenAI instrumentation, as Traceloop.init
would install them. ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import asyncio
import runpy
import sys
from pathlib import Path

import common

run = runpy.run_path(str(Path(__file__).resolve().parents[1] / "llamaindex" / "agent.py"))["run"]


def main(scenario: str) -> None:
    common.setup()
    from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    LlamaIndexInstrumentor().instrument()
    OpenAIInstrumentor().instrument()
    asyncio.run(run(scenario))
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
