"""Traceloop's LlamaIndex instrumentation (issue 31, stacks not read): the agent workflow's
root is the agent, named by ``current_agent_name`` in the workflow's state (else by the steps
under it when the root never arrived or carries no state); the ``call_tool`` step is the tool
call, and LlamaIndex's ``ToolOutput.is_error`` its error. Table tests over the shapes the
recordings (tests/conformance/recordings/openllmetry-llamaindex) carry."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trajectory_factory import sid, span, trace

from otel_eval.base.model import Span
from otel_eval.base.steps import Step
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.conventions import read_span
from otel_eval.evaluate.trajectory import build_trajectory

SCOPE = "opentelemetry.instrumentation.llamaindex"


def _scoped(s: Span) -> Span:
    s.scope = SCOPE
    return s


def _call_tool(output: Any, name: str = "call_tool", **kw: Any) -> Span:
    attrs = {"traceloop.span.kind": "task", "traceloop.entity.name": "BaseWorkflowAgent.task",
             "tool.name": "get_weather", "tool.arguments": '{"city": "Atlantis"}',
             "traceloop.entity.output": output if isinstance(output, str) else json.dumps(output)}
    return _scoped(span(name, attrs=attrs, **kw))


def _read(s: Span) -> Step:
    step = Step(0, s.span_id, None, "other", s.name)
    read_span(step, s, s.attributes)
    return step


def _output(is_error: Any, raw: str = "unknown city: Atlantis") -> dict[str, Any]:
    return {"tool_name": "get_weather", "tool_kwargs": {"city": "Atlantis"},
            "tool_id": "call_1", "tool_output": {"raw_output": raw, "is_error": is_error}}


@pytest.mark.parametrize(("is_error", "status", "error", "unknown"), [
    (True, "error", "unknown city: Atlantis", None),
    (False, "ok", None, None),
    ("yes", "ok", None, "tool_output.is_error not understood"),
])
def test_the_call_tool_step_is_the_call_and_is_error_its_error(
        is_error: Any, status: str, error: str | None, unknown: str | None) -> None:
    step = _read(_call_tool(_output(is_error)))
    assert (step.kind, step.tool_name) == ("tool", "get_weather")
    assert step.arguments == {"city": "Atlantis"}
    assert step.result == "unknown city: Atlantis"
    assert (step.status, step.error) == (status, error)
    assert step.unknown.get("error") == unknown
    assert step.sources["tool_name"] == "openllmetry tool.name"


@pytest.mark.parametrize("output", ["not json", "[1, 2]", {"tool_output": "text"}, {}])
def test_a_call_tool_output_not_understood_is_no_error(output: Any) -> None:
    step = _read(_call_tool(output))
    assert step.kind == "tool" and step.status != "error"


def test_a_task_span_without_tool_arguments_stays_a_chain_step() -> None:
    s = _scoped(span("BaseWorkflowAgent.task", attrs={
        "traceloop.span.kind": "task", "traceloop.entity.name": "BaseWorkflowAgent.task",
        "traceloop.entity.output": json.dumps({"tool_output": {"is_error": True}})}))
    step = _read(s)
    assert step.kind == "chain" and step.status != "error"


def _root(output: Any | None, name: str = "FunctionAgent.workflow") -> Span:
    attrs = {"traceloop.span.kind": "workflow", "traceloop.entity.name": name}
    if output is not None:
        attrs["traceloop.entity.output"] = json.dumps(output)
    return _scoped(span(name, attrs=attrs, span_id=sid("root")))


def _state_step(parent: str | None, agent: str = "weather_agent") -> Span:
    return _scoped(span("setup", parent=parent, start=1, attrs={
        "traceloop.span.kind": "task", "traceloop.entity.name": "BaseWorkflowAgent.task",
        "traceloop.entity.output": json.dumps({"input": [], "current_agent_name": agent})}))


@pytest.mark.parametrize(("spans", "agent", "source"), [
    # the root's state names the agent
    (lambda: [_root({"result": {"current_agent_name": "weather_agent"}})], "weather_agent",
     "span"),
    # a streamed run: the root carries no state; its steps do
    (lambda: [_root(None), _state_step("root")], "weather_agent", "child_span"),
    # the root never arrived (a killed run): its steps name the agent
    (lambda: [_state_step("root")], "weather_agent", "child_span"),
    # neither: the class is LlamaIndex's, no name
    (lambda: [_root(None)], None, "unknown"),
])
def test_the_agent_workflow_is_the_agent_named_by_its_state(spans: Any, agent: str | None,
                                                            source: str) -> None:
    t = trace(*spans())
    traj = build_trajectory(t, TrajectoryConfig())
    assert (traj.agent, traj.agent_source) == (agent, source)


def test_a_workflow_of_another_scope_or_class_is_no_agent() -> None:
    other = span("FunctionAgent.workflow", attrs={"traceloop.span.kind": "workflow",
                                "traceloop.entity.name": "FunctionAgent.workflow"})
    assert _read(other).kind == "chain"  # not LlamaIndex's instrumentation
    assert _read(_root(None, "MyPipeline.workflow")).kind == "chain"
    assert _read(_root(None)).kind == "agent"


def test_a_workflow_of_two_agents_is_the_agent_it_began_with() -> None:
    """An AgentWorkflow that hands off (the multi_agent recording): the root's state names the
    agent that finished; the run is the one its first step's state names, and each step the
    agent the last state named (the hand-off the coordinator's, get_weather the weather
    agent's)."""
    def task(name: str, start: int, agent: str | None = None, tool: str | None = None) -> Span:
        attrs = {"traceloop.span.kind": "task", "traceloop.entity.name": "AgentWorkflow.task"}
        if agent is not None:
            attrs["traceloop.entity.output"] = json.dumps({"current_agent_name": agent})
        if tool is not None:
            attrs |= {"tool.name": tool, "tool.arguments": "{}",
                      "traceloop.entity.output": json.dumps({"tool_output": {"is_error": False}})}
        return _scoped(span(name, "AgentWorkflow.workflow", start, attrs))

    root = _root({"result": {"current_agent_name": "weather_agent"}}, "AgentWorkflow.workflow")
    root.span_id = sid("AgentWorkflow.workflow")
    t = build_trajectory(trace(root, task("setup1", 1, "triage_agent"),
                               task("call1", 2, tool="handoff"),
                               task("setup2", 3, "weather_agent"),
                               task("call2", 4, tool="get_weather")), TrajectoryConfig())
    assert (t.agent, t.agent_source) == ("triage_agent", "span")
    assert {s.tool_name: s.node for s in t.tool_steps} == {"handoff": "triage_agent",
                                                           "get_weather": "weather_agent"}
