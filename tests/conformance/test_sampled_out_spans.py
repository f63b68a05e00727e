"""Runs of the conformance corpus with spans missing, as a collector that samples spans or
filters some out delivers them: what a missing span would have said is unknown, never a
finding (docs/guide.md, "Deploy behind your collector")."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from conformance import corpus, hung

from otel_eval.app.config import Config
from otel_eval.base.model import Trace
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_dict
from otel_eval.evaluate.evaluator import Evaluator


@pytest.mark.parametrize("stack", ["openai-agents", "openinference-anthropic"])
def test_a_retry_whose_tool_span_is_missing_still_recovers(stack: str) -> None:
    """tool_error: get_weather fails, the model calls it again, it answers. Without the
    retry's tool span the next LLM call's input still says what it returned (the Responses
    API's ``function_call_output``, Anthropic's ``tool_result``): recovered, not gave_up."""
    spans, logs = hung.load(stack, "tool_error")
    retry = [s for s in spans if s.name == "get_weather"][-1]
    kept = [s for s in spans if s.span_id != retry.span_id]
    ev = Evaluator(Config()).evaluate(Trace("ab" * 16, kept, "complete", logs=logs))
    assert ev is not None
    kinds = {f.kind for f in ev.findings if f.detector == "recovery"}
    assert kinds == {"recovered"}
    assert ev.verdict.passed


@pytest.mark.parametrize(("stack", "dropped"), [
    ("strands", "execute_event_loop_cycle"), ("openai-agents", "turn"),
    ("smolagents", "Step 1"), ("langgraph", "tools")])
def test_a_failure_whose_parent_span_is_missing_is_not_taken_for_the_last_call(
        stack: str, dropped: str) -> None:
    """tool_error with the span of the cycle (turn, step, graph node) that held the failed
    call dropped, as a collector's filter drops a framework's noisy spans: the failure and
    the retry that succeeded after it keep their order, recovered, not gave_up."""
    spans, logs = hung.load(stack, "tool_error")
    cut = min((s for s in spans if s.name == dropped), key=lambda s: s.start_ns)  # the first
    kept = [s for s in spans if s.span_id != cut.span_id]
    ev = Evaluator(Config()).evaluate(Trace("cd" * 16, kept, "complete", logs=logs))
    assert ev is not None
    assert {f.kind for f in ev.findings if f.detector == "recovery"} == {"recovered"}
    assert ev.verdict.passed


@pytest.mark.parametrize("stack", ["litellm", "langchain-js"])
def test_a_retry_without_its_tool_span_or_a_call_id_is_no_give_up(stack: str) -> None:
    """tool_error without the retry's tool span, in stacks whose LLM spans record no call
    id: the model asked for get_weather again and was called again after it, so whether the
    retry succeeded is unknown: no gave_up (an error that fails the run)."""
    spans, logs = hung.load(stack, "tool_error")
    retry = max((s for s in spans if s.name.endswith("get_weather")), key=lambda s: s.start_ns)
    kept = [s for s in spans if s.span_id != retry.span_id]
    ev = Evaluator(Config()).evaluate(Trace("ef" * 16, kept, "complete", logs=logs))
    assert ev is not None
    assert not [f for f in ev.findings if f.detector == "recovery"]
    assert ev.verdict.passed


def test_an_empty_reply_before_a_tool_call_is_no_empty_answer() -> None:
    """mlflow-genai streaming without its last LLM call's span: the reply left last said
    nothing (it asked for get_weather, which ran after it), so the run's answer is unknown,
    not empty: no ``no_output`` finding."""
    spans, logs = hung.load("mlflow-genai", "streaming")
    last = max((s for s in spans if s.name.startswith("chat")), key=lambda s: s.start_ns)
    kept = [s for s in spans if s.span_id != last.span_id]
    ev = Evaluator(Config()).evaluate(Trace("12" * 16, kept, "complete", logs=logs))
    assert ev is not None
    assert ev.trajectory.output is None
    assert not [f for f in ev.findings if f.kind == "no_output"]


@pytest.mark.parametrize("stack", ["haystack", "openllmetry-crewai"])
def test_a_retry_whose_asking_llm_span_is_missing_is_no_give_up(stack: str) -> None:
    """tool_error in stacks whose calls are known only from the LLM's replies, without the
    LLM span that asked for the retry: the next LLM call's input still holds the retry and
    its result (by a call id no step carries), so no gave_up (an error that fails the run)."""
    spans, logs = hung.load(stack, "tool_error")
    llm = sorted((s for s in spans if s.name in ("OpenAIChatGenerator.run", "openai.chat")),
                 key=lambda s: s.start_ns)
    kept = [s for s in spans if s.span_id != llm[1].span_id]
    ev = Evaluator(Config()).evaluate(Trace("34" * 16, kept, "complete", logs=logs))
    assert ev is not None
    assert not [f for f in ev.findings if f.detector == "recovery" and f.severity == "error"]
    assert ev.verdict.passed


def test_a_managed_agent_whose_own_span_is_missing_was_no_call_of_a_tool_not_offered() -> None:
    """smolagents multi_agent without the managed agent's run span (weather_agent.run): its
    steps are still in the trace, their parent missing. The coordinator's call of
    weather_agent may have been that span (smolagents offers managed agents in no tool
    list): unknown, not a ``selection`` error (a tool that was not offered)."""
    spans, logs = hung.load("smolagents", "multi_agent")
    managed = next(s for s in spans if s.name == "weather_agent.run")
    kept = [s for s in spans if s.span_id != managed.span_id]
    ev = Evaluator(Config()).evaluate(Trace("56" * 16, kept, "complete", logs=logs))
    assert ev is not None
    assert not [f for f in ev.findings if f.kind == "selection"]
    assert ev.verdict.passed


# Each stack's span of one cycle of its agent (a turn, a step, a graph node, a workflow step)
_CYCLES = [("langgraph", "tools"), ("llamaindex", "BaseWorkflowAgent.call_tool"),
           ("openai-agents", "turn"), ("smolagents", "Step 1"),
           ("strands", "execute_event_loop_cycle"),
           pytest.param("smolagents-code", "Step 1", marks=pytest.mark.xfail(
               strict=True, reason="a code agent's calls carry no call id (smolagents counts "
               "them: call_1, call_2): nothing links them to its later calls"))]


@pytest.mark.parametrize(("stack", "dropped"), _CYCLES)
def test_the_calls_under_a_missing_cycle_span_are_still_the_agents(
        stack: str, dropped: str) -> None:
    """loop (get_weather called 4 times) without the span of the cycle that held the first
    call: its calls, their parent missing, are still the agent's (its next LLM call was told
    them by call id), compared with its other calls: 4 repeats, not 3."""
    spans, logs = hung.load(stack, "loop")
    cut = min((s for s in spans if s.name == dropped), key=lambda s: s.start_ns)
    kept = [s for s in spans if s.span_id != cut.span_id]
    ev = Evaluator(Config()).evaluate(Trace("bc" * 16, kept, "complete", logs=logs))
    assert ev is not None
    repeats = [f.message for f in ev.findings if f.kind == "repeated_call"]
    assert len(repeats) == 1 and "called 4 times" in repeats[0]


def test_a_managed_agent_whose_own_span_is_missing_keeps_its_calls_apart() -> None:
    """smolagents multi_agent without weather_agent.run: the managed agent's calls (its
    final_answer too) are no calls of the coordinator, which was never told their ids."""
    spans, logs = hung.load("smolagents", "multi_agent")
    managed = next(s for s in spans if s.name == "weather_agent.run")
    kept = [s for s in spans if s.span_id != managed.span_id]
    ev = Evaluator(Config()).evaluate(Trace("de" * 16, kept, "complete", logs=logs))
    assert ev is not None
    under = {managed.span_id}
    for s in ev.trajectory.steps:  # tree order: a parent before its children
        if s.parent_span_id in under:
            under.add(s.span_id)
    coordinator = {s.node for s in ev.trajectory.steps if s.span_id not in under}
    orphans = [s for s in ev.trajectory.steps if s.span_id in under]
    assert orphans and not {s.node for s in orphans} & coordinator
    assert not [f for f in ev.findings if f.detector == "loop"]


@pytest.mark.parametrize("stack", ["vercel-ai", "vercel-ai-openinference"])
def test_a_failed_call_whose_tool_span_is_missing_is_still_a_failure(stack: str) -> None:
    """tool_error without the failed call's ai.toolCall span: the next LLM call's input says
    it failed (an AI SDK tool-result whose output is ``error-text``), so the rebuilt call is
    a failure the run recovered from, and the root's copy of its error is no root_error."""
    spans, logs = hung.load(stack, "tool_error")
    failed = min((s for s in spans if s.name == "ai.toolCall"), key=lambda s: s.start_ns)
    kept = [s for s in spans if s.span_id != failed.span_id]
    ev = Evaluator(Config()).evaluate(Trace("78" * 16, kept, "complete", logs=logs))
    assert ev is not None
    assert {f.kind for f in ev.findings if f.detector == "recovery"} == {"recovered"}
    assert not [f for f in ev.findings if f.kind == "root_error"]
    assert ev.verdict.passed


