"""``as_int``: a count as instrumentations write it (int, float, text of either), or None;
``as_float``: a finite float, or None.

A number beyond 2**53 (the last integer a float holds exactly) is not understood: the metrics,
the features and the usage sums turn counts into floats, and a 400-digit count raised
OverflowError out of them (the engine's worker, ``otel-eval train``)."""

from __future__ import annotations

from typing import Any

import pytest

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.conventions.values import as_float, as_int
from otel_eval.evaluate.evaluator import Evaluator

CASES: list[tuple[str, Any, int | None]] = [
    ("int", 120, 120),
    ("zero", 0, 0),
    ("negative int", -7, -7),
    ("int at the bound", 2**53, 2**53),
    ("negative int at the bound", -(2**53), -(2**53)),
    ("int past the bound", 2**53 + 1, None),
    ("int64 max (an OTLP intValue)", 2**63 - 1, None),
    ("400-digit int", int("9" * 400), None),
    ("float", 12.0, 12),
    ("fractional float truncated", 12.7, 12),
    ("float at the bound", float(2**53), 2**53),
    ("float past the bound", 1e18, None),
    ("huge float", 1e300, None),
    ("nan", float("nan"), None),
    ("inf", float("inf"), None),
    ("-inf", float("-inf"), None),
    ("text", "120", 120),
    ("padded text", " 120 ", 120),
    ("text of a float", "12.5", 12),
    ("text at the bound", str(2**53), 2**53),
    ("text past the bound", str(2**53 + 1), None),
    ("400 digits", "9" * 400, None),
    ("-400 digits", "-" + "9" * 400, None),
    ("5,000 digits (past int()'s limit)", "9" * 5000, None),
    ("text of a huge float", "1e300", None),
    ("text nan", "nan", None),
    ("text inf", "inf", None),
    ("empty text", "", None),
    ("words", "many", None),
    ("bool", True, None),
    ("none", None, None),
    ("list", [1], None),
]


@pytest.mark.parametrize(("name", "value", "expected"), CASES, ids=[c[0] for c in CASES])
def test_as_int(name: str, value: Any, expected: int | None) -> None:
    got = as_int(value)
    assert got == expected
    assert got is None or type(got) is int



FLOATS: list[tuple[str, Any, float | None]] = [
    ("float", 0.25, 0.25),
    ("int", 3, 3.0),
    ("text", "0.5", 0.5),
    ("400-digit int (a file's JSON number)", int("9" * 400), None),
    ("400-digit text", "9" * 400, None),
    ("inf", float("inf"), None),
    ("nan", float("nan"), None),
    ("bool", False, None),
    ("words", "cheap", None),
]


@pytest.mark.parametrize(("name", "value", "expected"), FLOATS, ids=[c[0] for c in FLOATS])
def test_as_float(name: str, value: Any, expected: float | None) -> None:
    assert as_float(value) == expected


def test_numbers_past_a_float_in_a_files_span_are_unknown_never_a_finding() -> None:
    """A span-tree file (TRAIL's shape) keeps its JSON numbers as they are: a 400-digit
    cost made ``as_float`` raise, and the trace got an ``evaluation_error`` finding (a failed
    verdict) instead of an unknown cost."""
    tid, huge = "ab" * 16, int("9" * 400)
    spans = [Span(tid, "01" * 8, None, "invoke_agent a", 1, 10, attributes={
                 "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}),
             Span(tid, "02" * 8, "01" * 8, "chat", 2, 3, attributes={
                 "gen_ai.operation.name": "chat", "gen_ai.usage.cost": huge,
                 "gen_ai.usage.input_tokens": huge, "gen_ai.usage.output_tokens": 7})]
    ev = Evaluator(Config()).evaluate(Trace(tid, spans, "complete"))
    assert ev is not None and ev.findings == []
    chat = ev.trajectory.steps[1]
    assert (chat.cost_usd, chat.input_tokens, chat.output_tokens) == (None, None, 7)


def test_a_negative_token_count_is_unknown_in_every_convention() -> None:
    """A count of -10**12 tokens was taken as it came and summed: a run's total went
    negative, which a token budget read as far within bounds. A count passes ``low`` 0."""
    assert (as_int(-5, 0), as_int("-5", 0), as_int(-5.0, 0), as_int(0, 0)) == \
        (None, None, None, 0)
    assert as_int(-5) == -5  # an exit code may be negative
    tid = "ab" * 16
    shapes = [{"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": -10**12,
               "gen_ai.usage.output_tokens": "-3"},  # GenAI
              {"openinference.span.kind": "LLM", "llm.token_count.prompt": -10**12,
               "llm.token_count.completion": -3},  # OpenInference
              {"ai.operationId": "ai.generateText.doGenerate", "ai.usage.promptTokens": -10**12,
               "ai.usage.completionTokens": -3}]  # Vercel AI SDK
    for attrs in shapes:
        spans = [Span(tid, "01" * 8, None, "invoke_agent a", 1, 10, attributes={
                     "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}),
                 Span(tid, "02" * 8, "01" * 8, "chat", 2, 3, attributes=attrs)]
        ev = Evaluator(Config()).evaluate(Trace(tid, spans, "complete"))
        assert ev is not None
        llm = [s for s in ev.trajectory.steps if s.kind == "llm"]
        assert llm and all((s.input_tokens, s.output_tokens) == (None, None) for s in llm), attrs
