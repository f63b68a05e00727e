"""Convention-independent span readers (issue 31, conventions as they move): cache-write
tokens, cost recorded on the span with its source (before price lists), a command tool's
exit code. Values present but not understood stay unknown, never a value or a finding."""

from __future__ import annotations

from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.base.model import SpanEvent
from otel_eval.base.steps import Step
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.conventions import fields as fields_module
from otel_eval.evaluate.conventions import read_span
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig
from otel_eval.evaluate.detectors.config import BudgetsConfig
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.evaluate.trajectory.prices import model_prices

_CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
         "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.output_tokens": 100}
_TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "bash",
         "gen_ai.tool.call.arguments": '{"command": "make test"}'}


def _read(attrs: dict[str, Any], name: str = "s", **kw: Any) -> Step:
    s = span(name, attrs=attrs, **kw)
    step = Step(0, s.span_id, None, "other", s.name)
    read_span(step, s, s.attributes)
    return step


@pytest.mark.parametrize(("attrs", "tokens", "source", "unknown"), [
    ({"gen_ai.usage.cache_write.input_tokens": 25}, 25,
     "genai gen_ai.usage.cache_write.input_tokens", None),
    ({"gen_ai.usage.cache_creation.input_tokens": 30}, 30,
     "genai gen_ai.usage.cache_creation.input_tokens", None),
    ({"gen_ai.usage.cache_write.input_tokens": 25,  # the current name wins
      "gen_ai.usage.cache_creation.input_tokens": 30}, 25,
     "genai gen_ai.usage.cache_write.input_tokens", None),
    ({"gen_ai.usage.cache_write.input_tokens": "12"}, 12,
     "genai gen_ai.usage.cache_write.input_tokens", None),
    ({"gen_ai.usage.cache_write.input_tokens": "lots"}, None, None,
     "gen_ai.usage.cache_write.input_tokens not understood"),
    ({"gen_ai.usage.cache_write.input_tokens": -3}, None, None,
     "gen_ai.usage.cache_write.input_tokens not understood"),
    ({}, None, None, None),
])
def test_cache_write_tokens(attrs: dict[str, Any], tokens: int | None, source: str | None,
                            unknown: str | None) -> None:
    step = _read(_CHAT | attrs)
    assert step.kind == "llm"
    assert step.cache_write_tokens == tokens
    assert step.sources.get("cache_write_tokens") == source
    assert step.unknown.get("cache_write_tokens") == unknown


_READ = "gen_ai.usage.cache_read.input_tokens"
_WRITE = "gen_ai.usage.cache_write.input_tokens"


@pytest.mark.parametrize(("attrs", "tokens", "source", "unknown"), [
    ({_READ: 900}, 900, f"genai {_READ}", None),
    ({"gen_ai.usage.cache_read_input_tokens": 900}, 900,
     "openllmetry gen_ai.usage.cache_read_input_tokens", None),
    ({"llm.token_count.prompt_details.cache_read": "900"}, 900,
     "openinference llm.token_count.prompt_details.cache_read", None),
    ({_READ: 900, "gen_ai.usage.cache_read_input_tokens": 5}, 900, f"genai {_READ}", None),
    ({_READ: "lots"}, None, None, f"{_READ} not understood"),
    ({_READ: -1}, None, None, f"{_READ} not understood"),
    ({}, None, None, None),
])
def test_cache_read_tokens(attrs: dict[str, Any], tokens: int | None, source: str | None,
                           unknown: str | None) -> None:
    step = _read(_CHAT | attrs)
    assert step.cache_read_tokens == tokens
    assert step.sources.get("cache_read_tokens") == source
    assert step.unknown.get("cache_read_tokens") == unknown


@pytest.mark.parametrize(("attrs", "tokens"), [
    ({"gen_ai.usage.cache_creation_input_tokens": 40}, 40),  # OpenLLMetry
    ({"llm.token_count.prompt_details.cache_write": 40}, 40),  # OpenInference
])
def test_cache_write_tokens_of_the_other_conventions(attrs: dict[str, Any],
                                                     tokens: int) -> None:
    assert _read(_CHAT | attrs).cache_write_tokens == tokens