def _span_dicts(recording: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for item in recording["requests"]:
        if item["signal"] == "traces":
            for rs in item["body"].get("resourceSpans", ()):
                for ss in rs.get("scopeSpans", ()):
                    yield from ss.get("spans", ())


def _evaluated(recording: dict[str, Any]) -> dict[str, Any]:
    spans = [s for item in recording["requests"] if item["signal"] == "traces"
             for s in decode_request(request_from_dict(item["body"])).spans]
    ev = Evaluator(Config()).evaluate(Trace("9a" * 16, spans, "complete"))
    assert ev is not None
    out = ev.to_json()
    out.pop("evaluated_at_unix_nano", None)
    return out


def test_the_sampled_flag_is_not_read() -> None:
    """The Python SDK writes no W3C sampled bit in a span's ``flags`` (only the parent's
    remote bits), though it exported the span: read as "not sampled", every span of a Python
    agent would be skipped. The same run with the bit set on every span is evaluated alike
    (docs/evaluation-limits.md, "Sampled and unsampled spans")."""
    recording = corpus.recording("openai-agents", "clean")
    assert {d.get("flags", 0) & 0xFF for d in _span_dicts(recording)} == {0}
    sampled = copy.deepcopy(recording)
    for d in _span_dicts(sampled):
        d["flags"] = d.get("flags", 0) | 1
    unsampled = _evaluated(recording)
    assert unsampled["counts"]["steps"] == 1 and unsampled["verdict"]["passed"]
    assert _evaluated(sampled) == unsampled
