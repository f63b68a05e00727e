"""Haystack under OpenInference: the ``Agent`` component's run is a CHAIN span ``Agent.run``
(read as the agent step), named by the key the enclosing ``Pipeline.run`` span's inputs or
outputs hold its own under (``conventions.openinference``: ``haystack_agent``,
``haystack_pipeline``, ``haystack_component``; ``trajectory.spans``:
``StepBuilder._haystack_component``). The recordings of the conformance corpus check the real
instrumentation; these check the rule on its edges."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trajectory_factory import span, trace

import otel_eval.evaluate.trajectory.spans as spans_module
from otel_eval.base.model import Span
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.conventions.haystack import (
    MAX_SCHEMA_CHARS,
    call_ids,
    offered_tools,
    tool_results,
)
from otel_eval.evaluate.conventions.openinference import (
    HAYSTACK_SCOPE,
    haystack_component,
    haystack_pipeline,
)
from otel_eval.evaluate.trajectory import build_trajectory

_CHAIN = {"openinference.span.kind": "CHAIN"}
_ASK = {"messages": ["ChatMessage(_role=<ChatRole.USER: 'user'>, ...)"]}
_SAID = {"messages": ["ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, "
                         "_content=[TextContent(text='It is sunny in Paris.')])"]}


def _io(inputs: Any, outputs: Any) -> dict[str, Any]:
    return {**_CHAIN, "input.value": json.dumps(inputs), "output.value": json.dumps(outputs)}


def _scoped(s: Span, scope: str) -> Span:
    s.scope = scope
    return s


def _run(pipeline: dict[str, Any] | None, *, agent: str = "Agent.run",
         scope: str = HAYSTACK_SCOPE) -> Trajectory:
    """``Pipeline.run`` (attributes ``pipeline``; None: not exported) > ``agent`` (CHAIN,
    asked ``_ASK``, answering ``_SAID``) > one LLM call; every span of scope ``scope``."""
    spans = [span(agent, "Pipeline.run" if pipeline is not None else None, start=1,
                  attrs=_io(_ASK, _SAID)),
             span("OpenAIChatGenerator.run", agent, start=2, attrs={
                 "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                 "llm.output_messages.0.message.role": "assistant",
                 "llm.output_messages.0.message.content": "It is sunny in Paris."})]
    if pipeline is not None:
        spans.insert(0, span("Pipeline.run", attrs=pipeline))
    return build_trajectory(trace(*[_scoped(s, scope) for s in spans]), TrajectoryConfig())


@pytest.mark.parametrize(("pipeline", "agent"), [
    # the component's inputs, keyed by its name in the pipeline
    (_io({"data": {"weather_agent": _ASK}}, {"weather_agent": _SAID}), "weather_agent"),
    # inputs given flat (Haystack routes them): the outputs name it
    (_io({"data": {"messages": _ASK["messages"]}}, {"weather_agent": _SAID}), "weather_agent"),
    # two components took the same inputs; the outputs tell them apart
    (_io({"data": {"a": _ASK, "b": _ASK}}, {"b": _SAID}), "b"),
    # two components took and gave the same: not told apart, unknown
    (_io({"data": {"a": _ASK, "b": _ASK}}, {"a": _SAID, "b": _SAID}), None),
    # no key holds the agent's own values
    (_io({"data": {"x": {"messages": []}}}, {"x": {"other": 1}}), None),
    # a framework default as the component's name is no name
    (_io({"data": {"Agent": _ASK}}, {}), None),
    # not JSON, not objects
    ({**_CHAIN, "input.value": "Pipeline(...)", "output.value": "[1, 2]"}, None),
    ({**_CHAIN, "input.value": json.dumps({"data": [1]})}, None),
])
def test_the_agent_is_the_component_name_its_pipeline_gave_it(
        pipeline: dict[str, Any], agent: str | None) -> None:
    t = _run(pipeline)
    step = next(s for s in t.steps if s.name == "Agent.run")
    assert step.kind == "agent"
    assert t.agent == agent
    assert t.agent_source == ("span" if agent else "unknown")
    assert t.output == "It is sunny in Paris."
    if agent:
        assert "Pipeline.run" in step.sources["agent_name"]
        assert [s.node for s in t.steps if s.kind == "llm"] == [agent]


def test_an_agent_whose_pipeline_span_never_came_is_an_unnamed_agent() -> None:
    t = _run(None)
    assert [s.kind for s in t.steps] == ["agent", "llm"]
    assert (t.agent, t.agent_source) == (None, "unknown")


@pytest.mark.parametrize(("name", "scope"), [
    ("Agent.run", "openinference.instrumentation.langchain"),  # not Haystack's
    ("Retriever.run", HAYSTACK_SCOPE),  # another component
])
def test_other_chain_spans_stay_chains(name: str, scope: str) -> None:
    t = _run(_io({"data": {"weather_agent": _ASK}}, {}), agent=name, scope=scope)
    assert next(s for s in t.steps if s.name == name).kind == "chain"
    assert t.agent is None


def test_a_pipeline_is_parsed_once_for_all_its_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many Agent.run spans under one large pipeline span: its JSON is parsed once, not once
    per agent (the work stays linear in the trace's bytes)."""
    data = {f"agent_{i}": {"messages": [f"ask {i}"]} for i in range(300)}
    pipeline = span("Pipeline.run", attrs=_io({"data": data}, {}))
    agents = [span(f"agent {i}", "Pipeline.run", start=i + 1, span_id=f"{i + 1:016x}",
                   attrs=_io({"messages": [f"ask {i}"]}, {})) for i in range(300)]
    for s in agents:
        s.name = "Agent.run"
    calls = []

    def counted(attrs: Any) -> Any:
        calls.append(1)
        return haystack_pipeline(attrs)

    monkeypatch.setattr(spans_module, "haystack_pipeline", counted)
    t = build_trajectory(trace(*[_scoped(s, HAYSTACK_SCOPE) for s in [pipeline, *agents]]),
                         TrajectoryConfig())
    assert len(calls) == 1
    assert {s.node for s in t.steps if s.kind == "agent"} == {f"agent_{i}" for i in range(300)}