_SONNET = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "claude-sonnet-4-5",
           "gen_ai.usage.input_tokens": 10_000, "gen_ai.usage.output_tokens": 100}


def _cost_findings(attrs: dict[str, Any], limit: float) -> tuple[float | None, list[str]]:
    t = build_trajectory(trace(span("chat", attrs=attrs)), TrajectoryConfig())
    config = DetectorsConfig(budgets=BudgetsConfig(cost_usd=limit))
    return t.steps[0].cost_usd, [f.kind for f in Detectors(config).evaluate(t)[0]
                                 if f.detector == "budget"]


def test_cached_input_tokens_are_priced_at_the_cache_rates() -> None:
    """Cache-read tokens (part of ``input_tokens``, as the conventions ask) were never read
    and every input token was priced at the full input rate: a cache-heavy run cost 3x what
    it did and overran a cost budget it kept. Cache-write tokens were read but priced at the
    input rate too."""
    row = model_prices("claude-sonnet-4-5")
    assert row is not None and row.cache_read is not None and row.cache_write is not None
    assert row.cache_read < row.input < row.cache_write
    cost, kinds = _cost_findings(_SONNET | {_READ: 8000, _WRITE: 1000}, 0.02)
    assert cost == pytest.approx(1000 * row.input + 8000 * row.cache_read
                                 + 1000 * row.cache_write + 100 * row.output)
    assert 10_000 * row.input + 100 * row.output > 0.02 > cost  # the full rate overran it
    assert kinds == []
    # no cached tokens (or a count of 0): priced as before, every input token at its rate
    plain = 10_000 * row.input + 100 * row.output
    assert _cost_findings(_SONNET, 1.0)[0] == plain
    assert _cost_findings(_SONNET | {_READ: 0, _WRITE: 0}, 1.0)[0] == plain


def test_cached_tokens_beyond_input_tokens_are_counted_beside_them() -> None:
    """Counts that cannot be part of ``input_tokens`` (more than it) are the provider's
    separate buckets (Anthropic's own usage, copied as it comes): the input tokens are the
    uncached ones, the cached ones priced beside them."""
    row = model_prices("claude-sonnet-4-5")
    assert row is not None and row.cache_read is not None
    cost, _ = _cost_findings(_SONNET | {"gen_ai.usage.input_tokens": 50, _READ: 9000}, 1.0)
    assert cost == pytest.approx(50 * row.input + 9000 * row.cache_read + 100 * row.output)


@pytest.mark.parametrize(("model", "attrs"), [
    ("gpt-4", {_READ: 5000}),  # no cache-read rate in the price list
    ("gpt-4o-mini", {_WRITE: 5000}),  # a cache-read rate, no cache-write one
])
def test_a_cache_rate_the_price_list_lacks_leaves_the_cost_unknown(
        model: str, attrs: dict[str, Any]) -> None:
    """Not the input rate: a cache write costs more than an input token at some providers
    (no upper bound), and a guess is no reason for a finding. Unknown, as an unpriced model."""
    run = _SONNET | {"gen_ai.request.model": model} | attrs
    cost, kinds = _cost_findings(run, 1e-6)
    assert cost is None
    assert kinds == ["cost_unknown"]
    t = build_trajectory(trace(span("chat", attrs=run)), TrajectoryConfig())
    assert "price list" in t.steps[0].unknown["cost_usd"]
    assert _cost_findings(_SONNET | {"gen_ai.request.model": model}, 1e-6)[1] == [
        "cost_usd_exceeded"]  # no cached tokens: priced


