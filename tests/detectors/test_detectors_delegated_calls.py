"""A sub-agent a tool call ran makes calls of its own, which the rules that compare calls (loop,
recovery, reference) see the same way whether its span is under the delegating call's span
(AutoGen's agent called as a tool, the OpenAI Agents SDK's ``as_tool``) or beside it (Agno's
team member, a smolagents managed agent): the spans are read and the rules run as in ``eval``.
Each agent's calls stay its own sequence: the coordinator's and the sub-agent's are never
compared with each other by the loop rules, nor a sub-agent's calls in one invocation with
those in another (each invocation is its own sequence, as a run of that agent alone would be;
a repeated invocation is the coordinator's repeated delegating call), and a failure is
recovered from only within the agent run where it happened."""

from __future__ import annotations

import json

import pytest
from trajectory.trajectory_factory import span, trace

from otel_eval.base.model import Span
from otel_eval.base.results import Finding
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors, reference
from otel_eval.evaluate.detectors.calls import Context, RefCall, Reference
from otel_eval.evaluate.detectors.config import DetectorsConfig, LoopConfig
from otel_eval.evaluate.trajectory import build_trajectory

SHAPES = ("under the call", "beside the call")
PARIS = {"city": "Paris"}


def _agent(name: str, parent: str | None, start: int, end: int) -> Span:
    return span(name, parent, start, {"gen_ai.operation.name": "invoke_agent",
                                      "gen_ai.agent.name": name}, end=end)


def _tool(name: str, parent: str, start: int, end: int, tool: str, arguments: object,
          result: str, *, failed: bool = False) -> Span:
    return span(name, parent, start, {"gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": tool,
                                      "gen_ai.tool.call.arguments": json.dumps(arguments),
                                      "gen_ai.tool.call.result": result},
                end=end, status="error" if failed else "unset",
                message="boom" if failed else "")


def _run(shape: str, member_calls: list[tuple[str, object, str, bool]],
         delegations: int = 1, via: str = "weather_agent") -> list[Span]:
    """A coordinator (``team``) that delegates ``delegations`` times through its tool ``via``
    with the same task; each time the member makes ``member_calls`` (tool, arguments,
    result, failed), its span under the call's or beside it."""
    spans = [_agent("team", None, 0, 10_000)]
    for d in range(delegations):
        at = 100 + d * 1000
        call = f"delegate{d}"
        spans.append(_tool(call, "team", at, at + 900, via, {"task": "weather"}, "sunny"))
        member = f"member{d}"
        spans.append(_member(member, call if shape == SHAPES[0] else "team", at + 1, at + 899))
        for k, (tool, arguments, result, failed) in enumerate(member_calls):
            spans.append(_tool(f"{member}-{k}", member, at + 10 + 10 * k, at + 15 + 10 * k,
                               tool, arguments, result, failed=failed))
    return spans


def _member(name: str, parent: str, start: int, end: int) -> Span:
    """The sub-agent's span: its agent name ``weather_member`` whichever run of it."""
    s = _agent(name, parent, start, end)
    s.attributes["gen_ai.agent.name"] = "weather_member"
    return s


def _findings(spans: list[Span]) -> list[str]:
    """The loop and recovery findings of the run of ``spans``."""
    return sorted(f"{f.detector}/{f.kind}" for f in _found(spans))


def _found(spans: list[Span], config: DetectorsConfig | None = None) -> list[Finding]:
    t = build_trajectory(trace(*spans), TrajectoryConfig())
    found, _ = Detectors(config or DetectorsConfig()).evaluate(t, None)
    return [f for f in found if f.detector in ("loop", "recovery")]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sub_agent_repeating_its_call_is_a_loop_in_both_shapes(shape: str) -> None:
    """The member calls get_weather(Paris) four times, the same result each time."""
    calls = [("get_weather", PARIS, "sunny", False)] * 4
    assert _findings(_run(shape, calls)) == ["loop/repeated_call"]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sub_agent_retrying_a_failing_call_is_seen_in_both_shapes(shape: str) -> None:
    calls = [("get_weather", PARIS, "", True)] * 2
    assert _findings(_run(shape, calls)) == ["loop/repeated_call",
                                             "recovery/repeated_failing_call"]


@pytest.mark.parametrize("shape", SHAPES)
def test_the_coordinator_and_its_member_are_two_sequences(shape: str) -> None:
    """One call each, with the delegating call's own arguments: no agent repeated itself,
    whether the member's span is under the call or beside it."""
    calls = [("weather_agent", {"task": "weather"}, "sunny", False)]
    assert _findings(_run(shape, calls)) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_a_reference_compares_the_members_calls_in_both_shapes(shape: str) -> None:
    """The calls compared with a reference are the same in both shapes: the delegation and
    the member's call, in order."""
    calls = [("get_weather", PARIS, "sunny", False)]
    t = build_trajectory(trace(*_run(shape, calls)), TrajectoryConfig())
    ref = Reference("t1", (RefCall("weather_agent", {"task": "weather"}),
                           RefCall("get_weather", PARIS)), match="exact")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=ref))
    assert f.kind == "match", f.message



