"""Depth and boundaries where span JSON is parsed (issue 33, finding 4).

1.2 KB of tool arguments nested 600 deep parsed, then the bounding walk recursed past the
interpreter's limit and the whole evaluation became one ``evaluation_error``: the loop
finding of a looping run was gone. Content JSON is now bounded to ``MAX_CONTENT_DEPTH``
levels (deeper stays text) and walked iteratively; the predictor and ``bound`` have their own
boundaries (their failure drops the prediction or cuts the values; the findings stay).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import otel_eval.evaluate.bounds as bounds
from otel_eval.app.config import Config
from otel_eval.base.jsontext import finite
from otel_eval.base.model import Span, Trace
from otel_eval.base.results import Evaluation
from otel_eval.base.text import MAX_CONTENT_DEPTH, checked, load_content, valid_text
from otel_eval.evaluate.evaluator import Evaluator

TRACE = "0af7651916cd43dd8448eb211c80319c"
DEEP = json.dumps({"q": "same"})[:-1] + ', "d": ' + "[" * 600 + "]" * 600 + "}"


def _looping(args: str) -> Trace:
    """An agent calling the same tool with the same arguments three times (a loop)."""
    spans = [Span(TRACE, "a0", None, "agent", 0, 100,
                  attributes={"gen_ai.operation.name": "invoke_agent",
                              "gen_ai.agent.name": "a"})]
    spans += [Span(TRACE, f"b{i}", "a0", "search", 3 + i, 4 + i,
                   attributes={"gen_ai.operation.name": "execute_tool",
                               "gen_ai.tool.name": "search",
                               "gen_ai.tool.call.arguments": args}) for i in range(3)]
    return Trace(TRACE, spans, "complete")


def _kinds(ev: Evaluation | None) -> set[str]:
    assert ev is not None
    return {f"{f.detector}/{f.kind}" for f in ev.findings}


def test_arguments_nested_600_deep_keep_the_loop_finding(
        caplog: pytest.LogCaptureFixture) -> None:
    ev = Evaluator(Config()).evaluate(_looping(DEEP))
    assert "loop/repeated_call" in _kinds(ev)
    assert "evaluation/evaluation_error" not in _kinds(ev)
    assert ev is not None and json.loads(ev.to_json_text())["trace_id"] == TRACE
    assert len(caplog.text) < 2_000  # no traceback of a thousand frames


class _FailingPredictor:
    def predict(self, evaluation: Evaluation) -> Any:
        raise RuntimeError("the model broke")


def test_a_failing_predictor_drops_the_prediction_not_the_findings(
        caplog: pytest.LogCaptureFixture) -> None:
    evaluator = Evaluator(Config())
    evaluator.predictor = _FailingPredictor()  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING):
        ev = evaluator.evaluate(_looping('{"q": "same"}'))
    assert ev is not None and ev.prediction is None
    assert "loop/repeated_call" in _kinds(ev) and "evaluation/evaluation_error" not in _kinds(ev)
    assert "RuntimeError" in caplog.text and TRACE in caplog.text
    assert "Traceback" not in caplog.text


def test_a_failing_bound_cuts_the_values_not_the_findings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(evaluation: Any) -> tuple[Any, str]:
        raise RuntimeError("cannot cut")
    # the first step of bounding (a small object's values are not cut one by one)
    monkeypatch.setattr(bounds, "_encode", broken)
    ev = Evaluator(Config()).evaluate(_looping('{"q": "same"}'))
    assert ev is not None and "loop/repeated_call" in _kinds(ev)
    [cut] = [f for f in ev.findings if f.kind == "result_truncated"]
    assert cut.attributes["error"] == "RuntimeError"
    stored = json.loads(ev.to_json_text())
    assert all(s.get("arguments") is None for s in stored["steps"])
    assert "result_truncated" in {f["kind"] for f in stored["findings"]}


def test_checked_bounds_depth_and_makes_text_valid() -> None:
    assert load_content('{"a\\ud800": ["\\udfffx", {"b": "\\ud83d\\ude00"}]}') == {
        "a\ufffd": ["\ufffdx", {"b": "\U0001f600"}]}  # a valid pair stays the emoji
    ok = "[" * MAX_CONTENT_DEPTH + "]" * MAX_CONTENT_DEPTH
    assert checked(json.loads(ok), ok) is not None
    deeper = "[" + ok + "]"
    with pytest.raises(ValueError, match="nested deeper"):
        load_content(deeper)
    with pytest.raises(ValueError, match="nested deeper"):
        load_content("[" * 100_000 + "]" * 100_000)  # past the C parser's own limit
    assert valid_text("plain") == "plain" and valid_text("\ud800") == "\ufffd"


def test_finite_walks_deep_values_without_recursion() -> None:
    deep: Any = [float("nan")]
    for _ in range(5_000):
        deep = [deep]
    out = finite(deep)
    for _ in range(5_000):
        out = out[0]
    assert out == ["NaN"]
    same = [[1.0, {"a": (2.0,)}]]
    assert finite(same) is same  # nothing to replace: the value itself