@pytest.mark.parametrize(("attrs", "cost", "source", "unknown"), [
    ({"gen_ai.usage.cost.amount": 0.25, "gen_ai.usage.cost.currency": "USD",
      "gen_ai.usage.cost.source": "provider"}, 0.25,
     "genai gen_ai.usage.cost.amount (provider)", None),
    ({"gen_ai.usage.cost.amount": "0.5", "gen_ai.usage.cost.currency": "usd",
      "gen_ai.usage.cost.source": "local"}, 0.5, "genai gen_ai.usage.cost.amount (local)", None),
    ({"gen_ai.usage.cost.amount": 0.5, "gen_ai.usage.cost.currency": "USD",
      "gen_ai.usage.cost.source": "guessed"}, 0.5,
     "genai gen_ai.usage.cost.amount (source unknown)", None),
    # not dollars, or no currency: unknown (then priced from the price list, said so)
    ({"gen_ai.usage.cost.amount": 0.5, "gen_ai.usage.cost.currency": "EUR"}, "priced",
     "price list (litellm) by model and tokens", "gen_ai.usage.cost.amount in currency EUR"),
    ({"gen_ai.usage.cost.amount": 0.5}, "priced", "price list (litellm) by model and tokens",
     "gen_ai.usage.cost.amount in currency not given"),
    ({"gen_ai.usage.cost.amount": "free", "gen_ai.usage.cost.currency": "USD"}, "priced",
     "price list (litellm) by model and tokens", "gen_ai.usage.cost.amount not understood"),
    # a new-style cost the span carries wins over an older key on it
    ({"gen_ai.usage.cost.amount": 0.25, "gen_ai.usage.cost.currency": "USD",
      "llm.cost.total": 9.0}, 0.25, "genai gen_ai.usage.cost.amount (source unknown)", None),
    ({"llm.cost.total": 0.125}, 0.125, "span llm.cost.total", None),
    ({"gen_ai.usage.cost": "bad", "llm.cost.total": 0.125}, 0.125, "span llm.cost.total", None),
    # a negative cost is none (it would be subtracted from the run's), as a negative amount
    ({"llm.cost.total": -9.5}, "priced", "price list (litellm) by model and tokens", None),
    ({"gen_ai.usage.cost": -1.0, "llm.cost.total": 0.125}, 0.125, "span llm.cost.total", None),
    ({}, "priced", "price list (litellm) by model and tokens", None),
])
def test_cost_from_the_span_before_the_price_list(attrs: dict[str, Any], cost: Any,
                                                  source: str, unknown: str | None) -> None:
    t = build_trajectory(trace(span("chat", attrs=_CHAT | attrs)), TrajectoryConfig())
    step = t.steps[0]
    if cost == "priced":
        assert step.cost_usd is not None and 0 < step.cost_usd < 0.01  # gpt-4o-mini's prices
    else:
        assert step.cost_usd == cost
    assert step.sources["cost_usd"] == source
    assert step.unknown.get("cost_usd") == unknown


def test_a_negative_cost_on_a_span_hides_no_cost_overrun() -> None:
    """``llm.cost.total`` -9.5 was taken as it came and summed: the run's cost went from
    10.0 to 0.5 USD, within a budget of 1 that it overran."""
    llm = {"gen_ai.operation.name": "chat"}  # no model: no price list
    t = build_trajectory(trace(
        span("run", attrs={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}),
        span("c1", "run", 1, llm | {"llm.cost.total": 10.0}),
        span("c2", "run", 2, llm | {"llm.cost.total": -9.5})), TrajectoryConfig())
    assert [s.cost_usd for s in t.llm_steps] == [10.0, None]
    config = DetectorsConfig(budgets=BudgetsConfig(cost_usd=1.0))
    assert [f.kind for f in Detectors(config).evaluate(t)[0]
            if f.detector == "budget"] == ["cost_usd_exceeded"]


@pytest.mark.parametrize(("attrs", "status", "error"), [
    ({"process.exit.code": 2}, "error", "exit code 2"),
    ({"process.exit.code": "127"}, "error", "exit code 127"),
    ({"process.exit.code": 1, "error.type": "1"}, "error", "exit code 1"),  # as the spec sets
    ({"process.exit.code": 0}, "ok", None),
    ({"process.exit.code": "0"}, "ok", None),
    ({"process.exit.code": "crashed"}, "ok", None),  # not understood: unknown, no error
    ({"process.exit.code": 1.5}, "ok", None),
    ({"process.exit.code": "1.5"}, "ok", None),  # its text too: no exit code 1
    ({"process.exit.code": "1e2"}, "ok", None),
    ({"process.exit.code": True}, "ok", None),
    ({}, "ok", None),
])
def test_exit_code_of_a_command_tool(attrs: dict[str, Any], status: str,
                                     error: str | None) -> None:
    step = _read(_TOOL | attrs)
    assert step.kind == "tool"
    assert (step.status, step.error) == (status, error)
    if attrs and status == "ok" and attrs["process.exit.code"] not in (0, "0"):
        assert step.unknown["exit_code"] == "process.exit.code not understood"