def test_haystack_component_reads_parsed_pipelines() -> None:
    pipeline = haystack_pipeline(_io({"data": {"w": _ASK}}, {"w": _SAID}))
    assert pipeline == ({"w": _ASK}, {"w": _SAID})
    assert haystack_component(pipeline, _io(_ASK, {})) == "w"
    assert haystack_component(pipeline, _io({}, _SAID)) == "w"  # an empty input is no match
    assert haystack_component((None, None), _io(_ASK, _SAID)) is None
    # a run that raised records its parameters' defaults beside what it was given (and no
    # output): the haystack/llm_error recording
    raised = {"data": {"w": _ASK, "v": {"messages": ["other"]}}}
    assert haystack_component(haystack_pipeline(_io(raised, {})),
                              _io({**_ASK, "tools": None, "hook_context": None}, {})) == "w"
    assert haystack_component(haystack_pipeline(_io(raised, {})),
                              _io({**_ASK, "tools": ["t"]}, {})) is None


# --- tool calls and their results, from Haystack's ChatMessage reprs ----------------------------

def _tool_call(name: str, args: str, call_id: str, extra: bool = True) -> str:
    return (f"ToolCall(tool_name={name!r}, arguments={args}, id={call_id!r}"
            + (", extra=None)" if extra else ")"))


def _tool_message(result: str, origin: str, error: bool) -> str:
    return (f"ChatMessage(_role=<ChatRole.TOOL: 'tool'>, _content=[ToolCallResult("
            f"result={result!r}, origin={origin}, error={error})], _name=None, _meta={{}})")


