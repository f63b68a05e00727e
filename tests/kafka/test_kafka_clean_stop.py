"""A clean stop of a Kafka consumer-mode serve judges nothing that has not ended (issue 30):
real ``Service`` instances (hand-driven clock) against librdkafka's mock cluster.

Half a run is on the topic when serve stops: nothing is evaluated, the record's offset stays
uncommitted, and the stop does not wait for it. The next serve of the group replays the
record, takes the rest of the run, and evaluates it once, whole.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from kafka_doubles import Topic, produce_raw
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from service_harness import running_service
from test_kafka_serve import consumed, kafka_changes, wait_for

PARTITION = 2


def agent_run(steps: int) -> tuple[str, list[ReadableSpan]]:
    """One run through the official SDK, in export order (the root last)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "travel-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test-agent")
    with tracer.start_as_current_span("invoke_agent planner", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}) as root:
        for step in range(steps):
            with tracer.start_as_current_span("chat gpt-4o", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 100}):
                pass
            with tracer.start_as_current_span(f"execute_tool lookup{step}", attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": f"lookup{step}"}):
                pass
    provider.shutdown()
    return f"{root.get_span_context().trace_id:032x}", list(memory.get_finished_spans())


def produce(topic: Topic, tid: str, spans: list[ReadableSpan]) -> None:
    value = encode_spans(spans).SerializeToString()
    asyncio.run(produce_raw(topic, value, key=tid.encode(), partition=PARTITION))


async def group_committed(topic: Topic, group: str) -> int | None:
    """The group's committed offset of the partition on the broker (None: none)."""
    c = AIOKafkaConsumer(bootstrap_servers=topic.bootstrap, group_id=group,
                         enable_auto_commit=False)
    await c.start()
    try:
        return await c.committed(TopicPartition(topic.name, PARTITION))
    finally:
        await c.stop()


def test_a_stop_leaves_the_offsets_of_a_run_in_flight_uncommitted(
        topic: Topic, tmp_path: Path) -> None:
    tid, spans = agent_run(4)  # 9 spans: 4 model calls, 4 tool calls, the root
    head, tail = spans[:5], spans[5:]
    produce(topic, tid, head)
    # static: no group join per start (the mock cluster holds a rejoin ~30 s)
    changes = kafka_changes(topic, **{"kafka.assignment": "static"})
    deadline_s = 5.0
    with running_service(tmp_path, **changes) as h:
        wait_for(lambda: consumed(h) == len(head), "half the run consumed")
        assert h.release() == 0 and h.svc.engine.open_traces() == 1
        began = time.monotonic()
        h.svc.shutdown(deadline_s)
        # nothing awaited for the run left open (it never finishes in this process)
        assert time.monotonic() - began < deadline_s / 2
        assert h.sample("otel_eval_assembly_spans_released_total") == 0
    assert asyncio.run(group_committed(topic, changes["kafka.group_id"])) in (None, 0)

    produce(topic, tid, tail)
    with running_service(tmp_path, **changes) as h:
        assert h.svc.store.get(tid) is None  # the stop stored no verdict
        wait_for(lambda: consumed(h) == len(spans), "the head replayed and the tail taken")
        assert h.release() == 1
        body = h.svc.store.get(tid)
        assert body is not None and body["status"] == "complete" and body["revision"] == 0
        assert body["counts"] == {"spans": 9, "llm_calls": 4, "tool_calls": 4, "errors": 0}
        assert not [f for f in body["findings"] if f["detector"] == "non_termination"]
        wait_for(lambda: h.sample("otel_eval_kafka_committed_offset", topic="spans",
                                  partition=str(PARTITION)) == 2, "both records committed")