def test_exit_code_keeps_what_the_span_said_and_is_no_error_off_a_tool() -> None:
    step = _read(_TOOL | {"process.exit.code": 3}, status="error", message="tests failed")
    assert (step.status, step.error) == ("error", "exit code 3: tests failed")
    assert step.sources["exit_code"] == "process process.exit.code 3"
    chat = _read(_CHAT | {"process.exit.code": 3})  # a process's code on an LLM call
    assert (chat.status, chat.error) == ("ok", None)


def test_a_non_zero_exit_code_is_a_tool_error_finding_and_zero_is_none() -> None:
    def findings(code: int) -> list[Any]:
        t = build_trajectory(trace(span("run", attrs={"gen_ai.operation.name": "invoke_agent",
                                                      "gen_ai.agent.name": "coder"}),
                                   span("bash", "run", 1, _TOOL | {"process.exit.code": code})),
                             TrajectoryConfig())
        return [f for f in Detectors(DetectorsConfig()).evaluate(t)[0]
                if f.detector == "tool_call"]
    assert [f.message for f in findings(2)] == ["bash failed: exit code 2"]
    assert findings(0) == []


def test_readers_run_only_for_the_shapes_that_key_them() -> None:
    fields_module._plans.clear()
    _read(_TOOL)
    _read(_TOOL | {"process.exit.code": 1})
    extras = {len(p.extra) for p in fields_module._plans.values()}
    assert extras == {0, 1}


_DECISION = "gen_ai.tool.call.decision.outcome"


def _decision_event(outcome: Any) -> SpanEvent:
    return SpanEvent("gen_ai.tool.call.decision", 0, {_DECISION: outcome})


@pytest.mark.parametrize(("attrs", "events", "decision", "source", "unknown"), [
    ({_DECISION: "deny"}, [], "deny", f"genai {_DECISION}", None),
    ({_DECISION: "allow"}, [], "allow", f"genai {_DECISION}", None),
    ({_DECISION: "require_approval"}, [], "require_approval", f"genai {_DECISION}", None),
    ({}, [_decision_event("require_approval"), _decision_event("deny")], "deny",
     "genai gen_ai.tool.call.decision event", None),  # the last decision taken
    ({_DECISION: "maybe"}, [], None, None, f"{_DECISION} not understood"),
    ({}, [_decision_event(3)], None, None, f"{_DECISION} not understood"),
    ({}, [], None, None, None),
])
def test_decision_on_a_tool_call(attrs: dict[str, Any], events: list[SpanEvent],
                                 decision: str | None, source: str | None,
                                 unknown: str | None) -> None:
    step = _read(_TOOL | attrs, events=events)
    assert step.decision == decision
    assert step.sources.get("decision") == source
    assert step.unknown.get("decision") == unknown


@pytest.mark.parametrize(("outcome", "status"), [("deny", "ok"), ("allow", "error"),
                                                 ("maybe", "error")])
def test_a_denied_call_is_never_a_tool_error(outcome: str, status: str) -> None:
    step = _read(_TOOL | {_DECISION: outcome, "error.type": "PermissionDenied"},
                 status="error", message="denied by policy")
    assert step.status == status
    t = build_trajectory(trace(span("run", attrs={"gen_ai.operation.name": "invoke_agent",
                                                  "gen_ai.agent.name": "coder"}),
                               span("bash", "run", 1, _TOOL | {_DECISION: outcome},
                                    status="error", message="denied by policy")),
                         TrajectoryConfig())
    findings = Detectors(DetectorsConfig()).evaluate(t)[0]
    assert any(f.detector == "tool_call" for f in findings) == (status == "error")


