"""openllmetry-crewai: the agent program of the crewai stack (``stacks/crewai/agent.py``'s
``run``: a ``Crew`` of one ``Agent``, role weather_agent, one ``Task``, CrewAI's native OpenAI
LLM pointed at the scripted LLM, get_weather as a ``@tool`` function; a coordinator that
delegates to it in ``multi_agent``) instrumented by Traceloop's (OpenLLMetry's) CrewAI
instrumentation and, for the LLM calls (CrewAI's native provider calls the ``openai`` client),
Traceloop's OpenAI instrumentation, as Traceloop.init installs them. The streaming scenario
gives the LLM ``stream=True``. ``python agent.py SCENARIO``."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import common

run = runpy.run_path(str(Path(__file__).resolve().parents[1] / "crewai" / "agent.py"))["run"]


def main(scenario: str) -> None:
    common.setup()
    from opentelemetry.instrumentation.crewai import CrewAIInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument()
    OpenAIInstrumentor().instrument()
    run(scenario)
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
