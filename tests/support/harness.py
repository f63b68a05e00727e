"""An in-process ``Service`` on loopback port 0 with a hand-driven clock (no worker thread), and
``emit_agent_run``: one small agent run sent through the official OTel SDK."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Status, StatusCode
from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from support.clock import ManualClock


class Harness:
    def __init__(self, svc: Service, clock: ManualClock) -> None:
        self.svc, self.clock = svc, clock

    @property
    def grpc_target(self) -> str:
        assert self.svc.grpc is not None
        return f"127.0.0.1:{self.svc.grpc.port}"

    @property
    def http_url(self) -> str:
        assert self.svc.http is not None
        return f"http://127.0.0.1:{self.svc.http.port}/v1/traces"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.svc.admin.port}"

    def release(self, after_s: float | None = None) -> int:
        """Advance the clock past the grace period (or by ``after_s``), evaluate, store."""
        self.clock.now += self.svc.config.assembly.grace_s + 0.001 if after_s is None \
            else after_s
        self.svc.engine.tick()
        return self.svc.engine.process()

    def sample(self, name: str, **labels: str) -> float:
        value = self.svc.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


@contextmanager
def running_service(tmp_path: Path, **changes: Any) -> Iterator[Harness]:
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "127.0.0.1:0",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "otel-eval.db"),
        "evaluation.workers": 1,
        **changes})
    clock = ManualClock()
    svc = Service(cfg, registry=CollectorRegistry(), clock=clock)
    svc.start(worker=False)
    try:
        yield Harness(svc, clock)
    finally:
        svc.shutdown(deadline_s=5)


def emit_agent_run(exporter: SpanExporter, *, tool_error: bool = False) -> str:
    """One small agent run in current GenAI conventions through the official SDK."""
    provider = TracerProvider(resource=Resource.create({"service.name": "travel-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test-agent")
    with tracer.start_as_current_span("invoke_agent planner", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}) as root:
        with tracer.start_as_current_span("chat gpt-4o", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 30}):
            pass
        with tracer.start_as_current_span("execute_tool get_weather", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.arguments": '{"city": "Paris"}'}) as tool:
            if tool_error:
                tool.set_status(Status(StatusCode.ERROR, "upstream 500"))
        trace_id = f"{root.get_span_context().trace_id:032x}"
    provider.shutdown()
    return trace_id
