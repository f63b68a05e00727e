"""A remote agent's tokens recorded only on its ``invoke_agent`` client span are the run's.

The GenAI conventions record ``gen_ai.usage.*`` on ``invoke_agent`` spans (client and
internal, Recommended); an agent whose calls run in another service (OpenAI Assistants,
Bedrock Agents, a remote A2A agent) leaves its usage there alone. Summed over LLM steps only,
a run whose work was that agent's had ``usage`` unknown and no token budget. An agent span's
usage over LLM spans also in the trace (its own calls, or the remote side's spans joined to
it) is theirs: counted once, never added to them.
"""

from __future__ import annotations

import pytest

from otel_eval.base.model import Span, Trace
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import budget
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.trajectory import build_trajectory

TRACE = "ab" * 16


def _agent(span_id: str, parent: str | None, name: str, tokens: tuple[int, int] | None,
           kind: str = "internal", t: int = 1) -> Span:
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
             "gen_ai.provider.name": "openai"}
    if tokens is not None:
        attrs |= {"gen_ai.usage.input_tokens": tokens[0], "gen_ai.usage.output_tokens": tokens[1]}
    return Span(TRACE, span_id, parent, f"invoke_agent {name}", t, 100 - t, kind=kind,
                attributes=attrs)


def _chat(span_id: str, parent: str, tokens: tuple[int, int], t: int) -> Span:
    return Span(TRACE, span_id, parent, "chat gpt-4o", t, t + 1, kind="client", attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": tokens[0],
        "gen_ai.usage.output_tokens": tokens[1]})


def _run(*spans: Span) -> Trajectory:
    return build_trajectory(Trace(TRACE, list(spans), "complete"), TrajectoryConfig())


def test_a_remote_agents_tokens_on_its_client_span_are_the_runs() -> None:
    t = _run(_agent("01" * 8, None, "triage", None), _chat("02" * 8, "01" * 8, (100, 10), 2),
             _agent("03" * 8, "01" * 8, "weather", (500, 50), kind="client", t=5))
    assert t.usage()["input_tokens"] == 600 and t.usage()["output_tokens"] == 60
    found = budget.detect(t, DetectorsConfig(), Context(budgets={"input_tokens": 550}))
    assert [(f.kind, f.attributes["value"]) for f in found] == [("input_tokens_exceeded", 600)]
    alone = _run(_agent("03" * 8, None, "weather", (500, 50), kind="client"))
    assert alone.usage()["input_tokens"] == 500  # was unknown (None)


def test_an_agents_usage_over_llm_spans_in_the_trace_is_theirs_counted_once() -> None:
    # the remote agent's own spans joined to its client span: its calls, not its total
    joined = _run(_agent("01" * 8, None, "triage", None), _chat("02" * 8, "01" * 8, (100, 10), 2),
                  _agent("03" * 8, "01" * 8, "weather", (500, 50), kind="client", t=5),
                  _agent("04" * 8, "03" * 8, "weather", (500, 50), kind="server", t=6),
                  _chat("05" * 8, "04" * 8, (200, 20), 7), _chat("06" * 8, "04" * 8, (300, 30), 9))
    assert joined.usage()["input_tokens"] == 600 and joined.usage()["output_tokens"] == 60
    # an agent reporting its run's totals over its calls and a remote agent's (Agent
    # Framework's invoke_agent): each counted once
    nested = _run(_agent("01" * 8, None, "triage", (600, 60)),
                  _chat("02" * 8, "01" * 8, (100, 10), 2),
                  _agent("03" * 8, "01" * 8, "weather", (500, 50), kind="client", t=5))
    assert nested.usage()["input_tokens"] == 600
    only_total = _run(_agent("01" * 8, None, "triage", (600, 60)),
                      _agent("03" * 8, "01" * 8, "weather", (500, 50), kind="client", t=5))
    assert only_total.usage()["input_tokens"] == 500  # the inner agent's, not 1,100
    assert budget.measure(only_total, set())["input_tokens"] == 500


def test_a_remote_agents_cost_is_what_its_span_recorded_never_a_price_of_its_sum() -> None:
    """A sum of many calls' tokens is priced at no one call's tier: a remote agent's cost is
    the one its span recorded, else unknown (said, naming the agent)."""
    t = _run(_agent("01" * 8, None, "triage", None), _chat("02" * 8, "01" * 8, (100, 10), 2),
             _agent("03" * 8, "01" * 8, "weather", (500, 50), kind="client", t=5))
    total, unknown, why = budget.cost(t)
    assert total == pytest.approx(budget.step_cost(t.llm_steps[0]))
    assert why == ["no cost recorded for the agent weather"] and unknown == ["<no model>"]


def test_a_step_rebuilt_on_a_spans_id_does_not_cut_the_walk_up() -> None:
    """A managed agent's call rebuilt on its tool span's id (``code_actions``: parent its own
    span) comes after the span's own step: the span's own step says its parent, so the LLM
    call under the tool still covers the agent above it (its run totals not added)."""
    from otel_eval.base.steps import Step

    steps = [Step(0, "a", None, "agent", "invoke_agent outer", input_tokens=600,
                  output_tokens=60),
             Step(1, "t", "a", "tool", "execute_tool helper", tool_name="helper"),
             Step(2, "l", "t", "llm", "chat", input_tokens=100, output_tokens=10),
             Step(3, "t", "t", "tool", "helper", tool_name="helper", rebuilt=True,
                  in_code=True)]
    t = Trajectory(TRACE, "test", "complete", steps)
    assert [s.span_id for s in t.usage_steps] == ["l"]
    assert t.usage()["input_tokens"] == 100