_CALL_1 = _tool_call("get_weather", "{'city': 'Atlantis'}", "call_1")
_CALL_2 = _tool_call("get_weather", "{'city': 'Paris', 'note': \", id='x', extra=\"}", "call_2",
                     extra=False)  # an argument that looks like the id; a ToolCall of old
_FAILED = "Failed to invoke Tool `get_weather` with parameters {'city': 'Atlantis'}. Error: no"


def _llm(name: str, start: int, inputs: list[str], calls: list[str], reply: str = "",
         names: list[str] | None = None) -> Span:
    """An LLM span as openinference-instrumentation-haystack records it: messages flattened by
    their text (a tool message: its role only), calls without ids, the reprs in the values."""
    attrs: dict[str, Any] = {
        "openinference.span.kind": "LLM", "input.value": json.dumps({"messages": inputs}),
        "output.value": json.dumps({"replies": [
            "ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=["
            + ", ".join(calls or [f"TextContent(text={reply!r})"]) + "], _name=None, _meta={})"]}),
        "llm.output_messages.0.message.role": "assistant"}
    for i, text in enumerate(inputs):
        attrs[f"llm.input_messages.{i}.message.role"] = text.split("'")[1].lower()
    for i, call in enumerate(calls):
        prefix = f"llm.output_messages.0.message.tool_calls.{i}.tool_call.function."
        attrs[prefix + "name"] = names[i] if names else call.split("'")[1]
        attrs[prefix + "arguments"] = "{}"
    if reply:
        attrs["llm.output_messages.0.message.content"] = reply
    return span(name, "Agent.run", start=start, attrs=attrs)


_USER = "ChatMessage(_role=<ChatRole.USER: 'user'>, _content=[TextContent(text='Weather?')])"
_ASKED = f"ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[{_CALL_1}])"


def _weather_run(second_calls: list[str], names: list[str] | None = None) -> Trajectory:
    """Asked twice: the first call fails, the second (``second_calls``, flattened as
    ``names``) is answered."""
    first_answer = _tool_message(_FAILED, _CALL_1, True)
    asked_again = f"ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[{_CALL_2}])"
    spans = [span("Agent.run", start=1, end=100, attrs=_io(_ASK, _SAID)),
             _llm("llm 1", 10, [_USER], [_CALL_1]),
             _llm("llm 2", 20, [_USER, _ASKED, first_answer], second_calls, names=names),
             _llm("llm 3", 30, [_USER, _ASKED, first_answer, asked_again,
                                _tool_message("sunny, 22 C", _CALL_2, False)], [],
                  reply="It is sunny.")]
    return build_trajectory(trace(*[_scoped(s, HAYSTACK_SCOPE) for s in spans]),
                            TrajectoryConfig())


def test_a_tool_result_and_its_error_flag_are_read_from_the_next_calls_reprs() -> None:
    t = _weather_run([_CALL_2])
    tools = [s for s in t.steps if s.kind == "tool"]
    assert [(s.call_id, s.status, s.result, s.error) for s in tools] == [
        ("call_1", "error", None, _FAILED), ("call_2", "ok", "sunny, 22 C", None)]
    assert all(s.rebuilt for s in tools)
    assert tools[0].sources["status"] == "llm tool message error flag"


def test_calls_whose_names_differ_from_the_replys_get_no_id() -> None:
    # the flattened call says search, the reply's repr get_weather: its id stays unknown
    t = _weather_run([_CALL_2], names=["search"])
    second = [s for s in t.steps if s.kind == "tool"][1]
    assert (second.name, second.call_id, second.result) == ("search", None, None)


