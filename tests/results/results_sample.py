"""A small evaluated agent trace shared by the sink tests."""

from __future__ import annotations

from otel_eval.base import model
from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Trajectory

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
ROOT, LLM, TOOL = "00f067aa0ba902b7", "1111111111111111", "2222222222222222"
RESOURCE = {"service.name": "shop-agent"}


def trace() -> model.Trace:
    spans = [
        model.Span(TRACE_ID, ROOT, None, "invoke_agent shop", 1_000, 9_000, resource=RESOURCE,
                   scope="agent", attributes={"gen_ai.agent.name": "shop"}),
        model.Span(TRACE_ID, LLM, ROOT, "chat gpt-4o", 2_000, 3_000, resource=RESOURCE,
                   scope="agent", attributes={"gen_ai.usage.input_tokens": 10}),
        model.Span(TRACE_ID, TOOL, ROOT, "execute_tool search", 4_000, 5_000, status="error",
                   resource=RESOURCE, scope="agent", attributes={"gen_ai.tool.name": "search"}),
    ]
    return model.Trace(TRACE_ID, spans, "complete", release_reason="root_ended")


def evaluation(passed: bool = False) -> Evaluation:
    traj = Trajectory(TRACE_ID, "otlp", "complete", [], service="shop-agent",
                      agent="shop")
    findings = [
        Finding("loop", "repeated_tool_call", "error", "search called 3 times",
                span_ids=[TOOL, LLM]),
        Finding("tool_call", "runtime", "warning", "search raised", span_ids=[TOOL]),
        Finding("budget", "tokens", "info", "near the token budget",
                attributes={"budget": "tokens"}),
    ]
    verdict = Verdict(passed, [] if passed else ["loop: search called 3 times"])
    return Evaluation(traj, findings, verdict, evaluated_at_ns=123_456)