@pytest.mark.parametrize("shape", SHAPES)
def test_a_sub_agent_invoked_twice_is_two_sequences(shape: str) -> None:
    """The coordinator delegates the same task twice, the member looks the weather up once
    each time: the repeat is the coordinator's (its delegating call made twice), not the
    member's, whose calls are compared within each of its invocations."""
    calls = [("get_weather", PARIS, "sunny", False)]
    (f,) = _found(_run(shape, calls, delegations=2))
    assert (f.kind, f.attributes["tool"]) == ("repeated_call", "weather_agent")


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sub_agent_repeating_within_each_invocation_is_a_loop_of_each(shape: str) -> None:
    calls = [("get_weather", PARIS, "sunny", False)] * 2
    found = _found(_run(shape, calls, delegations=2))
    assert sorted((f.kind, str(f.attributes["tool"]), len(f.step_indexes)) for f in found) == [
        ("repeated_call", "get_weather", 2), ("repeated_call", "get_weather", 2),
        ("repeated_call", "weather_agent", 2)]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sub_agent_reworded_across_invocations_is_no_circle(shape: str) -> None:
    """The member reads a missing file once per invocation, spelled three ways, through a
    delegating call read-only by name (``search_agent``): three invocations, each a single
    look, are no circle of the member's."""
    missing = "<returncode>1</returncode>\n<output>\ncat: {p}: No such file or directory\n"
    spans = _run(shape, [("bash", {"command": "cat src/pkg/parser.py"},
                          missing.format(p="src/pkg/parser.py"), False)],
                 delegations=3, via="search_agent")
    for k, path in ((1, "src/parser.py"), (2, "pkg/parser.py")):
        inner = next(s for s in spans if s.name == f"member{k}-0")
        inner.attributes["gen_ai.tool.call.arguments"] = json.dumps({"command": f"cat {path}"})
        inner.attributes["gen_ai.tool.call.result"] = missing.format(p=path)
    assert _findings(spans) == ["loop/repeated_call"]



@pytest.mark.parametrize("shape", SHAPES)
def test_a_sub_agent_failure_is_recovered_only_within_its_invocation(shape: str) -> None:
    """The member's only call fails in each invocation: neither is recovered from by the
    coordinator's next delegating call (another agent's call), nor by the member's call in
    the next invocation (another run of it): each invocation gave up."""
    calls = [("get_weather", PARIS, "", True)]
    found = _found(_run(shape, calls, delegations=2))
    assert sorted(f"{f.detector}/{f.kind}" for f in found) == [
        "loop/repeated_call", "recovery/gave_up", "recovery/gave_up"]
    assert [f.attributes["retries"] for f in found if f.detector == "recovery"] == [0, 0]



@pytest.mark.parametrize("shape", SHAPES)
def test_a_coordinator_failure_is_not_recovered_by_its_member(shape: str) -> None:
    """The reverse: the delegating call fails (it timed out) after the member's lookup
    succeeded, and the coordinator makes no other call: the member's success is another
    agent's call, no recovery of the coordinator's."""
    spans = _run(shape, [("get_weather", PARIS, "sunny", False)])
    call = next(s for s in spans if s.name == "delegate0")
    call.status, call.status_message = "error", "timed out"
    (f,) = _found(spans)
    assert (f.kind, f.attributes["tool"]) == ("gave_up", "weather_agent")



ANSWER = "The weather in Paris is sunny today, around twenty degrees with a light breeze."


def _answering(spans: list[Span], answers: int = 1) -> list[Span]:
    """``spans`` with each member's LLM replying ``ANSWER`` ``answers`` times, after its
    calls."""
    out = [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]
    replies = [span(f"{m.name}-llm{k}", m.name, m.start_ns + 500 + 10 * k,
                    {"gen_ai.operation.name": "chat",
                     "gen_ai.output.messages": json.dumps(out)}, end=m.start_ns + 505 + 10 * k)
               for m in spans if m.name.startswith("member") and "-" not in m.name
               for k in range(answers)]
    return sorted(spans + replies, key=lambda s: s.start_ns)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sub_agent_answering_alike_in_two_invocations_is_no_stagnation(shape: str) -> None:
    """The coordinator delegates the same task twice and the member answers alike each time:
    its outputs are compared within each invocation (one output each), not with the other
    run's, even when two outputs in a row make stagnation (d)."""
    spans = _answering(_run(shape, [("get_weather", PARIS, "sunny", False)], delegations=2))
    found = _found(spans, DetectorsConfig(loop=LoopConfig(stagnation_min_run=2)))
    assert sorted((f.kind, str(f.attributes.get("tool"))) for f in found) == [
        ("repeated_call", "weather_agent")]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sub_agent_answering_alike_within_one_invocation_is_stagnation(shape: str) -> None:
    spans = _answering(_run(shape, [("get_weather", PARIS, "sunny", False)]), answers=3)
    assert _findings(spans) == ["loop/stagnation"]