@pytest.mark.parametrize(("first", "kind"), [
    ("deny", "retried_denied_call"),
    ("allow", "repeated_action"),  # bash: a shell action tool
    (None, "repeated_action"),
])
def test_a_denied_call_followed_by_the_same_call_is_a_loop_class(first: str | None,
                                                                 kind: str) -> None:
    denied = _TOOL | ({_DECISION: first} if first else {})
    t = build_trajectory(trace(span("run", attrs={"gen_ai.operation.name": "invoke_agent",
                                                  "gen_ai.agent.name": "coder"}),
                               span("bash1", "run", 1, denied),
                               span("bash2", "run", 20, _TOOL)), TrajectoryConfig())
    loops = [f for f in Detectors(DetectorsConfig()).evaluate(t)[0] if f.detector == "loop"]
    assert [f.kind for f in loops] == [kind]
    assert loops[0].message.endswith("after it was denied") == (first == "deny")


_RUN = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}
_EXEC = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
         "gen_ai.tool.call.arguments": '{"city": "Paris"}'}
_MCP = {"mcp.method.name": "tools/call", "mcp.session.id": "s1", "jsonrpc.request.id": "7"}


@pytest.mark.parametrize(("mcp", "where", "start", "end", "steps", "result"), [
    # beside the framework's span, within its time: one call, the MCP span's result kept
    (_MCP | {"gen_ai.tool.name": "get_weather", "gen_ai.tool.call.result": "sunny"},
     "run", 2, 8, 1, "sunny"),
    # the MCP span with only its own attributes: the tool named by the span name
    (_MCP, "run", 2, 8, 1, None),
    (_MCP | {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"},
     "run", 2, 8, 1, None),
    # nested under it (merge_nested_calls): one call
    (_MCP | {"gen_ai.tool.name": "get_weather", "gen_ai.tool.call.result": "sunny"},
     "exec", 2, 8, 1, "sunny"),
    # another tool, or outside the framework span's time: a call of its own
    (_MCP | {"gen_ai.tool.name": "get_time"}, "run", 2, 8, 2, None),
    (_MCP | {"gen_ai.tool.name": "get_weather"}, "run", 20, 28, 2, None),
    # a method that is no tool call: nothing read
    ({"mcp.method.name": "tools/list"}, "run", 2, 8, 1, None),
])
def test_an_mcp_client_span_beside_execute_tool_is_one_step(
        mcp: dict[str, Any], where: str, start: int, end: int, steps: int,
        result: str | None) -> None:
    name = "tools/call " + str(mcp.get("gen_ai.tool.name", "get_weather"))
    t = build_trajectory(trace(span("run", attrs=_RUN), span("exec", "run", 1, _EXEC, end=10),
                               span(name, where, start, mcp, end=end)), TrajectoryConfig())
    tools = [s for s in t.steps if s.kind == "tool"]
    assert len(tools) == steps
    assert tools[0].name == "exec" and tools[0].result == result
    if steps == 1 and mcp.get("mcp.method.name") == "tools/call":
        mcp_step = next(s for s in t.steps if s.name == name)
        assert mcp_step.kind == "other" and "tool step" in mcp_step.sources["kind"]
    loops = [f for f in Detectors(DetectorsConfig()).evaluate(t)[0] if f.detector == "loop"]
    assert loops == []


def test_an_mcp_tool_call_alone_is_a_tool_step_and_call_ids_decide_beside() -> None:
    alone = _read(_MCP, name="tools/call get_weather")
    assert (alone.kind, alone.tool_name) == ("tool", "get_weather")
    assert alone.sources["kind"] == "mcp mcp.method.name tools/call"
    ids = {"gen_ai.tool.name": "get_weather"}
    for mcp_id, steps in (("c1", 1), ("c2", 2)):
        t = build_trajectory(trace(
            span("run", attrs=_RUN),
            span("exec", "run", 1, _EXEC | {"gen_ai.tool.call.id": "c1"}, end=10),
            span("tools/call get_weather", "run", 30, _MCP | ids | {"gen_ai.tool.call.id": mcp_id},
                 end=40)), TrajectoryConfig())
        assert len([s for s in t.steps if s.kind == "tool"]) == steps


_LM = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
       "llm.output_messages.0.message.role": "assistant",
       "llm.output_messages.0.message.content": "It is sunny."}
