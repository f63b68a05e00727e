"""One LLM output's calls are read up to ``MAX_OUTPUT_CALLS`` (``conventions.values``): a
reader makes no more (one past it, to tell there were more), the step keeps the first ones,
its calls are known only in part (``Step.calls_unknown``, counted in
``unrecorded.unparsed``), and no call past the bound becomes a step. A 17 MB output of
200,000 calls cost ~6.5 s and ~380 MB in the passes after it. Work is counted: the calls
made by the reader, not the time taken."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.app.config import Config
from otel_eval.base.model import Span
from otel_eval.base.steps import ToolCall
from otel_eval.evaluate.conventions import genai, messages, openllmetry, vercel_ai
from otel_eval.evaluate.conventions.values import MAX_OUTPUT_CALLS
from otel_eval.evaluate.evaluator import Evaluator

N = 3 * MAX_OUTPUT_CALLS


def _genai_parts() -> Span:
    parts = [{"type": "tool_call", "id": f"c{i}", "name": "get_weather",
              "arguments": {"city": f"city {i}"}} for i in range(N)]
    return span("chat", "agent", 1, {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}])})


def _openai_reply() -> Span:
    calls = [{"id": f"c{i}", "type": "function",
              "function": {"name": "get_weather", "arguments": json.dumps({"city": f"c {i}"})}}
             for i in range(N)]
    response = {"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [
        {"index": 0, "finish_reason": "tool_calls",
         "message": {"role": "assistant", "content": None, "tool_calls": calls}}]}
    return span("chat", "agent", 1, {
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
        "output.mime_type": "application/json", "output.value": json.dumps(response)})


def _vercel() -> Span:
    calls = [{"toolCallType": "function", "toolCallId": f"c{i}", "toolName": "get_weather",
              "args": json.dumps({"city": f"city {i}"})} for i in range(N)]
    return span("ai.generateText.doGenerate", "agent", 1, {
        "ai.operationId": "ai.generateText.doGenerate", "ai.model.id": "gpt-4o",
        "ai.response.toolCalls": json.dumps(calls)})


def _openllmetry() -> Span:
    attrs: dict[str, Any] = {"llm.request.type": "chat", "gen_ai.system": "openai",
                             "gen_ai.request.model": "gpt-4o",
                             "gen_ai.completion.0.role": "assistant"}
    for i in range(N):
        attrs[f"gen_ai.completion.0.tool_calls.{i}.name"] = "get_weather"
        attrs[f"gen_ai.completion.0.tool_calls.{i}.id"] = f"c{i}"
        attrs[f"gen_ai.completion.0.tool_calls.{i}.arguments"] = json.dumps({"city": str(i)})
    return span("openai.chat", "agent", 1, attrs)


CASES: list[tuple[str, Callable[[], Span], Any]] = [
    ("genai parts", _genai_parts, genai), ("openai reply", _openai_reply, messages),
    ("vercel ai", _vercel, vercel_ai), ("openllmetry", _openllmetry, openllmetry)]


@pytest.mark.parametrize(("make", "reader"), [(m, r) for _, m, r in CASES],
                         ids=[c[0] for c in CASES])
def test_one_outputs_calls_are_read_up_to_the_bound(make: Callable[[], Span], reader: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    made = 0

    class Counted(ToolCall):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            nonlocal made
            made += 1
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(reader, "ToolCall", Counted)
    root = span("agent", None, 0, {"gen_ai.operation.name": "invoke_agent",
                                   "gen_ai.agent.name": "weather"}, end=100)
    ev = Evaluator(Config()).evaluate(trace(root, make()))
    assert ev is not None and ev.verdict is not None
    assert made == MAX_OUTPUT_CALLS + 1  # one past the bound, to tell there were more
    (llm,) = ev.trajectory.llm_steps
    assert len(llm.tool_calls) == MAX_OUTPUT_CALLS and llm.calls_unknown
    assert len(ev.trajectory.tool_steps) <= MAX_OUTPUT_CALLS
    assert ev.trajectory.unrecorded.get("unparsed", 0) >= 1
    assert not [f for f in ev.findings if f.detector == "loop"]
