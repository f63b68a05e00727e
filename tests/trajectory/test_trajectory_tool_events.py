"""A tool call's error event recorded as a tool span under the call (BeeAI's OpenInference
instrumentation: a TOOL span named ``error``, no ``tool.name``, in ERROR) is that call's
error, not a call; a real tool call under a tool span stays a call."""

from __future__ import annotations

import json

import pytest
from trajectory_factory import span, trace

from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory

CFG = TrajectoryConfig()
AGENT = {"openinference.span.kind": "AGENT", "agent.name": "weather_agent"}
ARGS = json.dumps({"input": {"city": "Atlantis"}, "options": None})
TOOL = {"openinference.span.kind": "TOOL", "tool.name": "get_weather", "input.value": ARGS}
# what BeeAI 0.1.85 / openinference-instrumentation-beeai 0.1.30 emit for the error event
EVENT = {"openinference.span.kind": "TOOL", "metadata.path": "tool.custom.get_weather.error",
         "input.value": json.dumps({"error": "Tool Error", "input": {"city": "Atlantis"},
                                    "options": None}),
         "output.value": "ToolError: Tool Error\n  ValueError: unknown city: Atlantis"}
RUN = {"openinference.span.kind": "TOOL", "tool.name": "lookup", "input.value": "{}"}


def _build(parent_attrs: dict[str, object], parent_status: str, child_name: str,
           child_attrs: dict[str, object], child_status: str) -> tuple[list[str], list[str]]:
    t = build_trajectory(trace(
        span("weather_agent", None, 0, AGENT, end=100),
        span("get_weather", "weather_agent", 1, parent_attrs, status=parent_status,
             message="Tool Error" if parent_status == "error" else "", end=50),
        span(child_name, "get_weather", 2, child_attrs, status=child_status,
             message="Tool Error" if child_status == "error" else "")), CFG)
    return ([f"{s.tool_name}:{s.status}" for s in t.tool_steps],
            [s.kind for s in t.steps])


CASES = [
    ("error event folded into a failed call", TOOL, "error", "error", EVENT, "error",
     ["get_weather:error"], ["agent", "tool", "other"]),
    ("error event gives its error to a call not marked failed", TOOL, "unset", "error", EVENT,
     "error", ["get_weather:error"], ["agent", "tool", "other"]),
    ("a real tool call under a tool span", TOOL, "unset", "lookup", RUN, "unset",
     ["get_weather:ok", "lookup:ok"], ["agent", "tool", "tool"]),
    ("a failed real call under a tool span", TOOL, "unset", "lookup", RUN, "error",
     ["get_weather:ok", "lookup:error"], ["agent", "tool", "tool"]),
    ("a tool named error is a call", TOOL, "unset", "error", {**EVENT, "tool.name": "error"},
     "error", ["get_weather:ok", "error:error"], ["agent", "tool", "tool"]),
    ("an error span not in error is a call", TOOL, "unset", "error", EVENT, "unset",
     ["get_weather:ok", "error:ok"], ["agent", "tool", "tool"]),
    ("an error span under an agent span, not a tool span", AGENT, "unset", "error", EVENT,
     "error", ["error:error"], ["agent", "agent", "tool"]),
]


@pytest.mark.parametrize(("parent", "parent_status", "child", "child_attrs", "child_status",
                          "tools", "kinds"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_tool_error_event(parent: dict[str, object], parent_status: str, child: str,
                          child_attrs: dict[str, object], child_status: str, tools: list[str],
                          kinds: list[str]) -> None:
    assert _build(parent, parent_status, child, child_attrs, child_status) == (tools, kinds)


def test_folded_event_says_why_and_gives_its_error() -> None:
    t = build_trajectory(trace(
        span("weather_agent", None, 0, AGENT, end=100),
        span("get_weather", "weather_agent", 1, TOOL, end=50),
        span("error", "get_weather", 2, EVENT, status="error", message="Tool Error")), CFG)
    call, event = t.steps[1], t.steps[2]
    assert (call.status, call.error) == ("error", "Tool Error")
    assert event.sources["kind"] == f"the error event of its parent tool step {call.span_id}"
