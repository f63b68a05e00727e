"""Evaluation is total (issue 11): inputs that broke it give findings, never a null verdict;
a failing detector or adapter yields ``evaluation_error`` and every other detector still
gives its verdict; stored and served JSON stays valid for strict parsers."""

from __future__ import annotations

import json
from typing import Any

import pytest

import otel_eval.evaluate.detectors as detectors
import otel_eval.evaluate.evaluator as evaluator_module
import otel_eval.evaluate.trajectory.spans as trajectory_module
from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.evaluator import Evaluator

TRACE = "0af7651916cd43dd8448eb211c80319c"
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}
SEARCH = {"type": "object", "properties": {"q": {"type": "string"}}}


def chat(output: Any, tools: Any = None) -> dict[str, Any]:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(output)}
    if tools is not None:
        attrs["gen_ai.tool.definitions"] = json.dumps(tools)
    return attrs


def search(args: str = '{"q": "same"}') -> dict[str, Any]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
            "gen_ai.tool.call.arguments": args}


def looping_trace(llm_attrs: dict[str, Any]) -> Trace:
    """An agent calling the same tool three times in a row (a loop) after one LLM span."""
    spans = [Span(TRACE, "a0", None, "agent", 0, 100, attributes=dict(AGENT)),
             Span(TRACE, "a1", "a0", "chat", 1, 2, attributes=llm_attrs)]
    spans += [Span(TRACE, f"b{i}", "a0", "search", 3 + i, 4 + i, attributes=search())
              for i in range(3)]
    return Trace(TRACE, spans, "complete")


def kinds(ev: Evaluation) -> set[str]:
    return {f"{f.detector}/{f.kind}" for f in ev.findings}


def tools_with(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "search", "parameters": schema}]


@pytest.mark.parametrize(("llm", "extra"), [
    (chat([{"role": "assistant", "parts": 1, "finish_reason": "tool_call"}]), set()),
    (chat([{"role": "assistant", "tool_calls": 1, "finish_reason": "tool_call"}]), set()),
    (chat([], tools_with({"$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}},
                          **SEARCH, "properties": {"q": {"$ref": "#/$defs/x"}}})),
     {"tool_call/schema"}),
    (chat([], tools_with({**SEARCH, "properties": {"q": {"$ref": "#/missing"}}})),
     {"tool_call/schema"}),
], ids=["parts_1", "tool_calls_1", "recursive_ref", "unresolvable_ref"])
def test_the_issue_inputs_keep_the_loop_visible(llm: dict[str, Any], extra: set[str]) -> None:
    ev = Evaluator(Config()).evaluate(looping_trace(llm))
    assert ev.verdict is not None and ev.verdict.passed is False
    assert "loop/repeated_call" in kinds(ev)
    assert kinds(ev) - {"loop/repeated_call"} == extra


def test_a_failing_detector_is_a_finding_and_the_others_still_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> list[Any]:
        raise ZeroDivisionError("boom")

    monkeypatch.setitem(detectors._DETECTORS, "budget", broken)
    ev = Evaluator(Config()).evaluate(looping_trace(chat([])))
    errors = [f for f in ev.findings if f.kind == "evaluation_error"]
    assert [(f.detector, f.severity, f.attributes) for f in errors] == [
        ("evaluation", "error", {"part": "budget", "error": "ZeroDivisionError"})]
    assert "loop/repeated_call" in kinds(ev)
    assert ev.verdict is not None and not ev.verdict.passed
    assert "budget could not evaluate this trace (ZeroDivisionError)" in ev.verdict.reasons


def test_a_failing_adapter_keeps_the_span_as_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    real = trajectory_module.read_span

    def read_span(step: Any, span: Span, attrs: Any) -> Any:
        if span.span_id == "a1":
            raise KeyError("x")
        return real(step, span, attrs)

    monkeypatch.setattr(trajectory_module, "read_span", read_span)
    ev = Evaluator(Config()).evaluate(looping_trace(chat([])))
    assert [s.span_id for s in ev.trajectory.steps] == ["a0", "a1", "b0", "b1", "b2"]
    assert ev.trajectory.steps[1].kind == "other" and ev.trajectory.steps[1].node == "a"
    errors = [f for f in ev.findings if f.kind == "evaluation_error"]
    assert [(f.attributes, f.span_ids) for f in errors] == [
        ({"part": "conventions.genai", "error": "KeyError"}, ["a1"])]
    assert "loop/repeated_call" in kinds(ev)


