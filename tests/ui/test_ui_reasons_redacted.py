"""A verdict's reasons are its error findings' messages, and a loop finding's message quotes
the command a shell agent repeated: the reasons are redacted as the judge sees them wherever
a page lists them, as the findings themselves are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ui_server import admin, evaluate, get

from otel_eval.evaluate.judge.config import RedactionConfig
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.outputs.ui.sessions import session_page
from otel_eval.store import Store

TRACE_ID = "5ec2e75ec2e75ec2e75ec2e75ec2e75e"
SECRET = "sk-" + "b" * 40  # an OpenAI-style key: the judge's redaction hides it
START = 1_764_600_000_000_000_000


def _span(span_id: str, parent: str | None, name: str, at: int,
          attrs: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": TRACE_ID, "spanId": span_id, "name": name, "kind": 1,
        "startTimeUnixNano": str(START + at * 1_000_000),
        "endTimeUnixNano": str(START + (at + 5) * 1_000_000),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}
    if parent:
        out["parentSpanId"] = parent
    return out


def _shell_loop(path: Path) -> Path:
    """A shell agent that runs the same command, holding a key, twice in a row."""
    command = json.dumps({"command": f"echo {SECRET}"})
    spans = [_span("b000000000000001", None, "invoke_agent sh", 0, {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "sh"})]
    spans += [_span(f"b00000000000000{i}", "b000000000000001", "execute_tool bash", 10 * i, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "bash",
        "gen_ai.tool.call.arguments": command, "gen_ai.tool.call.result": "ok"})
        for i in (2, 3)]
    doc = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "shell"}}]},
        "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]}
    path.write_text(json.dumps(doc))
    return path


def test_the_run_page_redacts_the_verdict_s_reasons(tmp_path: Path) -> None:
    [run] = evaluate([str(_shell_loop(tmp_path / "loop.json"))])
    reasons = run.to_json()["verdict"]["reasons"]
    assert any(SECRET in r for r in reasons)  # the loop's message quotes the command
    store = Store(str(tmp_path / "otel-eval.db"))
    try:
        store.put_many([run])
        with admin(store) as url:
            status, _, page = get(f"{url}/ui/runs/{TRACE_ID}")
    finally:
        store.close()
    assert status == 200 and b"loop:repeated_action" in page
    assert SECRET.encode() not in page  # was listed whole under the verdict's reasons


def test_the_conversation_page_redacts_reasons_and_findings() -> None:
    message = f"bash: echo {SECRET} called 2 times in a row with identical action"
    record = {"session_id": "s1", "service": "shell", "status": "open",
              "traces": [TRACE_ID], "counts": {"turns": 1},
              "verdict": {"passed": False, "reasons": [
                  f"turn 1 ({TRACE_ID}) failed: {message}"]},
              "findings": [{"detector": "loop", "kind": "repeated_across_turns",
                            "severity": "error", "message": message,
                            "trace_id": TRACE_ID, "step": None}]}
    shown = session_page(record, lambda _t: None, Redactor(RedactionConfig()).redact)
    assert "repeated_across_turns" in shown
    assert SECRET not in shown


def test_the_run_page_redacts_the_arguments_of_a_call_that_never_ran() -> None:
    from otel_eval.outputs.ui.run import tree
    from otel_eval.outputs.ui.runview import run_page

    body = {"trace_id": TRACE_ID, "status": "complete", "verdict": {"passed": True,
                                                                  "reasons": []},
            "counts": {"spans": 1, "llm_calls": 1, "tool_calls": 0, "errors": 0},
            "usage": {}, "findings": [],
            "steps": [{"index": 0, "span_id": "a" * 16, "parent_span_id": None,
                       "kind": "llm", "name": "chat", "status": "ok", "answer": "ok",
                       "tool_calls": [{"name": "send", "arguments": {"key": SECRET},
                                       "call_id": "c1", "outcome": "never_ran"}]}]}
    page = run_page(tree(body), Redactor(RedactionConfig()).redact)
    assert "NEVER RAN" in page and "send" in page
    assert SECRET not in page  # as the step's own arguments, redacted as the judge sees it
