"""openllmetry-openai-old: an old release of Traceloop's OpenLLMetry OpenAI instrumentation
(indexed gen_ai.prompt.N.* / gen_ai.completion.N.* attributes) with agent/tool spans made
as its ``@agent`` / ``@tool`` decorators make them. ``python agent.py SCENARIO`` (in the
stack's venv)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common


def main(scenario: str) -> None:
    common.setup()
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument()
    common.traceloop_agent(scenario, tool_name_attribute=False)
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
