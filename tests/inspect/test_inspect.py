"""``otel-eval inspect``: per step, where each field came from and what stayed unknown."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from otel_eval.app.cli import build_parser, cmd_inspect

TRACE_ID = "5b8efff798038103d269b633813fc60c"


def _attrs(values: dict[str, str]) -> list[dict[str, Any]]:
    return [{"key": k, "value": {"stringValue": v}} for k, v in values.items()]


def _span(span_id: str, parent: str | None, name: str, start: int,
          attrs: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"traceId": TRACE_ID, "spanId": span_id, "name": name,
                           "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 5),
                           "attributes": _attrs(attrs)}
    if parent:
        out["parentSpanId"] = parent
    return out


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    spans = [
        _span("a000000000000001", None, "invoke_agent Agent", 1, {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Agent",
            "traceloop.entity.name": "planner"}),
        _span("a000000000000002", "a000000000000001", "search.tool", 2, {
            "traceloop.span.kind": "tool", "traceloop.entity.name": "search",
            "gen_ai.tool.call.arguments": '{"query": "same"}'}),
        _span("a000000000000003", "a000000000000001", "search.tool", 3, {
            "traceloop.span.kind": "tool", "traceloop.entity.name": "search",
            "traceloop.entity.input": '{"envelope": {"query": "x"}}'}),
        _span("a000000000000004", "a000000000000001", "GET /health", 4, {
            "http.method": "GET", "\x1b[31mred": "x"}),
        _span("a000000000000005", "a000000000000001", "chat", 0, {
            "gen_ai.operation.name": "chat", "gen_ai.tool.definitions": json.dumps([
                {"name": "search", "parameters": {"type": "object", "properties": {
                    "query": {"type": "string"}}, "required": ["query"]}}])}),
    ]
    body = {"resourceSpans": [{"resource": {"attributes": _attrs({"service.name": "svc"})},
                               "scopeSpans": [{"spans": spans}]}]}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(body))
    return path


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return cmd_inspect(build_parser().parse_args(["inspect", *argv]), out), out.getvalue()


def test_json_says_where_each_field_came_from(trace_file: Path) -> None:
    code, text = _run(str(trace_file), "--format", "json")
    assert code == 0
    [rep] = json.loads(text)
    assert (rep["agent"], rep["agent_source"], rep["agent_from"]) == (
        "planner", "span", "openllmetry traceloop.entity.name")
    steps = {s["span_id"]: s for s in rep["steps"]}
    merged = steps["a000000000000002"]
    assert merged["convention"] == "openllmetry"
    assert merged["fields"]["arguments"] == {"source": "genai gen_ai.tool.call.arguments",
                                             "value": "{'query': 'same'}"}
    assert merged["fields"]["tool_name"]["source"] == "openllmetry traceloop.entity.name"
    assert merged["unknown"] == {"result": "not recorded", "call_id": "not recorded"}
    unparsed = steps["a000000000000003"]
    assert unparsed["unknown"]["arguments"].startswith("unparsed: keys the tool's schema")
    assert rep["unrecorded"]["unparsed"] == 1
    [odd] = rep["not_understood"]
    assert odd["span_id"] == "a000000000000004"
    assert "http.method" in odd["attributes"]


def test_text_output_and_a_trace_id_looked_up_in_files(trace_file: Path) -> None:
    code, text = _run(TRACE_ID, str(trace_file))
    assert code == 0
    assert "agent 'planner' (span: openllmetry traceloop.entity.name)" in text
    assert "arguments       UNKNOWN: unparsed" in text
    assert "spans not understood (1):" in text
    assert "\x1b" not in text  # span content is printed escaped


def test_no_such_trace_and_a_bare_trace_id_fail_clearly(
        trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(str(trace_file), "--trace", "0" * 32)[0] == 1
    assert _run(TRACE_ID)[0] == 1
    assert "serve stores results, not spans" in capsys.readouterr().err


def test_the_conversation_and_its_user_are_shown(tmp_path: Path) -> None:
    spans = [_span("b000000000000001", None, "invoke_agent Agent", 1, {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Agent",
        "session.id": "conv-1", "user.id": "u-1"}),
             _span("b000000000000002", "b000000000000001", "chat", 2, {
                 "gen_ai.operation.name": "chat", "session.id": "conv-2"})]
    body = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    path = tmp_path / "turn.json"
    path.write_text(json.dumps(body))
    [rep] = json.loads(_run(str(path), "--format", "json")[1])
    assert (rep["session_id"], rep["user_id"]) == ("conv-1", "u-1")
    assert rep["conversation_sources"] == {"session_id": "openinference session.id",
                                           "user_id": "openinference user.id"}
    text = _run(str(path))[1]
    assert "conversation 'conv-1' (openinference session.id)" in text
    assert "user 'u-1' (openinference user.id)" in text
    assert rep["other_session_ids"] == ["conv-2"] and "also carried 'conv-2'" in text