def test_a_trajectory_that_cannot_be_built(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(evaluator_module, "build_trajectory", broken)
    ev = Evaluator(Config()).evaluate(looping_trace(chat([])))
    assert ev.verdict is not None and not ev.verdict.passed
    assert [f.attributes for f in ev.findings if f.kind == "evaluation_error"] == [
        {"part": "trajectory", "error": "MemoryError"}]
    failed = Evaluator(Config()).failed(looping_trace(chat([])), ValueError("x"))
    assert failed.verdict is not None and failed.to_json()["verdict"]["passed"] is False
    assert failed.to_json()["findings"][0]["kind"] == "evaluation_error"


def strict(text: str | bytes) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_are_strings_in_every_json_out() -> None:
    trace = looping_trace(chat([]))
    trace.spans[2].attributes["gen_ai.tool.call.arguments"] = (
        '{"q": NaN, "r": [Infinity, -Infinity, 1.5]}')
    body = Evaluator(Config()).evaluate(trace).to_json()
    assert strict(json.dumps(body))["steps"][2]["arguments"] == {
        "q": "NaN", "r": ["Infinity", "-Infinity", 1.5]}


def test_json_text_is_the_json_of_the_object_with_and_without_non_finite_numbers() -> None:
    """The store writes ``to_json_text`` (strict encoding first, the walk only on a NaN):
    the same text as encoding ``to_json()``, the object that every other output uses."""
    clean = Evaluator(Config()).evaluate(looping_trace(chat([])))
    assert clean.to_json_text() == json.dumps(clean.to_json())
    trace = looping_trace(chat([]))
    trace.spans[2].attributes["gen_ai.tool.call.arguments"] = '{"q": NaN, "r": [-Infinity]}'
    hostile = Evaluator(Config()).evaluate(trace)
    assert hostile.to_json_text() == json.dumps(hostile.to_json())
    assert strict(hostile.to_json_text())["steps"][2]["arguments"] == {
        "q": "NaN", "r": ["-Infinity"]}


def test_the_text_bound_encoded_is_stored_until_the_object_changes() -> None:
    """Issue 34: ``bound`` encodes the object once; the store's text is that text, and a
    judge's verdict or a finding added later makes it encode anew (never a stale body)."""
    ev = Evaluator(Config()).evaluate(looping_trace(chat([])))
    assert ev.encoded is not None
    assert ev.to_json_text() is ev.encoded[0]
    ev.judge = {"overall": 0.5}
    assert json.loads(ev.to_json_text())["judge"] == {"overall": 0.5}
    ev = Evaluator(Config()).evaluate(looping_trace(chat([])))
    ev.findings.append(ev.findings[0])
    assert len(json.loads(ev.to_json_text())["findings"]) == len(ev.findings)


@pytest.mark.parametrize("text", ["plain", "é \u2028 \x7f \x00 \\ \" 😀 \U0010ffff", "\ud800 lone"])
def test_the_ascii_line_is_json_dumps_of_the_object(text: str) -> None:
    """``eval --format jsonl`` writes ``to_json_ascii``: byte for byte ``json.dumps``'s
    default output (non-ASCII and DEL escaped, astral characters as surrogate pairs)."""
    trace = looping_trace(chat([{"role": "assistant", "parts": [{"type": "text",
                                                                  "content": text}]}]))
    trace.spans[2].attributes["gen_ai.tool.call.arguments"] = json.dumps({"q": text, "n": 1e400})
    ev = Evaluator(Config()).evaluate(trace)
    assert ev.to_json_ascii() == json.dumps(ev.to_json())
    ev.judge = {"reason": text}
    assert ev.to_json_ascii() == json.dumps(ev.to_json())
