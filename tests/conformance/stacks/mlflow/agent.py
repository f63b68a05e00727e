"""mlflow: MLflow Tracing (the ``mlflow-tracing`` SDK) as its docs show: the agent and its tool
as ``@mlflow.trace(span_type=AGENT | TOOL)`` functions, the LLM calls traced by
``mlflow.openai.autolog()``, exported by MLflow's OTLP exporter, which MLflow sets up itself
when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (as its docs say; no tracking server; with
the base ``OTEL_EXPORTER_OTLP_ENDPOINT`` it also exports metrics and, in mlflow-tracing 3.17.2,
fails to end every span while looking up an experiment for them). With
``MLFLOW_ENABLE_OTEL_GENAI_SEMCONV=true`` (the mlflow-genai stack) MLflow translates the spans
to the GenAI semantic conventions at export. ``python agent.py SCENARIO`` (in the stack's
venv)."""

from __future__ import annotations

import os
import sys

import common


def main(scenario: str) -> None:
    base = os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT")
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = base.rstrip("/") + "/v1/traces"
    import mlflow
    from mlflow.entities import SpanType
    from mlflow.tracing.provider import get_bridged_tracer_provider
    from openai import OpenAI

    mlflow.openai.autolog()
    # MLflow's own tracer provider (not the global one): flushed by the scenarios' crash
    common._providers.append(get_bridged_tracer_provider())
    body = common.Tool(scenario)

    @mlflow.trace(name="get_weather", span_type=SpanType.TOOL)
    def get_weather(city: str) -> str:
        return body(city)

    @mlflow.trace(name=common.AGENT_NAME, span_type=SpanType.AGENT)
    def weather_agent(question: str) -> str:
        return common.chat_loop(OpenAI(), scenario,
                                lambda call: get_weather(**common.arguments(call)), question)

    @mlflow.trace(name=common.DELEGATE_TOOL_NAME, span_type=SpanType.TOOL)
    def ask_weather_agent(question: str) -> str:
        return weather_agent(question)

    @mlflow.trace(name=common.COORDINATOR, span_type=SpanType.AGENT)
    def triage_agent(question: str) -> str:  # multi_agent: calls the weather agent as a tool
        return common.delegating_loop(OpenAI(), scenario, ask_weather_agent, question)

    with common.attached(common.remote_parent(scenario)):
        (triage_agent if scenario == "multi_agent" else weather_agent)(common.prompt(scenario))
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
