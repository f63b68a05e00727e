"""Fields read from every convention a span carries, per field, with their sources."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.base.steps import Step
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.conventions import read_span
from otel_eval.evaluate.conventions.agent_names import from_span_name
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig
from otel_eval.evaluate.trajectory import build_trajectory


def _read(attrs: dict[str, Any], name: str = "s") -> Step:
    s = span(name, attrs=attrs)
    step = Step(0, s.span_id, None, "other", s.name)
    read_span(step, s, s.attributes)
    return step


def test_vendor_marker_and_genai_attributes_on_one_tool_span() -> None:
    step = _read({"traceloop.span.kind": "tool", "traceloop.entity.name": "search",
                  "gen_ai.tool.call.arguments": '{"query": "same"}',
                  "gen_ai.tool.call.result": "found"})
    assert (step.kind, step.convention) == ("tool", "openllmetry")
    assert step.tool_name == "search" and step.arguments == {"query": "same"}
    assert step.result == "found"
    assert step.sources == {"tool_name": "openllmetry traceloop.entity.name",
                            "arguments": "genai gen_ai.tool.call.arguments",
                            "result": "genai gen_ai.tool.call.result"}


def test_genai_wins_over_the_vendor_where_both_carry_a_field() -> None:
    step = _read({"openinference.span.kind": "TOOL", "tool.name": "search",
                  "input.value": '{"query": "vendor"}',
                  "gen_ai.tool.call.arguments": '{"query": "standard"}'})
    assert step.arguments == {"query": "standard"}
    assert step.sources["arguments"] == "genai gen_ai.tool.call.arguments"
    assert step.sources["tool_name"] == "openinference tool.name"


def test_llm_fields_merged_from_openinference_and_genai() -> None:
    out = json.dumps([{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c1", "name": "search", "arguments": {"query": "q"}}]}])
    step = _read({"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
                  "llm.token_count.prompt": 10, "gen_ai.output.messages": out})
    assert step.kind == "llm" and step.model == "gpt-4o" and step.input_tokens == 10
    assert [(c.name, c.arguments) for c in step.tool_calls] == [("search", {"query": "q"})]
    assert step.sources["tool_calls"] == "genai gen_ai.output.messages"
    assert step.sources["model"] == "openinference llm.model_name"


def test_a_span_no_convention_recognises_is_not_read() -> None:
    step = _read({"gen_ai.tool.call.arguments": '{"a": 1}', "http.method": "GET"})
    assert (step.kind, step.convention, step.arguments, step.sources) == (
        "other", "unknown", None, {})


def test_tool_name_falls_back_to_the_span_name_last() -> None:
    step = _read({"gen_ai.operation.name": "execute_tool"}, name="lookup")
    assert step.tool_name == "lookup" and step.sources["tool_name"] == "span name"


@pytest.mark.parametrize(("name", "agent"), [
    ("invoke_agent planner", "planner"), ("weather-agent._execute_core", "weather-agent"),
    ("researcher.kickoff", "researcher"), ("my_agent.run", "my_agent"),
    ("helper.agent", "helper"), ("ai.generateText", "ai.generateText"),
    ("plain", "plain"), ("a.b.run", "a.b"), (".run", ".run"),
])
def test_agent_from_span_name(name: str, agent: str) -> None:
    assert from_span_name(name) == agent


def _agent(attrs: dict[str, Any], name: str) -> tuple[str | None, str]:
    t = build_trajectory(trace(span(name, attrs=attrs)), TrajectoryConfig())
    return t.agent, t.steps[0].sources["agent_name"]


def test_agent_named_by_another_convention_than_the_marker() -> None:
    # the OpenInference processor over the AI SDK: AGENT marker, name in ai.telemetry.functionId
    assert _agent({"openinference.span.kind": "AGENT", "ai.operationId": "ai.generateText",
                   "ai.telemetry.functionId": "weather_agent"},
                  "ai.generateText weather_agent") == (
        "weather_agent", "vercel_ai ai.telemetry.functionId")


def test_agent_named_after_a_method_is_the_part_before_it() -> None:
    assert _agent({"openinference.span.kind": "AGENT"}, "weather-agent._execute_core") == (
        "weather-agent", "span name")


def test_framework_default_gives_way_to_a_real_name_in_another_convention() -> None:
    assert _agent({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Agent",
                   "traceloop.entity.name": "planner"}, "invoke_agent Agent") == (
        "planner", "openllmetry traceloop.entity.name")


def test_six_identical_calls_under_a_vendor_marker_are_a_loop() -> None:
    """The issue's case: the marker picked OpenLLMetry, the arguments were GenAI's."""
    spans = [span("agent", attrs={"gen_ai.operation.name": "invoke_agent",
                                  "gen_ai.agent.name": "a"})]
    for i in range(6):
        spans.append(span(f"t{i}", "agent", start=i + 1, attrs={
            "traceloop.span.kind": "tool", "traceloop.entity.name": "search",
            "gen_ai.tool.call.arguments": '{"query": "same"}',
            "gen_ai.tool.call.result": "nothing"}))
    t = build_trajectory(trace(*spans), TrajectoryConfig())
    assert t.unrecorded.get("arguments") is None
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    assert any(f.detector == "loop" for f in findings), findings


@pytest.mark.parametrize(("stamp", "agent"), [
    ("weather_agent", "weather_agent"),  # createAgent({name: "weather_agent"})
    ("agent", None),                     # a framework's default is no name
    (None, None),                        # no stamp: unknown, not the graph span's name
])
def test_langchain_agent_name_stamped_in_openinference_metadata(stamp: str | None,
                                                                agent: str | None) -> None:
    """LangChain.js under OpenInference: the graph root is a CHAIN span; the agent's name is
    LangChain's ``lc_agent_name`` in the ``metadata`` JSON of every span of its run."""
    meta = json.dumps({"lc_agent_name": stamp, "langgraph_node": "model_request"}
                      if stamp else {"langgraph_node": "model_request"})
    spans = [span("graph", attrs={"openinference.span.kind": "CHAIN"}),
             span("ChatOpenAI", "graph", start=1, attrs={
                 "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                 "metadata": meta})]
    t = build_trajectory(trace(*spans), TrajectoryConfig())
    assert t.agent == agent
    assert t.agent_source == ("child_span" if agent else "unknown")


def test_a_sub_agent_run_from_a_tool_is_named_by_its_own_stamp() -> None:
    """LangChain.js' multi_agent recording: no span is an agent; the coordinator's spans stamp
    lc_agent_name triage_agent, and the weather agent it runs from a tool stamps its own. Each
    span is its own stamp's agent, not its parent's."""
    def chain(name: str, parent: str | None, start: int, agent: str, kind: str = "CHAIN",
              **attrs: str) -> Any:
        return span(name, parent, start, {"openinference.span.kind": kind,
                                           "metadata": json.dumps({"lc_agent_name": agent}),
                                           **attrs})

    spans = [chain("triage", None, 0, "triage_agent"),
             chain("ask_weather_agent", "triage", 1, "triage_agent", "TOOL",
                   **{"tool.name": "ask_weather_agent"}),
             chain("weather", "ask_weather_agent", 2, "weather_agent"),
             chain("get_weather", "weather", 3, "weather_agent", "TOOL",
                   **{"tool.name": "get_weather"}),
             span("unstamped", "weather", 4, {"openinference.span.kind": "CHAIN"})]
    t = build_trajectory(trace(*spans), TrajectoryConfig())
    assert (t.agent, t.agent_source) == ("triage_agent", "child_span")
    assert {s.name: s.node for s in t.steps} == {
        "triage": "triage_agent", "ask_weather_agent": "triage_agent",
        "weather": "weather_agent", "get_weather": "weather_agent",
        "unstamped": "weather_agent"}
