"""Google ADK's own content attributes (``conventions.adk``, its telemetry schema 1): the
request and response of a ``call_llm`` span as Gemini Contents, a tool's arguments and
response. The recordings of the conformance corpus (``google-adk-legacy``) check the real
framework; these check the reader on its edges."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.detectors.tool_call import parameters_schema
from otel_eval.evaluate.trajectory import build_trajectory

_AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather_agent"}
_LLM = {"gen_ai.system": "gcp.vertex.agent", "gen_ai.request.model": "gemini-2.0-flash"}


def _contents(*contents: dict[str, Any]) -> str:
    return json.dumps({"model": "gemini-2.0-flash", "config": {}, "contents": list(contents)})


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def _asks(city: str) -> dict[str, Any]:
    return {"role": "model", "parts": [{"function_call": {"name": "get_weather",
                                                          "args": {"city": city}}}]}


def _answered(result: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"function_response": {
        "name": "get_weather", "response": {"result": result}}}]}


def _tool(start: int, city: str, response: str) -> Any:
    return span("execute_tool get_weather", "agent", start, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
        "gcp.vertex.agent.tool_call_args": json.dumps({"city": city}),
        "gcp.vertex.agent.tool_response": response}, span_id=f"{start:016x}")


def _run(cities: list[str]) -> Trajectory:
    """An ADK run asking get_weather for each city, then answering."""
    history = [_user("Weather?")]
    spans = [span("agent", None, 0, _AGENT)]
    at = 1
    for city in cities:
        spans.append(span("call_llm", "agent", at, {
            **_LLM, "gcp.vertex.agent.llm_request": _contents(*history),
            "gcp.vertex.agent.llm_response": json.dumps({"content": _asks(city)})},
            span_id=f"{at:016x}"))
        spans.append(_tool(at + 1, city, json.dumps({"result": f"sunny in {city}"})))
        history += [_asks(city), _answered(f"sunny in {city}")]
        at += 2
    spans.append(span("call_llm", "agent", at, {
        **_LLM, "gcp.vertex.agent.llm_request": _contents(*history),
        "gcp.vertex.agent.llm_response": json.dumps({"content": {
            "role": "model", "parts": [{"text": "It is sunny."}]}})}, span_id=f"{at:016x}"))
    return build_trajectory(trace(*spans), TrajectoryConfig())


def test_calls_results_prompts_and_answer_are_read() -> None:
    t = _run(["Paris"])
    tool = t.tool_steps[0]
    assert (tool.arguments, tool.result) == ({"city": "Paris"}, "sunny in Paris")
    first, last = t.llm_steps
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("get_weather",
                                                                  {"city": "Paris"})]
    assert (last.prompt, last.answer, t.task, t.answer) == (
        '{"result": "sunny in Paris"}', "It is sunny.", "Weather?", "It is sunny.")
    assert tool.sources["arguments"] == "adk gcp.vertex.agent.tool_call_args"


def test_the_same_call_repeated_is_a_loop() -> None:
    # without the arguments every call was unrecorded: equal to no other, never a loop
    findings, _ = Detectors(DetectorsConfig()).evaluate(_run(["Paris"] * 4))
    assert "loop" in {f.detector for f in findings}


def test_content_capture_off_is_unknown_not_empty() -> None:
    # ADK writes "{}" in each attribute when it does not capture content
    t = build_trajectory(trace(
        span("agent", None, 0, _AGENT),
        span("call_llm", "agent", 1, {**_LLM, "gcp.vertex.agent.llm_request": "{}",
                                      "gcp.vertex.agent.llm_response": "{}"}),
        _tool(2, "Paris", "{}")), TrajectoryConfig())
    assert (t.tool_steps[0].arguments, t.tool_steps[0].result) == (None, None)
    assert (t.llm_steps[0].input_text, t.llm_steps[0].output_text) == (None, None)


@pytest.mark.parametrize("value", [
    "[", "7", json.dumps({"contents": "x"}), json.dumps({"contents": [7, {"parts": 3}]}),
    json.dumps({"content": {"role": 5, "parts": [{"function_call": {"name": ""}},
                                                 {"function_response": "x"}, None]}}),
    json.dumps({"contents": [{"parts": [{"text": "x" * 100_000}] * 50}]}),
])
def test_other_shapes_give_nothing_or_what_they_hold(value: str) -> None:
    t = build_trajectory(trace(
        span("agent", None, 0, _AGENT),
        span("call_llm", "agent", 1, {**_LLM, "gcp.vertex.agent.llm_request": value,
                                      "gcp.vertex.agent.llm_response": value})),
        TrajectoryConfig())
    llm = t.llm_steps[0]
    assert llm.tool_calls == []
    for text in (llm.input_text, llm.output_text):
        assert text is None or all(isinstance(m["parts"], list) for m in json.loads(text))


@pytest.mark.parametrize("marker", [
    {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "(merged tools)"},
    {"gen_ai.operation.name": "execute_tool"}, {"gen_ai.tool.name": "(merged tools)"}],
    ids=["recorded", "the span's name alone", "no operation recorded"])
def test_the_span_of_merged_parallel_calls_is_no_call(marker: dict[str, str]) -> None:
    """After a reply's parallel calls ADK merges their responses into one event and records
    an ``execute_tool (merged)`` span named ``(merged tools)`` beside the calls' spans (in
    both telemetry formats): it ran nothing, and no tool of that name was offered."""
    defs = json.dumps([{"name": "get_weather", "parameters": {"type": "object"}}])
    merged = span("execute_tool (merged)", "agent", 5, {
        **marker, "gen_ai.tool.call.id": "e-1"})
    calls = [span(f"execute_tool get_weather {c}", "agent", at, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.arguments": json.dumps({"city": c})})
        for at, c in ((3, "Paris"), (4, "London"))]
    root = span("agent", None, 0, {**_AGENT, "gen_ai.tool.definitions": defs}, end=100)
    t = build_trajectory(trace(root, *calls, merged), TrajectoryConfig())
    assert [s.arguments for s in t.tool_steps] == [{"city": "Paris"}, {"city": "London"}]
    findings = Detectors(DetectorsConfig()).evaluate(t, None)[0]
    assert not [f for f in findings if f.detector == "tool_call"]
    assert not [s for s in t.steps if "kind" in s.unknown]


def _offering(config: dict[str, Any]) -> Trajectory:
    """One call_llm span whose request carries ``config``, asking get_forecast, and the tool
    span ADK records for that call of a tool it does not have."""
    request = json.dumps({"model": "gemini-2.0-flash", "config": config,
                          "contents": [_user("Weather?")]})
    asks = {"role": "model", "parts": [{"function_call": {"name": "get_forecast",
                                                          "args": {"city": "Paris"}}}]}
    return build_trajectory(trace(
        span("agent", None, 0, _AGENT, end=100),
        span("call_llm", "agent", 1, {**_LLM, "gcp.vertex.agent.llm_request": request,
                                      "gcp.vertex.agent.llm_response": json.dumps(
                                          {"content": asks})}),
        span("execute_tool get_forecast", "agent", 2, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_forecast",
            "gcp.vertex.agent.tool_call_args": json.dumps({"city": "Paris"}),
            "gcp.vertex.agent.tool_response": json.dumps({"error": "not found"})},
            status="error")), TrajectoryConfig())


_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize(("declared", "schema"), [
    ({"name": "get_weather", "parameters_json_schema": _SCHEMA}, _SCHEMA),
    # a Gemini Schema (types upper-case) is no JSON schema: offered, its schema unknown
    ({"name": "get_weather", "parameters": {"type": "OBJECT"}}, {}),
], ids=["json schema", "gemini schema"])
def test_the_offer_is_read_from_the_request_config(declared: dict[str, Any],
                                                   schema: dict[str, Any]) -> None:
    t = _offering({"tools": [{"function_declarations": [declared]}]})
    assert t.tools == {"get_weather": schema}
    findings = Detectors(DetectorsConfig()).evaluate(t, None)[0]
    assert "selection" in {f.kind for f in findings if f.detector == "tool_call"}


@pytest.mark.parametrize("config", [
    {}, {"tools": "x"}, {"tools": [7, {"function_declarations": [None, {"name": ""}]}]},
    {"tools": [{"function_declarations": "function_declarations"}]}])
def test_a_request_without_a_readable_offer_offers_nothing(config: dict[str, Any]) -> None:
    t = _offering(config)
    assert t.tools == {}
    findings = Detectors(DetectorsConfig()).evaluate(t, None)[0]
    assert "selection" not in {f.kind for f in findings}



def _handed_back(agent_name: str) -> Trajectory:
    """The conformance corpus' google-adk/multi_agent run (triage_agent transfers to
    weather_agent), with the weather agent then transferring back: a ``transfer_to_agent``
    span as ADK records one (the coordinator's, under the weather agent), the ``agent_name``
    given. ADK offers each agent its own transfer_to_agent: the coordinator's enum is
    ``["weather_agent"]``, the weather agent's ``["triage_agent"]`` (its parent)."""
    from cost import work

    from otel_eval.base.model import Span
    from otel_eval.base.model import Trace as Run

    [run] = work.decode_recordings([work.recording_requests("google-adk", "multi_agent")])
    spans = {s.name: s for s in run.spans}
    coordinator = spans["execute_tool transfer_to_agent"]
    weather = spans["invoke_agent weather_agent"]
    attrs = {**coordinator.attributes, "gen_ai.agent.name": "weather_agent",
             "gen_ai.tool.call.id": "adk-hand-back",
             "gen_ai.tool.call.arguments": json.dumps({"agent_name": agent_name})}
    back = Span(run.trace_id, "00000000000000ff", weather.span_id, coordinator.name,
                weather.end_ns - 2, weather.end_ns - 1, kind=coordinator.kind,
                status=coordinator.status, attributes=attrs, resource=coordinator.resource,
                scope=coordinator.scope)
    return build_trajectory(Run(run.trace_id, [*run.spans, back], "complete"),
                            TrajectoryConfig())


def _enum(t: Trajectory, agent: str) -> Any:
    [offer] = [tools for (node, _), tools in t.offered_to.items() if node == agent]
    return parameters_schema(offer["transfer_to_agent"])["properties"]["agent_name"]["enum"]


def test_each_agent_s_call_is_checked_against_its_own_offer() -> None:
    """A tool of one name offered to two agents with two schemas (ADK's transfer_to_agent,
    its enum the agents each may hand to): an agent's call is checked against what that agent
    was offered. Before, the schemas were merged by name, the first one kept, and the weather
    agent's hand-back to its parent failed the coordinator's enum (``tool_call/arguments``,
    an error: the run failed)."""
    t = _handed_back("triage_agent")
    assert (_enum(t, "triage_agent"), _enum(t, "weather_agent")) == (
        ["weather_agent"], ["triage_agent"])
    findings = Detectors(DetectorsConfig()).evaluate(t, None)[0]
    assert [f for f in findings if f.detector == "tool_call"] == []
    # its own offer is read: a hand-off to an agent it may not hand to is still found
    findings = Detectors(DetectorsConfig()).evaluate(_handed_back("weather_agent"), None)[0]
    assert [(f.kind, f.attributes["constraint"], f.step_indexes[0] > 0) for f in findings
            if f.detector == "tool_call"] == [("arguments", "enum", True)]


@pytest.mark.parametrize(("stack", "offer"), [
    ("google-adk", "gen_ai.tool.definitions"),
    ("google-adk-legacy", "gcp.vertex.agent.llm_request")])
def test_a_call_by_an_agent_whose_offer_has_no_schema_is_not_checked_against_another_s(
        stack: str, offer: str) -> None:
    """One model call's offer not recorded (its generate_content / call_llm span without the
    tool definitions; bench/unknown_values): where that was the coordinator's, its offer was
    read without schemas (ADK's log records name the tools) and its transfer_to_agent call
    was checked against the weather agent's, whose enum is ``["triage_agent"]`` (a false
    tool_call/arguments error). A schema another agent was offered is no schema for this
    agent's call: unknown. (TRAIL's GAIA runs: the smolagents manager's final_answer(6) was
    checked against its search agent's ``answer: string``.)"""
    from cost import work

    [run] = work.decode_recordings([work.recording_requests(stack, "multi_agent")])
    offers = [i for i, s in enumerate(run.spans) if offer in s.attributes]
    assert len(offers) >= 2
    for i in offers:
        unsaid = work.with_attribute(run, i, offer, None)
        findings = Detectors(DetectorsConfig()).evaluate(
            build_trajectory(unsaid, TrajectoryConfig()), None)[0]
        assert [f.message for f in findings if f.detector == "tool_call"] == [], i
