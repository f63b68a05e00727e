"""A run whose every value is an attack on the page that shows it: HTML and script, event
handlers, ``javascript:`` links, ANSI and OSC escapes, and 20 MB values in a span name, a
tool output and a critique. Each script, if it ever ran, sets ``window.__pwned``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TRACE_ID = "0123456789abcdef0123456789abcdef"
BIG = 20_000_000
# The critique stays under a results page's byte bound (store MAX_PAGE_BYTES, 16 MiB), so the
# run list shows this run beside the guide's on one page.
CRITIQUE_BIG = 10_000_000
XSS = ('<script>window.__pwned="script"</script><img src=x onerror="window.__pwned=\'img\'">'
       '<a href="javascript:window.__pwned=\'link\'" id="evil">click</a>'
       '"><svg onload="window.__pwned=\'svg\'"></svg><style>body{display:none}</style>')
JS_LINK = "javascript:window.__pwned='bare'"
ESCAPES = "\x1b]8;;javascript:alert(1)\x1b\\osc link\x1b]8;;\x1b\\ \x1b[31mred\x1b[0m \x9b2J"


def _attr(key: str, value: Any) -> dict[str, Any]:
    kind = "intValue" if isinstance(value, int) else "stringValue"
    return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}


def _span(span_id: str, parent: str | None, name: str, start: int,
          attrs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": TRACE_ID, "spanId": span_id, "name": name, "kind": 1,
        "startTimeUnixNano": str(1_764_600_000_000_000_000 + start * 1_000_000),
        "endTimeUnixNano": str(1_764_600_000_000_000_000 + (start + 50) * 1_000_000),
        "attributes": [_attr(k, v) for k, v in attrs.items()], "status": {}}
    if parent:
        out["parentSpanId"] = parent
    return out


def write_trace(path: Path) -> Path:
    asked = [{"role": "assistant", "parts": [
        {"type": "text", "content": XSS + ESCAPES},
        {"type": "tool_call", "id": "c1", "name": XSS, "arguments": {"url": JS_LINK}}]}]
    spans = [
        _span("a000000000000001", None, "invoke_agent " + XSS, 0, {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "agent" + XSS,
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                {"type": "text", "content": JS_LINK + " " + XSS}]}])}),
        _span("a000000000000002", "a000000000000001", "chat " + ESCAPES, 10, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m" + XSS,
            "gen_ai.output.messages": json.dumps(asked)}),
        _span("a000000000000003", "a000000000000001", "execute_tool fetch", 100, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch",
            "gen_ai.tool.call.arguments": json.dumps({"url": JS_LINK, "html": XSS}),
            "gen_ai.tool.call.result": XSS + ESCAPES + "R" * BIG}),
        _span("a000000000000004", "a000000000000001", "execute_tool " + "N" * BIG, 200, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch",
            "gen_ai.tool.call.arguments": json.dumps({"url": JS_LINK, "html": XSS}),
            "gen_ai.tool.call.result": "again"}),
        _span("a000000000000005", "a000000000000001", "execute_tool fetch", 300, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch",
            "gen_ai.tool.call.arguments": json.dumps({"url": JS_LINK, "html": XSS}),
            "gen_ai.tool.call.result": "again"}),  # the same again: a repeat, not a poll
    ]
    doc = {"resourceSpans": [{"resource": {"attributes": [_attr("service.name",
                                                                "svc" + XSS)]},
                              "scopeSpans": [{"scope": {"name": "hostile"}, "spans": spans}]}]}
    path.write_text(json.dumps(doc))
    return path


def judge(span_id: str) -> dict[str, Any]:
    """A judge result whose critique is hostile and 20 MB long."""
    return {"judges": {"combined": {"status": "ok", "critiques": [
        {"dimension": XSS, "score": 0.1, "text": XSS + ESCAPES + "C" * CRITIQUE_BIG,
         "span_id": span_id, "node": None, "step_index": None}]}},
        "overall": {"status": "ok", "process_score": 0.1}}
