"""Hostile span content through ``serve`` (issue 11): the official SDK exporter sends a
looping run whose LLM span has ``"parts": 1`` and an unresolvable ``$ref`` and whose tool
arguments hold NaN / -Infinity; the stored evaluation has a verdict and its findings, and
``/v1/evaluations`` answers JSON a strict parser accepts."""

from __future__ import annotations

import json
import math
import urllib.request
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from support.harness import running_service

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}
SEARCH = {"type": "object", "properties": {"q": {"type": "string"}}}


def strict(text: str | bytes) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def chat(output: Any, tools: Any) -> dict[str, Any]:
    return {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(output),
            "gen_ai.tool.definitions": json.dumps(tools)}


def search(args: str) -> dict[str, Any]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
            "gen_ai.tool.call.arguments": args}


def tools_with(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "search", "parameters": schema}]


def test_served_evaluations_are_strict_json_with_a_verdict(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=h.http_url)))
        tracer = provider.get_tracer("hostile")
        with tracer.start_as_current_span("invoke_agent a", attributes=AGENT) as root:
            with tracer.start_as_current_span("chat", attributes=chat(
                    [{"role": "assistant", "parts": 1, "x": "tool_call"}],
                    tools_with({**SEARCH, "properties": {"q": {"$ref": "#/nope"}}}))):
                pass
            for _ in range(3):
                with tracer.start_as_current_span("execute_tool search", attributes=search(
                        '{"q": [NaN, -Infinity]}')):
                    pass
            trace_id = f"{root.get_span_context().trace_id:032x}"
        provider.shutdown()
        assert h.release() == 1
        one = strict(urllib.request.urlopen(f"{h.admin_url}/v1/evaluations/{trace_id}").read())
        listed = strict(urllib.request.urlopen(f"{h.admin_url}/v1/evaluations").read())
    assert listed["evaluations"][0]["trace_id"] == trace_id
    assert one["verdict"]["passed"] is False
    assert {f"{f['detector']}/{f['kind']}" for f in one["findings"]} >= {
        "loop/repeated_call", "tool_call/schema"}
    assert one["steps"][2]["arguments"] == {"q": ["NaN", "-Infinity"]}
    assert not math.isnan(one["duration_s"])