_COMPLETION = {"openinference.span.kind": "LLM", "llm.model_name": "openai/gpt-4o-mini",
               "llm.token_count.prompt": 699, "llm.token_count.completion": 86,
               "llm.cost.total": 0.00015, "output.value": "It is sunny."}


@pytest.mark.parametrize(("inner_parent", "llm_steps"), [
    ("lm", 1),    # directly under it: the call recorded again (DSPy LM.__call__ > completion)
    ("run", 2),   # beside it: a call of its own
])
def test_an_llm_span_directly_under_an_llm_span_is_one_call(inner_parent: str,
                                                             llm_steps: int) -> None:
    t = build_trajectory(trace(span("run", attrs={"openinference.span.kind": "CHAIN"}),
                               span("lm", "run", 1, _LM, end=9),
                               span("completion", inner_parent, 2, _COMPLETION, end=8)),
                         TrajectoryConfig())
    assert len(t.llm_steps) == llm_steps
    outer = t.llm_steps[0]
    assert outer.name == "lm" and outer.model == "gpt-4o-mini"  # its own model kept
    if llm_steps == 1:
        assert (outer.input_tokens, outer.output_tokens, outer.cost_usd) == (699, 86, 0.00015)
        inner = next(s for s in t.steps if s.name == "completion")
        assert inner.kind == "other" and "parent LLM step" in inner.sources["kind"]
    else:
        assert outer.input_tokens is None


@pytest.mark.parametrize(("inputs", "arguments"), [
    ('{"city": "Paris"}', {"city": "Paris"}),
    # a traced function that failed binding its arguments (an unexpected keyword) records
    # JSON null: the arguments are unknown (the call the model asked for gives them), never
    # the text "null"
    ("null", None),
])
def test_mlflow_tool_inputs(inputs: str, arguments: Any) -> None:
    step = _read({"mlflow.spanType": '"TOOL"', "mlflow.spanInputs": inputs}, "get_weather")
    assert (step.kind, step.arguments) == ("tool", arguments)


@pytest.mark.parametrize(("attrs", "why"), [
    ({"gen_ai.usage.cost.amount": "free", "gen_ai.usage.cost.currency": "USD"},
     "gen_ai.usage.cost.amount not understood"),
    ({"gen_ai.usage.cost.amount": 0.5, "gen_ai.usage.cost.currency": "EUR"},
     "gen_ai.usage.cost.amount in currency EUR"),
    ({"llm.cost.total": 1e308}, "llm.cost.total 1e+308 USD is past any plausible cost"),
])
def test_a_recorded_cost_not_understood_is_counted_and_said(attrs: dict[str, Any],
                                                            why: str) -> None:
    """A cost the span recorded but that was not read (not understood, not dollars, past
    any plausible one) left the step's cost unknown, yet the run's ``unrecorded.unparsed``
    did not count it (as it counts every other value present but not understood), and the
    budget's cost_unknown said "no price for <model>", not why: the recorded value."""
    run = _CHAT | {"gen_ai.request.model": "no-such-model-anywhere"} | attrs
    t = build_trajectory(trace(span("chat", attrs=run)), TrajectoryConfig())
    assert t.steps[0].cost_usd is None
    assert t.unrecorded.get("unparsed") == 1
    config = DetectorsConfig(budgets=BudgetsConfig(cost_usd=1.0))
    (finding,) = [f for f in Detectors(config).evaluate(t)[0] if f.detector == "budget"]
    assert finding.kind == "cost_unknown"
    assert why in finding.message


def test_a_cost_not_recorded_nor_priced_is_not_unparsed() -> None:
    run = _CHAT | {"gen_ai.request.model": "no-such-model-anywhere"}
    t = build_trajectory(trace(span("chat", attrs=run)), TrajectoryConfig())
    assert t.steps[0].cost_usd is None
    assert "unparsed" not in t.unrecorded
