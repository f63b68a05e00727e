"""The calls under a span a sampler dropped (a cycle of an agent: a turn, a step, a graph
node), as the loop rules see them: the group of steps under it that ``place_missing_parents``
gives to an agent is compared with that agent's other calls in the same invocation
(``calls.invocations``), a sub-agent's too; a group no agent's calls name is of no known
agent's run, compared with no other agent's calls."""

from __future__ import annotations

import json

import pytest
from trajectory.trajectory_factory import sid, span, trace

from otel_eval.base.model import Span
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.trajectory import build_trajectory

SHAPES = ("under the call", "beside the call")
PARIS = {"city": "Paris"}


def _agent(name: str, parent: str | None, start: int, end: int, agent: str) -> Span:
    return span(name, parent, start, {"gen_ai.operation.name": "invoke_agent",
                                      "gen_ai.agent.name": agent}, end=end)


def _chat(name: str, parent: str, start: int, call_id: str, tool: str, arguments: object,
          told: str | None = None) -> Span:
    """An LLM call asking for ``tool`` (call id ``call_id``), told the result of ``told``."""
    out = [{"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": tool,
                                            "arguments": arguments}]}]
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
             "gen_ai.output.messages": json.dumps(out)}
    if told is not None:
        attrs["gen_ai.input.messages"] = json.dumps([{"role": "tool", "parts": [
            {"type": "tool_call_response", "id": told, "response": "sunny"}]}])
    return span(name, parent, start, attrs, end=start + 5)


def _tool(name: str, parent: str, start: int, call_id: str, tool: str, arguments: object,
          end: int | None = None) -> Span:
    return span(name, parent, start, {"gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id,
                                      "gen_ai.tool.call.arguments": json.dumps(arguments),
                                      "gen_ai.tool.call.result": "sunny"},
                end=start + 5 if end is None else end)


def _cycles(agent: str, start: int, calls: int) -> list[Span]:
    """``calls`` cycles of ``agent``: a ``think`` span holding the LLM call that asks for
    get_weather(Paris), then an ``act`` span holding the call."""
    out = []
    for k in range(calls):
        at, call_id = start + 100 * k, f"call_{agent}{k:020d}"
        out += [span(f"{agent}-think{k}", agent, at, end=at + 40),
                _chat(f"{agent}-llm{k}", f"{agent}-think{k}", at + 1, call_id, "get_weather",
                      PARIS),
                span(f"{agent}-act{k}", agent, at + 50, end=at + 90),
                _tool(f"{agent}-tool{k}", f"{agent}-act{k}", at + 51, call_id, "get_weather",
                      PARIS)]
    return out


def _delegating(shape: str, calls: int) -> list[Span]:
    """A coordinator (``team``) that runs its member ``weather_member`` through its tool
    ``weather_agent``; the member calls get_weather(Paris) ``calls`` times, one per cycle."""
    delegation = "call_" + "d" * 24
    member_parent = "delegate" if shape == SHAPES[0] else "team"
    return [_agent("team", None, 0, 10_000, "team"),
            _chat("team-llm", "team", 10, delegation, "weather_agent", {"task": "weather"}),
            _tool("delegate", "team", 100, delegation, "weather_agent", {"task": "weather"},
                  end=5_000),
            _agent("member", member_parent, 101, 4_999, "weather_member"),
            *_cycles("member", 200, calls)]


def _repeats(spans: list[Span], dropped: str = "") -> list[tuple[str, int]]:
    """The loop findings of the run without the span ``dropped``: kind and calls."""
    kept = [s for s in spans if s.span_id != sid(dropped)]
    t = build_trajectory(trace(*kept), TrajectoryConfig())
    found, _ = Detectors(DetectorsConfig()).evaluate(t, None)
    return [(f.kind, len(f.step_indexes)) for f in found if f.detector == "loop"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dropped", ["member-act0", "member-act1"])
def test_a_sub_agents_cycle_under_a_missing_span_is_still_of_its_invocation(
        shape: str, dropped: str) -> None:
    """The member's three get_weather calls, one cycle's span dropped: the steps under it are
    the member's (its LLM asked for the call) and part of the same invocation of it: the
    loop is three calls, as with every span."""
    spans = _delegating(shape, 3)
    assert _repeats(spans) == [("repeated_call", 3)]
    assert _repeats(spans, dropped) == [("repeated_call", 3)]


def _unnamed(spans: list[Span]) -> list[Span]:
    """``spans`` with the coordinator's span named by its framework's default (``Agent``,
    ``invoke_agent``): an agent of no known name, its steps' node None."""
    team = next(s for s in spans if s.span_id == sid("team"))
    team.name, team.attributes["gen_ai.agent.name"] = "invoke_agent", "Agent"
    return spans


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("coordinator", ["named", "unnamed"])
def test_a_sub_agent_whose_own_span_is_missing_is_no_run_of_its_coordinator(
        shape: str, coordinator: str) -> None:
    """The member looks the weather up once, then the coordinator, told only its answer,
    looks it up itself. Without the member's span its steps are of no known agent (the
    coordinator's calls never name theirs): another run than the coordinator's, named or
    not, so the two lookups are no agent repeating itself."""
    told = "call_" + "d" * 24
    spans = [*_delegating(shape, 1),
             _chat("team-llm2", "team", 6_000, "call_" + "c" * 24, "get_weather", PARIS,
                   told=told),
             _tool("team-tool", "team", 6_100, "call_" + "c" * 24, "get_weather", PARIS)]
    if coordinator == "unnamed":
        spans = _unnamed(spans)
    assert _repeats(spans) == []
    assert _repeats(spans, "member") == []


@pytest.mark.parametrize("dropped", ["team-act0", "team-act1"])
def test_an_unnamed_agents_cycle_under_a_missing_span_is_still_its_own(dropped: str) -> None:
    """An agent of no known name calls get_weather(Paris) three times, one cycle's span
    dropped: the group under it is that agent's (its LLM asked for the call), the loop
    three calls, as when the agent is named."""
    spans = _unnamed([_agent("team", None, 0, 10_000, "team"), *_cycles("team", 200, 3)])
    assert _repeats(spans) == [("repeated_call", 3)]
    assert _repeats(spans, dropped) == [("repeated_call", 3)]
