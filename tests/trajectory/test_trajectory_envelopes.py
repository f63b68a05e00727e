"""Envelopes around a tool's arguments taken off; arguments not understood are unknown."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.evaluate.trajectory.envelopes import MAX_LITERAL_CHARS, fits, unwrap

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
