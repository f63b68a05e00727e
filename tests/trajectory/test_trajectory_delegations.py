"""A sub-agent a tool call ran, its span beside the call's (``trajectory.delegations``): its
steps are the call's, so the delegation is one step of the run (``Trajectory.action_steps``),
as when the sub-agent's span is under the call's."""

from __future__ import annotations

import json

import pytest
from trajectory_factory import span, trace

from otel_eval.base.model import Span
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory


def _agent(name: str, parent: str | None, start: int, end: int) -> Span:
    return span(name, parent, start, {"gen_ai.operation.name": "invoke_agent",
                                      "gen_ai.agent.name": name}, end=end)


def _tool(name: str, parent: str, start: int, end: int, tool: str) -> Span:
    return span(name, parent, start, {"gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": tool}, end=end)


def _llm(name: str, parent: str, start: int, end: int, calls: tuple[str, ...] = (),
         told: tuple[str, ...] = ()) -> Span:
    """A chat span asking for ``calls`` (call ids c-<tool>) and told the results of ``told``."""
    out = [{"role": "assistant", "parts": [
        {"type": "tool_call", "id": f"c-{t}", "name": t, "arguments": {}} for t in calls]
        or [{"type": "text", "content": "done"}]}]
    sent = [{"role": "user", "parts": [{"type": "text", "content": "weather in Paris?"}]}]
    sent += [{"role": "tool", "parts": [{"type": "tool_call_response", "id": f"c-{t}",
                                         "response": "sunny"}]} for t in told]
    return span(name, parent, start, {"gen_ai.operation.name": "chat",
                                      "gen_ai.input.messages": json.dumps(sent),
                                      "gen_ai.output.messages": json.dumps(out)}, end=end)


def _nodes(*spans: Span) -> list[str | None]:
    t = build_trajectory(trace(*spans), TrajectoryConfig())
    return [s.tool_name for s in t.action_steps]


# (case, the member's agent span's start and end, the steps of the run)
BESIDE_A_SPAN = [
    ("inside the call's time", 31, 59, ["delegate"]),
    ("after the call ended: a hand-off", 61, 90, ["delegate", "get_weather"]),
]


@pytest.mark.parametrize(("case", "start", "end", "want"), BESIDE_A_SPAN,
                         ids=[c[0] for c in BESIDE_A_SPAN])
def test_a_member_beside_the_call_that_ran_it(case: str, start: int, end: int,
                                             want: list[str]) -> None:
    """Agno's shape: the member's span under the team's, beside the delegate call's."""
    assert _nodes(
        _agent("team", None, 0, 100),
        _llm("ask", "team", 1, 20, calls=("delegate",)),
        _tool("delegate", "team", 30, 60, "delegate"),
        _agent("member", "team", start, end),
        _tool("get_weather", "member", start + 1, start + 2, "get_weather"),
        _llm("answer", "team", 95, 99, told=("delegate",)),
    ) == want


@pytest.mark.parametrize(("answered", "want"), [
    (True, ["delegate"]),
    (False, ["delegate", "get_weather"]),  # never told its result: a hand-off, maybe
])
def test_a_member_a_rebuilt_call_ran(answered: bool, want: list[str]) -> None:
    """CrewAI's and Haystack's shape: no tool span, the call rebuilt from the reply; the
    member ran before the team's next LLM call, which was told the call's result."""
    last = [_llm("answer", "team", 95, 99, told=("delegate",))] if answered else []
    assert _nodes(
        _agent("team", None, 0, 100),
        _llm("ask", "team", 1, 20, calls=("delegate",)),
        _agent("member", "team", 30, 60),
        _llm("member ask", "member", 31, 40, calls=("get_weather",)),
        _llm("member answer", "member", 50, 59, told=("get_weather",)),
        *last,
    ) == want
