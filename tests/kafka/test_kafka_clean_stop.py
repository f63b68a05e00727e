"""A clean stop of a Kafka consumer-mode serve judges nothing that has not ended, and a
rebalance is no verdict (issue 30).

Half a run is on the topic when serve stops (real ``Service`` instances, hand-driven clock,
librdkafka's mock cluster): nothing is evaluated, the record's offset stays uncommitted, and
the stop does not wait for it. The next serve of the group replays the record, takes the rest
of the run, and evaluates it once, whole. A revoked partition's runs in flight are handed
over: the engine forgets them unjudged (the new owner replays their records whole).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from kafka_doubles import FakeEngine, Topic, produce_raw
from kafka_traces import requests_for, trace_ids
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from support.harness import running_service
from support.poll import poll
from test_kafka_serve import consumed, kafka_changes

from otel_eval.app.config import Config, replace
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.decode import otlp
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.receive.kafka.consumer import KafkaConsumerStage
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

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
    with running_service(tmp_path, **changes) as h:
        poll(lambda: consumed(h) == len(head), "half the run consumed")
        assert h.release() == 0 and h.svc.engine.open_traces() == 1
        assert h.svc.kafka is not None
        stage = h.svc.kafka.component.part
        assert isinstance(stage, KafkaConsumerStage)
        h.svc.shutdown(5.0)
        # nothing awaited for the run left open (it never finishes in this process): every
        # wait of the stop ended by its own path, none by the deadline, and the run's record
        # is still in flight, neither stored nor given up
        assert stage.stop_timeouts == []
        assert stage.tracker.inflight() == 1
        assert h.sample("otel_eval_assembly_spans_released_total") == 0
    assert asyncio.run(group_committed(topic, changes["kafka.group_id"])) in (None, 0)

    produce(topic, tid, tail)
    with running_service(tmp_path, **changes) as h:
        assert h.svc.store.get(tid) is None  # the stop stored no verdict
        poll(lambda: consumed(h) == len(spans), "the head replayed and the tail taken")
        assert h.release() == 1
        body = h.svc.store.get(tid)
        assert body is not None and body["status"] == "complete" and body["revision"] == 0
        assert body["counts"] == {"spans": 9, "steps": 4, "llm_calls": 4, "tool_calls": 4,
                                  "errors": 0}
        assert not [f for f in body["findings"] if f["detector"] == "non_termination"]
        poll(lambda: h.sample("otel_eval_kafka_committed_offset", topic="spans",
                              partition=str(PARTITION)) == 2, "both records committed")


class HandingOver(FakeEngine):
    """The fake engine, recording what a revocation hands over."""

    def __init__(self) -> None:
        super().__init__()
        self.handed_over: list[set[str]] = []

    def hand_over(self, trace_ids: set[str]) -> int:
        self.handed_over.append(set(trace_ids))
        return len(trace_ids)


def test_a_revoked_partition_hands_its_runs_in_flight_over_unjudged() -> None:
    """A rebalance is no verdict: the runs the revoked partition fed and that are not stored
    are handed over (forgotten by the engine, their records uncommitted), the others kept."""
    a, b, c = trace_ids(3)
    [req_a, req_b, req_c] = [requests_for([t], 2, 1)[0].SerializeToString() for t in (a, b, c)]

    async def revoke() -> list[set[str]]:
        engine = HandingOver()
        stage = KafkaConsumerStage(KafkaConfig(brokers="127.0.0.1:9", topic="t", logs_topic=""),
                                   engine)
        stage._loop = asyncio.get_running_loop()
        p0, p1 = TopicPartition("t", 0), TopicPartition("t", 1)
        stage._take(p0, 0, req_a)
        stage._take(p0, 1, req_b)
        stage._take(p1, 0, req_c)
        engine.release(lambda ids: ids == {b})  # b's record is stored: nothing to hand over
        stage._drain_stored()  # what the loop would run next (queued by the engine thread)
        await stage._revoke({p0})
        return engine.handed_over

    assert asyncio.run(revoke()) == [{a}]


def test_the_engine_forgets_handed_over_runs_without_a_verdict(tmp_path: Path) -> None:
    clock = [1000.0]
    metrics = Metrics(CollectorRegistry())
    cfg = replace(Config(), **{"assembly.idle_timeout_s": 60.0})
    store = Store(str(tmp_path / "s.db"))
    engine = Engine(InProcess(Evaluator(cfg), store),
                    StoreHealth(store.location, clock=lambda: clock[0]), metrics,
                    assembly=cfg.assembly, clock=lambda: clock[0])
    (tid, spans), (other, more) = agent_run(2), agent_run(2)
    engine.submit(otlp.decode_request(encode_spans(spans[:3])).spans, source="kafka")
    engine.submit(otlp.decode_request(encode_spans(more[:3])).spans, source="otlp")
    assert engine.hand_over({tid, other, "8d" * 16}) == 1  # only what Kafka fed
    assert engine.open_traces() == 1 and engine.pending_spans() == 3
    clock[0] += 61.0
    assert engine.tick() == 1  # the OTLP run, idle: the handed-over one is gone unjudged
    engine.process()
    assert store.get(tid) is None and store.get(other) is not None
