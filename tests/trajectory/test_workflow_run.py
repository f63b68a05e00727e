"""A run whose root is the GenAI conventions' workflow span (``invoke_workflow
{gen_ai.workflow.name}``, "Invoke GenAI workflow": its ``gen_ai.input.messages`` /
``gen_ai.output.messages`` the workflow's), running several agents one after another: the
run's task and answer are the workflow's, not the first agent's."""

from __future__ import annotations

import json

import pytest
from trajectory_factory import span, trace

from otel_eval.base.results import Evaluation
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory

TASK = "Plan a trip to Paris"
FINAL = "Day 1: the Louvre. Day 2: Versailles."


def _in(text: str) -> str:
    return json.dumps([{"role": "user", "parts": [{"type": "text", "content": text}]}])


def _out(text: str) -> str:
    return json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}],
                        "finish_reason": "stop"}])


def _agent(name: str, start: int, asked: str, said: str,
           parent: str = "invoke_workflow trip") -> list:
    return [span(f"invoke_agent {name}", parent, start, {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
                "gen_ai.input.messages": _in(asked), "gen_ai.output.messages": _out(said)},
                 end=start + 40),
            span(f"chat {name}", f"invoke_agent {name}", start + 1, {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": _in(asked), "gen_ai.output.messages": _out(said),
                "gen_ai.response.finish_reasons": ["stop"]})]


@pytest.mark.parametrize("first_said", ["Museums: the Louvre; Versailles.", ""])
def test_a_workflow_s_task_and_answer_are_its_own(first_said: str) -> None:
    """The researcher's notes (or its empty hand-over) were read as the run's answer, and the
    task as the researcher's input: the first agent of the workflow was taken for the run's,
    its result first, whatever the workflow span recorded."""
    t = build_trajectory(trace(
        span("invoke_workflow trip", None, 0, {
            "gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "trip",
            "gen_ai.input.messages": _in(TASK), "gen_ai.output.messages": _out(FINAL)},
             end=100),
        *_agent("researcher", 1, f"Find sights for: {TASK}", first_said),
        *_agent("writer", 50, first_said or TASK, FINAL)), TrajectoryConfig())
    body = Evaluation(t).to_json()
    assert (body["input"], body["output"]) == (TASK, FINAL)


def test_a_workflow_that_recorded_no_messages_reads_its_agent() -> None:
    """Google ADK's ``invoke_workflow`` root records no messages: the run's agent gives
    them, as before."""
    t = build_trajectory(trace(
        span("invoke_workflow weather_agent", None, 0, {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.workflow.name": "weather_agent"}, end=100),
        *_agent("weather_agent", 1, TASK, FINAL, "invoke_workflow weather_agent")),
        TrajectoryConfig())
    body = Evaluation(t).to_json()
    assert (body["input"], body["output"]) == (TASK, FINAL)