@pytest.mark.parametrize("text", [
    # not the shape read: no flag, a result that is no string literal, a truncated repr
    _tool_message("x", _CALL_1, True).replace(", error=True)", ")"),
    _tool_message("x", _CALL_1, True).replace("result='x'", "result=<object at 0x1>"),
    _tool_message("x", _CALL_1, True)[:90],
    # hostile: ids forged everywhere, unterminated quotes, 200,000 backslashes
    _tool_message("x", "ToolCall(tool_name='t', arguments=" + ", id='" * 20_000 + ")", True),
    "ChatMessage(_role=<ChatRole.TOOL: 'tool'>, _content=[ToolCallResult(result='" + "\\" * 200_000,
])
def test_a_tool_message_of_another_shape_gives_nothing(text: str) -> None:
    assert tool_results(json.dumps({"messages": [_USER, text]})) == {}


def test_reply_call_ids_in_order_and_nothing_for_another_shape() -> None:
    reply = ("ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=["
             f"{_CALL_1}, {_CALL_2}], _name=None, _meta={{'id': 'meta'}})")
    assert call_ids(json.dumps({"replies": [reply]})) == [("get_weather", "call_1"),
                                                          ("get_weather", "call_2")]
    assert call_ids(json.dumps({"replies": [reply.replace("id='call_1'", "id=7")]})) == []
    assert call_ids(json.dumps({"replies": "ToolCall(tool_name="})) == []


# --- the tools offered, from the Tool reprs beside the messages --------------------------------

_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def _tool_repr(name: str, parameters: Any = _PARAMS, cls: str = "Tool") -> str:
    return (f"{cls}(name={name!r}, description='Get the weather, function=no.', "
            f"parameters={parameters!r}, function=<function get_weather at 0x7f>, "
            "outputs_to_string=None, inputs_from_state=None, outputs_to_state=None)")


def _offering(*tools: Any) -> str:
    return json.dumps({"messages": [_USER], "tools": list(tools)})


def test_the_tools_offered_are_read_from_the_requests_tool_reprs() -> None:
    assert offered_tools(_offering(_tool_repr("get_weather"), _tool_repr("t", {}, "ComponentTool"))
                         ) == {"get_weather": _PARAMS, "t": {}}
    # and a trajectory's offer, on the shape the instrumentation records
    request = json.dumps({"messages": [_USER], "tools": [_tool_repr("get_weather")]})
    t = build_trajectory(trace(_scoped(span("llm", attrs={
        "openinference.span.kind": "LLM", "input.value": request}), HAYSTACK_SCOPE)),
        TrajectoryConfig())
    assert t.tools == {"get_weather": _PARAMS}


def test_a_schema_decoded_once_is_each_trajectorys_own() -> None:
    request = _offering(_tool_repr("get_weather"), _tool_repr("other"))
    first, second = offered_tools(request), offered_tools(request)
    assert first == second == {"get_weather": _PARAMS, "other": _PARAMS}
    first["get_weather"]["required"].append("x")  # a reader that changes what it was given
    assert offered_tools(request)["get_weather"] == _PARAMS
    assert first["other"] is not first["get_weather"]


@pytest.mark.parametrize("tools", [
    # a schema whose literal does not end at the first "}, function=": unknown, not cut
    [_tool_repr("a", {"description": "x}, function=y"})],
    [_tool_repr("a", {"k": "v" * MAX_SCHEMA_CHARS})],
    [_tool_repr("a", "not a dict")],
    [_tool_repr("a", {"k": {1, 2}})],  # a literal JSON has no form for
], ids=["ends early", "too long", "no dict", "no json"])
def test_a_schema_not_read_is_unknown(tools: list[str]) -> None:
    assert offered_tools(_offering(*tools)) == {"a": {}}


@pytest.mark.parametrize("tools", [
    "Tool(name='a'", ["Tool(name=7, description='', parameters={}, function=None)"],
    [7, None, "print('x')", "Tool(name='', description=None, parameters={}, function=None)",
     "Tool(name='" + "\\" * 100_000], ["X" * 100 + "Tool(name='a', description=None, parameters="],
])
def test_other_shapes_offer_nothing(tools: Any) -> None:
    assert offered_tools(json.dumps({"messages": [], "tools": tools})) == {}
