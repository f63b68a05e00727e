"""A model's reasoning recorded in its reply (the GenAI conventions' ``reasoning`` part, the
AI SDK's ``reasoning`` content part, Anthropic's ``thinking``) is what it thought, not what it
said: never the run's answer, and shown to the judge marked as reasoning."""

from __future__ import annotations

import json
from typing import Any

import pytest
from judge_fixtures import config

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.judge import Judge
from otel_eval.evaluate.judge.render import render

TRACE = "0af7651916cd43dd8448eb211c80319c"
ASK = "What is the weather in Paris?"
THOUGHT = "The user may be testing me; I could just say it rains."
SAID = "It is sunny in Paris."
OUTPUTS: dict[str, list[dict[str, Any]]] = {
    "genai_parts": [{"role": "assistant", "parts": [
        {"type": "reasoning", "content": THOUGHT}, {"type": "text", "content": SAID}],
        "finish_reason": "stop"}],
    "content_reasoning": [{"role": "assistant", "content": [
        {"type": "reasoning", "text": THOUGHT}, {"type": "text", "text": SAID}]}],
    "content_thinking": [{"role": "assistant", "content": [
        {"type": "thinking", "thinking": THOUGHT, "signature": "c2ln"},
        {"type": "text", "text": SAID}]}],
}


def _evaluate(output: list[dict[str, Any]]) -> Evaluation:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "o3",
             "gen_ai.input.messages": json.dumps(
                 [{"role": "user", "parts": [{"type": "text", "content": ASK}]}]),
             "gen_ai.output.messages": json.dumps(output)}
    span = Span(TRACE, "a" * 16, None, "chat o3", 0, 10, attributes=attrs)
    ev = Evaluator(Config()).evaluate(Trace(TRACE, [span], "complete"))
    assert ev is not None
    return ev


def _judge_input(ev: Evaluation) -> str:
    judge = Judge(config())
    rendered = render(ev, judge.config.compaction)
    return "\n".join(m["content"] for r in judge.requests(ev, rendered) for m in r.messages)


@pytest.mark.parametrize("form", sorted(OUTPUTS))
def test_reasoning_is_no_answer_and_the_judge_reads_it_as_reasoning(form: str) -> None:
    ev = _evaluate(OUTPUTS[form])
    assert ev.to_json()["output"] == SAID
    sent = _judge_input(ev)
    assert "[reasoning] " + THOUGHT in sent
    assert "assistant: " + THOUGHT not in sent


@pytest.mark.parametrize("form", sorted(OUTPUTS))
def test_a_reply_of_reasoning_alone_has_no_answer(form: str) -> None:
    (message,) = OUTPUTS[form]
    key = "parts" if "parts" in message else "content"
    ev = _evaluate([{**message, key: message[key][:1]}])
    assert ev.to_json()["output"] is None
