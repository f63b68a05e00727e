"""Envelopes around a tool's arguments and results taken off; arguments not understood are
unknown."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.evaluate.trajectory.envelopes import (
    MAX_LITERAL_CHARS,
    fits,
    unwrap,
    unwrap_result,
)

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize(("value", "args", "layers"), [
    ('{"city": "Paris"}', {"city": "Paris"}, ["json"]),
    (json.dumps(json.dumps({"city": "Paris"})), {"city": "Paris"}, ["json", "json"]),
    ("{'city': 'Paris'}", {"city": "Paris"}, ["python_repr"]),
    ({"input_str": "{'city': 'Paris'}", "tags": ["x"], "metadata": {"a": 1}},
     {"city": "Paris"}, ["langchain_callback", "python_repr"]),
    ({"inputs": {"city": "Paris"}, "tags": [], "metadata": {}, "kwargs": {}},
     {"city": "Paris"}, ["langchain_callback"]),
    ({"args": [], "kwargs": {"city": "Paris"}}, {"city": "Paris"}, ["call"]),
    ({"args": ["Paris"], "kwargs": {}}, {"city": "Paris"}, ["call"]),
    ({"args": [], "sanitize_inputs_outputs": True, "kwargs": {"city": "Paris"}},
     {"city": "Paris"}, ["call"]),
    ({"kwargs": {"city": "Paris"}}, {"city": "Paris"}, ["kwargs"]),
    # BeeAI's Tool.run(input, options) (OpenInference's BeeAI instrumentation)
    ('{"input": {"city": "Paris"}, "options": null}', {"city": "Paris"}, ["json", "run"]),
    ({"input": {"city": "Paris"}, "options": {"signal": None}}, {"city": "Paris"}, ["run"]),
    ({"input": "Paris", "options": None}, {"input": "Paris", "options": None}, []),
    ({"tool_name": "get_weather", "arguments": {"city": "Paris"}}, {"city": "Paris"},
     ["tool_call"]),
    ({"method": "tools/call", "params": {"name": "get_weather", "arguments": {"city": "P"}}},
     {"city": "P"}, ["tool_call", "tool_call"]),
    ("Paris", "Paris", []),
    ({"city": "Paris"}, {"city": "Paris"}, []),
    ({"tool_name": "other_tool", "arguments": {"city": "Paris"}},
     {"tool_name": "other_tool", "arguments": {"city": "Paris"}}, []),
    ("{'city': " + "'x' " * MAX_LITERAL_CHARS + "}", None, []),
    ("{'city': __import__('os').getcwd()}", "{'city': __import__('os').getcwd()}", []),
])
def test_unwrap(value: Any, args: Any, layers: list[str]) -> None:
    got, found = unwrap(value, SCHEMA, "get_weather")
    assert found == layers
    assert got == (value if args is None else args)


def test_a_parameter_named_like_an_envelope_key_is_an_argument() -> None:
    schema = {"type": "object", "properties": {"kwargs": {"type": "object"}}}
    assert unwrap({"kwargs": {"a": 1}}, schema, "t") == ({"kwargs": {"a": 1}}, [])


def test_unwrap_is_bounded_in_layers() -> None:
    value: Any = {"city": "Paris"}
    for _ in range(10):
        value = {"kwargs": value}
    got, found = unwrap(value, SCHEMA, "get_weather")
    assert len(found) == 4 and isinstance(got, dict) and "kwargs" in got


def test_fits() -> None:
    assert fits({"city": "x"}, SCHEMA) is True
    assert fits({}, SCHEMA) is False and fits({"city": "x", "q": 1}, SCHEMA) is False
    assert fits("x", SCHEMA) is False and fits({"a": 1}, {}) is None


def _run(inputs: list[Any], llm_args: list[Any] | None = None) -> Any:
    tools = json.dumps([{"type": "function", "function": {"name": "get_weather",
                                                           "parameters": SCHEMA}}])
    spans = [span("agent", attrs={"gen_ai.operation.name": "invoke_agent",
                                  "gen_ai.agent.name": "a"}, end=1000)]
    for i, value in enumerate(inputs):
        out: list[dict[str, Any]] = []
        if llm_args is not None:
            out = [{"role": "assistant", "parts": [{"type": "tool_call", "id": f"c{i}",
                                                    "name": "get_weather",
                                                    "arguments": llm_args[i]}]}]
        spans.append(span(f"chat{i}", "agent", start=10 * i + 1, attrs={
            "gen_ai.operation.name": "chat", "gen_ai.tool.definitions": tools,
            "gen_ai.output.messages": json.dumps(out)}))
        spans.append(span(f"tool{i}", "agent", start=10 * i + 5, attrs={
            "traceloop.span.kind": "tool", "traceloop.entity.name": "get_weather",
            "gen_ai.tool.call.id": f"c{i}",
            "traceloop.entity.input": value if isinstance(value, str) else json.dumps(value),
            "traceloop.entity.output": "sunny"}))
    t = build_trajectory(trace(*spans), TrajectoryConfig())
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    return t, {f"{f.detector}/{f.kind}" for f in findings}


def test_langchain_callback_inputs_are_the_arguments() -> None:
    cities = ["Paris", "London", "Tokyo", "Berlin", "Rome", "Madrid"]
    t, found = _run([{"input_str": repr({"city": c}), "tags": [], "metadata": {}}
                     for c in cities])
    assert [s.arguments for s in t.tool_steps] == [{"city": c} for c in cities]
    assert not {f for f in found if f.startswith(("loop", "tool_call"))}, found


def test_an_unknown_wrapper_is_unknown_not_a_finding() -> None:
    t, found = _run([{"payload": {"city": "Paris"}, "trace": 1}] * 6)
    assert [s.arguments for s in t.tool_steps] == [None] * 6
    assert t.unrecorded["unparsed"] == 6 and "arguments" not in t.unrecorded
    assert "unparsed" in t.tool_steps[0].unknown["arguments"]
    assert not {f for f in found if f.startswith(("loop", "tool_call"))}, found


def test_an_unknown_wrapper_gives_way_to_the_llm_call_that_fits() -> None:
    t, found = _run([{"payload": {"city": "Paris"}}] * 4, [{"city": "Paris"}] * 4)
    assert [s.arguments for s in t.tool_steps] == [{"city": "Paris"}] * 4
    assert t.tool_steps[0].sources["arguments"] == "llm tool call c0"
    assert "loop/repeated_call" in found and "tool_call/arguments" not in found


def test_wrong_arguments_the_model_asked_for_are_still_a_finding() -> None:
    t, found = _run([{"town": "Paris"}], [{"town": "Paris"}])
    assert t.tool_steps[0].arguments == {"town": "Paris"}
    assert "tool_call/arguments" in found


def test_a_text_read_as_the_only_parameter_yields_to_the_call_that_named_it_otherwise() -> None:
    """LangGraph's tool span records a call's value alone ("Paris"), which reads as the tool's
    only parameter ({"city": "Paris"}); the model asked {"town": "Paris"}, then
    {"city": "Paris"}: the first step has the call's arguments (a wrong-arguments call), not
    a guess that made the two calls look the same (a loop)."""
    t, found = _run(["Paris", "Paris"], [{"town": "Paris"}, {"city": "Paris"}])
    assert [s.arguments for s in t.tool_steps] == [{"town": "Paris"}, {"city": "Paris"}]
    assert t.tool_steps[0].sources["arguments"] == "llm tool call c0"
    assert "tool_call/arguments" in found and "loop/repeated_call" not in found
    # a call that named another value is no source for this text
    t, _ = _run(["Paris"], [{"town": "Rome"}])
    assert t.tool_steps[0].arguments == {"city": "Paris"}
    # no call recorded (the LLM spans' kind unknown): the guess stays, but two calls of the
    # same text are not known to be the same call; a call that confirms it makes it one
    t, found = _run(["Paris", "Paris"])
    assert [s.arguments for s in t.tool_steps] == [{"city": "Paris"}] * 2
    assert "loop/repeated_call" not in found
    t, found = _run(["Paris", "Paris"], [{"city": "Paris"}] * 2)
    assert t.tool_steps[0].sources["arguments"] == "llm tool call c0"
    assert "loop/repeated_call" in found


_TOOL_MESSAGE = {"content": "sunny", "additional_kwargs": {}, "response_metadata": {},
                 "type": "tool", "name": "get_weather", "id": None, "tool_call_id": "c1",
                 "artifact": None, "status": "success"}
_SERIALIZED = {"lc": 1, "type": "constructor", "id": ["langchain_core", "messages", "ToolMessage"],
               "kwargs": {"status": "success", "content": "sunny", "tool_call_id": "c1"}}
_TOOL_OUTPUT = {"blocks": [{"text": "sunny"}], "tool_name": "get_weather",
                "raw_input": {"args": [], "kwargs": {"city": "Paris"}}, "raw_output": "sunny",
                "is_error": False}

_CALL_TOOL_RESULT = {"content": [{"type": "text", "text": "sunny"}], "isError": False}


@pytest.mark.parametrize(("value", "text", "envelope", "failed"), [
    # as recorded by the corpus's stacks (tests/conformance): LangGraph, LangChain.js,
    # LlamaIndex (all under OpenInference), OpenLLMetry's MCP client
    ({"type": "tool", "data": _TOOL_MESSAGE}, "sunny", "langchain_message", False),
    ({"output": _SERIALIZED}, "sunny", "langchain_serialized", False),
    (_SERIALIZED, "sunny", "langchain_serialized", False),
    (_TOOL_OUTPUT, "sunny", "llamaindex_tool_output", False),
    ({"result": "sunny"}, "sunny", "mcp_result", False),
    # the MCP tools/call result itself (CallToolResult), as gen_ai.tool.call.result records it
    (_CALL_TOOL_RESULT, "sunny", "mcp_call_tool_result", False),
    ({"content": [{"type": "text", "text": "sunny"}]}, "sunny", "mcp_call_tool_result", False),
    ({**_CALL_TOOL_RESULT, "structuredContent": {"sky": "sunny"}, "_meta": {}}, "sunny",
     "mcp_call_tool_result", False),
    # the failures they record
    ({"type": "tool", "data": {**_TOOL_MESSAGE, "status": "error", "content": "Error: no"}},
     "Error: no", "langchain_message", True),
    ({**_TOOL_OUTPUT, "blocks": [{"text": "no such city"}], "is_error": True},
     "no such city", "llamaindex_tool_output", True),
    ({"result": "Error executing tool", "is_error": True}, "Error executing tool",
     "mcp_result", True),
    ({"content": [{"type": "text", "text": "no such city"}], "isError": True}, "no such city",
     "mcp_call_tool_result", True),
    # content as text blocks; an older LlamaIndex's content
    ({"type": "tool", "data": {**_TOOL_MESSAGE, "content": [{"type": "text", "text": "a"},
                                                            {"type": "text", "text": "b"}]}},
     "a\nb", "langchain_message", False),
    ({**{k: v for k, v in _TOOL_OUTPUT.items() if k != "blocks"}, "content": "sunny"},
     "sunny", "llamaindex_tool_output", False),
    # not an envelope, or one around something else than text: as recorded
    ({"result": {"temp": 22}}, None, None, False),
    ({"result": "sunny", "unit": "C"}, None, None, False),
    ({"output": "sunny"}, None, None, False),
    ({"type": "tool", "data": {**_TOOL_MESSAGE, "content": [{"type": "image_url"}]}},
     None, None, False),
    ({"type": "ai", "data": {**_TOOL_MESSAGE, "type": "ai"}}, None, None, False),
    ({**_SERIALIZED, "id": ["langchain_core", "messages", "AIMessage"]}, None, None, False),
    ({"tool_name": "get_weather", "raw_output": "sunny"}, None, None, False),
    # a CallToolResult around something else than text, or one not understood: as recorded
    ({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}],
      "isError": False}, None, None, False),
    ({**_CALL_TOOL_RESULT, "isError": "yes"}, None, None, False),
    ({**_CALL_TOOL_RESULT, "unit": "C"}, None, None, False),
    ({"content": "sunny", "isError": False}, None, None, False),
])
def test_unwrap_result(value: Any, text: str | None, envelope: str | None,
                       failed: bool) -> None:
    recorded = json.dumps(value)
    assert unwrap_result(recorded) == (recorded if text is None else text, envelope, failed)


def test_a_result_that_is_no_json_is_text() -> None:
    for value in ("sunny", '{"result": "sunny"', "{'result': 'sunny'}", ""):
        assert unwrap_result(value) == (value, None, False)


def _tool_run(output: Any, status: str = "ok") -> Any:
    spans = [span("run", attrs={"openinference.span.kind": "AGENT"}),
             span("get_weather", "run", 1, {
                 "openinference.span.kind": "TOOL", "tool.name": "get_weather",
                 "input.value": '{"city": "Paris"}', "output.value": json.dumps(output),
                 "output.mime_type": "application/json"}, status=status)]
    return build_trajectory(trace(*spans), TrajectoryConfig())


def test_a_result_envelope_is_taken_off_and_its_source_says_so() -> None:
    step = _tool_run({"type": "tool", "data": _TOOL_MESSAGE}).tool_steps[0]
    assert step.result == "sunny" and step.status == "ok"
    assert step.sources["result"].endswith("(inside langchain_message)")


def test_an_envelope_that_records_a_failure_makes_the_call_failed() -> None:
    t = _tool_run({**_TOOL_OUTPUT, "blocks": [{"text": "no such city"}], "is_error": True})
    step = t.tool_steps[0]
    assert (step.status, step.error, step.result) == ("error", "no such city", "no such city")
    assert step.sources["status"] == "llamaindex_tool_output error flag"
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    assert "tool_call/runtime" in {f"{f.detector}/{f.kind}" for f in findings}


def test_an_mcp_call_the_server_answered_with_is_error_is_a_failed_call() -> None:
    """An MCP client's tools/call span recording the CallToolResult as its GenAI
    gen_ai.tool.call.result, without error.type nor an ERROR status: isError true is the
    call's failure (the MCP conventions' tool_error), its text the result."""
    def run(result: dict[str, Any]) -> Any:
        spans = [span("invoke_agent a", attrs={"gen_ai.operation.name": "invoke_agent",
                                               "gen_ai.agent.name": "a"}),
                 span("tools/call get_weather", "invoke_agent a", 1, {
                     "gen_ai.operation.name": "execute_tool", "mcp.method.name": "tools/call",
                     "gen_ai.tool.name": "get_weather",
                     "gen_ai.tool.call.arguments": '{"city": "Atlantis"}',
                     "gen_ai.tool.call.result": json.dumps(result)})]
        return build_trajectory(trace(*spans), TrajectoryConfig())
    t = run({"content": [{"type": "text", "text": "no such city"}], "isError": True})
    step = t.tool_steps[0]
    assert (step.status, step.error, step.result) == ("error", "no such city", "no such city")
    assert step.sources["status"] == "mcp_call_tool_result error flag"
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    assert "tool_call/runtime" in {f"{f.detector}/{f.kind}" for f in findings}
    step = run(_CALL_TOOL_RESULT).tool_steps[0]
    assert (step.status, step.error, step.result) == ("ok", None, "sunny")


def test_a_failed_span_keeps_its_own_error() -> None:
    step = _tool_run({"result": "Error executing tool", "is_error": True}, "error").tool_steps[0]
    assert step.status == "error" and step.result == "Error executing tool"
    assert "status" not in step.sources


def _told_run(told: dict[str, Any], tool_span: bool) -> Any:
    """A GenAI run whose tool result is only in the next LLM call's input (a
    tool_call_response part): the tool's span records none, or there is no tool span."""
    llm = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    ask = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1",
                                            "name": "get_weather",
                                            "arguments": {"city": "Atlantis"}}]}]
    answer = [{"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1",
                                          "response": told}]}]
    spans = [span("root", None, 0, {"gen_ai.operation.name": "invoke_agent",
                                    "gen_ai.agent.name": "a"}, end=1000),
             span("llm1", "root", 10, {**llm, "gen_ai.output.messages": json.dumps(ask)}),
             span("llm2", "root", 30, {**llm, "gen_ai.input.messages": json.dumps(answer)})]
    if tool_span:
        spans.append(span("tool", "root", 20, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.arguments": '{"city": "Atlantis"}'}))
    return build_trajectory(trace(*spans), TrajectoryConfig())


@pytest.mark.parametrize("tool_span", [True, False])
def test_a_call_tool_result_the_next_llm_call_was_told_is_unwrapped(tool_span: bool) -> None:
    """The result looked up in the next LLM call (the tool's span recorded none, or only the
    LLM output holds the call) goes through the same envelope as a span's own result."""
    failed = _told_run({"content": [{"type": "text", "text": "no such city"}],
                        "isError": True}, tool_span)
    step = failed.tool_steps[0]
    assert step.rebuilt is not tool_span
    assert (step.status, step.error) == ("error", "no such city")
    assert step.sources["status"] == "mcp_call_tool_result error flag"
    findings, _ = Detectors(DetectorsConfig()).evaluate(failed)
    assert "tool_call/runtime" in {f"{f.detector}/{f.kind}" for f in findings}
    step = _told_run(_CALL_TOOL_RESULT, tool_span).tool_steps[0]
    assert (step.status, step.error, step.result) == ("ok", None, "sunny")
