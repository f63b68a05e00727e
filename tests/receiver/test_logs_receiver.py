"""OTLP logs in: GenAI events sent as log records join their span, over gRPC and HTTP, with the
official SDK exporters; other records are ignored and counted; a record before its span works.

The agent here is what a hand-written loop instrumented with openai-v2 in its default mode
emits: content only in log records, the tool span with a call id and no arguments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry._logs import LogRecord as ApiLogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import set_span_in_context
from support.harness import Harness, running_service

CALLS = [("call_a1", "Paris"), ("call_b2", "London")]


def _providers(h: Harness, protocol: str) -> tuple[TracerProvider, LoggerProvider]:
    res = Resource.create({"service.name": "logs-agent"})
    tp, lp = TracerProvider(resource=res), LoggerProvider(resource=res)
    if protocol == "grpc":
        tp.add_span_processor(SimpleSpanProcessor(GrpcSpans(h.grpc_target, insecure=True)))
        lp.add_log_record_processor(SimpleLogRecordProcessor(
            GrpcLogs(h.grpc_target, insecure=True)))
    else:
        base = h.http_url.rsplit("/", 1)[0]
        tp.add_span_processor(SimpleSpanProcessor(HttpSpans(f"{base}/traces")))
        lp.add_log_record_processor(SimpleLogRecordProcessor(HttpLogs(f"{base}/logs")))
    return tp, lp


def _emit(logger: Any, span: Any, name: str, body: Any) -> None:
    ctx = span.get_span_context()
    logger.emit(ApiLogRecord(trace_id=ctx.trace_id, span_id=ctx.span_id,
                             trace_flags=ctx.trace_flags, body=body, event_name=name,
                             attributes={"gen_ai.system": "openai"}))


def _run_agent(tp: TracerProvider, lp: LoggerProvider, *, logs_first: bool) -> str:
    tracer, logger = tp.get_tracer("agent"), lp.get_logger("openai-v2")
    with tracer.start_as_current_span("invoke_agent weather", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}) as root:
        for turn in range(len(CALLS) + 1):
            llm = tracer.start_span("chat gpt-4o-mini", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": 50, "gen_ai.usage.output_tokens": 10})
            _emit(logger, llm, "gen_ai.user.message", {"content": "Weather? [city list]"})
            if turn < len(CALLS):
                cid, city = CALLS[turn]
                message = {"role": "assistant", "tool_calls": [{
                    "id": cid, "type": "function", "function": {
                        "name": "get_weather", "arguments": json.dumps({"city": city})}}]}
                reason = "tool_calls"
            else:
                message, reason = {"role": "assistant", "content": "Sunny in both."}, "stop"
            if logs_first:
                _emit(logger, llm, "gen_ai.choice",
                      {"index": 0, "finish_reason": reason, "message": message})
                llm.end()
            else:
                llm.end()
                _emit(logger, llm, "gen_ai.choice",
                      {"index": 0, "finish_reason": reason, "message": message})
            if turn < len(CALLS):
                with tracer.start_as_current_span(
                        "execute_tool get_weather", context=set_span_in_context(root),
                        attributes={"gen_ai.operation.name": "execute_tool",
                                    "gen_ai.tool.name": "get_weather",
                                    "gen_ai.tool.call.id": CALLS[turn][0]}):
                    pass
        # a record that is not a GenAI event: acknowledged, ignored, counted
        logger.emit(ApiLogRecord(body="just a log line"))
        trace_id = f"{root.get_span_context().trace_id:032x}"
    return trace_id


@pytest.mark.parametrize(("protocol", "logs_first"), [("grpc", True), ("http", False)])
def test_genai_log_events_join_their_spans(tmp_path: Path, protocol: str,
                                           logs_first: bool) -> None:
    with running_service(tmp_path) as h:
        tp, lp = _providers(h, protocol)
        trace_id = _run_agent(tp, lp, logs_first=logs_first)
        tp.shutdown()
        lp.shutdown()
        assert h.release() == 1
        body = h.svc.store.get(trace_id)
        assert body is not None
        tools = [s for s in body["steps"] if s["kind"] == "tool"]
        assert [(s["arguments"], s.get("call_id"), s.get("rebuilt", False)) for s in tools] \
            == [({"city": "Paris"}, "call_a1", False), ({"city": "London"}, "call_b2", False)]
        assert body["output"] == "Sunny in both."
        assert body["input"] == "Weather? [city list]"
        assert body["verdict"]["passed"] is True, body["findings"]
        assert not [f for f in body["findings"] if f["detector"] == "loop"]
        llm = [s for s in body["steps"] if s["kind"] == "llm"]
        assert [s["finish_reasons"] for s in llm] == [["tool_calls"]] * 2 + [["stop"]]
        assert body["usage"]["cost_usd"] > 0  # priced from model and tokens
        labels = {"protocol": protocol}
        assert h.sample("otel_eval_receiver_log_records_accepted_total", **labels) == 6
        assert h.sample("otel_eval_receiver_log_records_ignored_total",
                        reason="not_genai_event", **labels) == 1
        assert h.sample("otel_eval_receiver_log_records_received_total", **labels) == 7
        assert h.sample("otel_eval_assembly_pending_log_records") == 0


def test_content_not_recorded_is_unknown_not_a_loop(tmp_path: Path) -> None:
    """The same agent with content capture off: no logs, tool spans without arguments. Six
    different calls must not read as six identical ones, nor as schema errors, nor as a run
    without output."""
    with running_service(tmp_path) as h:
        tp = TracerProvider(resource=Resource.create({"service.name": "quiet-agent"}))
        tp.add_span_processor(SimpleSpanProcessor(GrpcSpans(h.grpc_target, insecure=True)))
        tracer = tp.get_tracer("agent")
        with tracer.start_as_current_span("invoke_agent quiet", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "quiet",
                "gen_ai.tool.definitions": json.dumps([{"type": "function", "function": {
                    "name": "search", "parameters": {"type": "object", "required": ["q"],
                                                     "properties": {"q": {"type": "string"}}}}}])
                }) as root:
            for i in range(6):
                with tracer.start_as_current_span("chat", attributes={
                        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}):
                    pass
                with tracer.start_as_current_span("execute_tool search", attributes={
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                        "gen_ai.tool.call.id": f"call_{i}"}):
                    pass
            trace_id = f"{root.get_span_context().trace_id:032x}"
        tp.shutdown()
        h.release()
        body = h.svc.store.get(trace_id)
        assert body is not None
        assert body["findings"] == [], body["findings"]
        assert body["verdict"]["passed"] is True
        assert body["unrecorded"] == {"arguments": 6, "tool_results": 6, "llm_output": 6,
                                      "output": 1}
        assert h.sample("otel_eval_traces_non_terminated_total", service="quiet-agent",
                        agent="quiet") == 0
