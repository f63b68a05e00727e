"""``serve`` with Kafka, end to end: real ``Service`` instances (receivers, engine, store, admin
on port 0, hand-driven clock) against librdkafka's mock cluster.

- a consumer-mode service stores the traces a collector's kafka exporter writes (split per
  trace id, keyed, fnv1a-partitioned; otlp_proto and otlp_json), and commits them;
- a receiver-mode service (``kafka.publish``) fed by the OTel SDK's OTLP exporter writes
  records that a consumer-mode service evaluates exactly as a plain service evaluates the
  same spans received directly over OTLP;
- with ``kafka.results_topic`` the results topic carries one JSON per stored trace.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from kafka_doubles import Topic, produce_raw
from kafka_mock_cluster import MockCluster
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExp
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExp
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from support.harness import Harness, running_service
from support.poll import poll

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.decode import otlp
from otel_eval.receive.kafka.publisher import KafkaPublisher, sarama_partition


def emit_runs(exporters: list[SpanExporter], n: int) -> list[str]:
    """``n`` agent runs through the official SDK (GenAI conventions; some loop on a tool,
    some hit a tool error), each exported span by span to every exporter."""
    provider = TracerProvider(resource=Resource.create({"service.name": "travel-agent"}))
    for e in exporters:
        provider.add_span_processor(SimpleSpanProcessor(e))
    tracer = provider.get_tracer("test-agent")
    ids = []
    for i in range(n):
        with tracer.start_as_current_span("invoke_agent planner", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}) as root:
            for step in range(1 + (i % 3) * 3):  # 1, 4 or 7 identical tool calls
                with tracer.start_as_current_span("chat gpt-4o", attributes={
                        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                        "gen_ai.usage.input_tokens": 100 + step,
                        "gen_ai.usage.output_tokens": 20}):
                    pass
                with tracer.start_as_current_span("execute_tool get_weather", attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "get_weather",
                        "gen_ai.tool.call.arguments": '{"city": "Paris"}'}) as tool:
                    if i % 4 == 1:
                        tool.set_status(Status(StatusCode.ERROR, "upstream 500"))
            ids.append(f"{root.get_span_context().trace_id:032x}")
    provider.shutdown()
    return ids


def sdk_batch(n: int) -> tuple[list[str], ExportTraceServiceRequest]:
    """``n`` runs as one OTLP request, as an SDK batch processor would send them."""
    memory = InMemorySpanExporter()
    ids = emit_runs([memory], n)
    return ids, encode_spans(memory.get_finished_spans())


def kafka_changes(topic: Topic, **more: Any) -> dict[str, Any]:
    return {"kafka.brokers": topic.bootstrap, "kafka.topic": topic.name,
            "kafka.logs_topic": "", "kafka.group_id": f"g-{topic.name}",
            "kafka.commit_interval_s": 0.05, "kafka.throttle_retry_s": 0.05, **more}


def consumed(h: Harness) -> float:
    return h.sample("otel_eval_kafka_spans_consumed_total")


def committed(h: Harness, partitions: int) -> float:
    return sum(h.sample("otel_eval_kafka_committed_offset", topic="spans", partition=str(p))
               for p in range(partitions))


def comparable(body: dict[str, Any] | None) -> dict[str, Any]:
    assert body is not None
    return {k: v for k, v in body.items() if k != "source"}


async def publish(topic: Topic, req: ExportTraceServiceRequest, encoding: str) -> int:
    pub = KafkaPublisher(KafkaConfig(brokers=topic.bootstrap, topic=topic.name,
                                     encoding=encoding))  # type: ignore[arg-type]
    await pub.start()
    try:
        return await pub.publish(req.SerializeToString())
    finally:
        await pub.stop()


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_consumer_service_stores_what_the_collector_exporter_writes(
        topic: Topic, tmp_path: Path, encoding: str) -> None:
    ids, req = sdk_batch(9)
    n_spans = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
    records = asyncio.run(publish(topic, req, encoding))
    assert records == 9  # one record per trace id, as partition_traces_by_id writes
    asyncio.run(produce_raw(topic, b"\x08garbage", key=b"x", partition=0))  # poison
    with running_service(tmp_path, **kafka_changes(topic, **{"kafka.encoding": encoding})) as h:
        poll(lambda: consumed(h) == n_spans, "every span consumed")
        poll(lambda: h.sample("otel_eval_kafka_records_poison_total", reason="not_otlp")
                 == 1,
             "the poison record counted")
        assert committed(h, topic.partitions) <= 1  # nothing stored yet: only the poison
        assert h.release() == 9
        for tid in ids:
            body = h.svc.store.get(tid)
            assert body is not None and body["source"] == "kafka", tid
            assert body["status"] == "complete" and body["service"] == "travel-agent"
        # Stored, so committed: every record (and the poison one) behind the watermark.
        poll(lambda: committed(h, topic.partitions) == records + 1, "the commit")


def test_consumer_service_decodes_records_within_the_receivers_decoding_budget(
        topic: Topic, tmp_path: Path) -> None:
    """serve's consumer is charged to ``receiver.max_decoding_bytes`` as its receivers are
    (one budget): a record decoding past it alone is poison ``too_large``, the rest stored."""
    ids, req = sdk_batch(1)
    big = ExportTraceServiceRequest()
    big.CopyFrom(req)
    big.resource_spans[0].scope_spans[0].spans[0].attributes.add(
        key="gen_ai.prompt").value.string_value = "x" * 100_000
    asyncio.run(produce_raw(topic, big.SerializeToString(), key=b"big", partition=1))
    records = asyncio.run(publish(topic, req, "otlp_proto"))
    with running_service(tmp_path, **kafka_changes(topic, **{
            "receiver.max_message_bytes": 16 * 1024,
            "receiver.max_decoding_bytes": 64 * 1024})) as h:
        poll(lambda: h.sample("otel_eval_kafka_records_poison_total", reason="too_large")
             == 1, "the record too large to decode counted")
        poll(lambda: h.release() == 1, "the small run released")
        assert h.svc.store.get(ids[0]) is not None
        poll(lambda: committed(h, topic.partitions) == records + 1, "the commit")


def test_publish_front_end_records_are_evaluated_like_direct_otlp(
        topic: Topic, tmp_path: Path) -> None:
    dirs = {name: tmp_path / name for name in ("direct", "front", "worker")}
    for d in dirs.values():
        d.mkdir()
    with running_service(dirs["direct"]) as direct, \
            running_service(dirs["front"], **kafka_changes(topic, **{"kafka.publish": True})
                            ) as front, \
            running_service(dirs["worker"], **kafka_changes(topic)) as worker:
        memory = InMemorySpanExporter()
        ids = emit_runs([memory, HttpExp(endpoint=direct.http_url),
                         GrpcExp(endpoint=front.grpc_target, insecure=True)], 8)
        n_spans = len(memory.get_finished_spans())
        # acknowledged to the SDK only after Kafka acknowledged: on the topic by now
        assert front.sample("otel_eval_kafka_records_published_total", topic="spans") == n_spans
        assert front.release() == 0  # the front end evaluates nothing itself
        poll(lambda: consumed(worker) == n_spans,
             "the worker to consume what the front end published")
        assert direct.release() == 8
        assert worker.release() == 8
        for tid in ids:
            got = worker.svc.store.get(tid)
            assert got is not None and got["source"] == "kafka"
            assert comparable(got) == comparable(direct.svc.store.get(tid)), tid
        assert front.svc.store.get(ids[0]) is None
    # stateless: no store file, no spool (acknowledged once Kafka acknowledged)
    assert not list(dirs["front"].iterdir())
    # Keyed and partitioned as the collector's exporter (partition_traces_by_id) writes them.
    records = asyncio.run(read_topic(topic.bootstrap, topic.name, topic.partitions))
    assert len(records) == n_spans
    for partition, key, value in records:
        (span,) = otlp.decode_request(ExportTraceServiceRequest.FromString(value)).spans
        assert key == span.trace_id.encode()
        assert partition == sarama_partition(key, topic.partitions)


async def read_topic(bootstrap: str, name: str, partitions: int
                     ) -> list[tuple[int, bytes, bytes]]:
    """Every record on a topic, up to its end offsets at the time of the call."""
    return [(p, k, v) for p, k, v, _ in await read_records(bootstrap, name, partitions)]


async def read_records(bootstrap: str, name: str, partitions: int
                       ) -> list[tuple[int, bytes, bytes, dict[str, bytes]]]:
    """``read_topic``, each record with its headers."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await c.start()
    try:
        parts = [TopicPartition(name, p) for p in range(partitions)]
        c.assign(parts)
        await c.seek_to_beginning(*parts)
        end = await c.end_offsets(parts)
        out: list[tuple[int, bytes, bytes, dict[str, bytes]]] = []
        while [tp for tp in parts if await c.position(tp) < end[tp]]:
            batch = await c.getmany(timeout_ms=1000)
            out.extend((r.partition, r.key, r.value, dict(r.headers))
                       for recs in batch.values() for r in recs)
        return out
    finally:
        await c.stop()


def test_results_topic_carries_one_json_per_stored_trace(
        topic: Topic, mock_cluster: MockCluster, tmp_path: Path) -> None:
    results = f"{topic.name}_results"
    mock_cluster.create_topic(results, 3)
    ids, req = sdk_batch(7)
    asyncio.run(publish(topic, req, "otlp_proto"))
    n_spans = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
    with running_service(tmp_path, **kafka_changes(topic, **{"kafka.results_topic": results})
                         ) as h:
        poll(lambda: consumed(h) == n_spans, "every span consumed")
        assert h.release() == 7
        poll(lambda: h.sample("otel_eval_kafka_records_published_total", topic="results")
                 == 7,
             "the results published")
        stored = {tid: h.svc.store.get(tid) for tid in ids}
        stamps = {tid: h.svc.store.stamp(tid) for tid in ids}
    got = asyncio.run(read_records(topic.bootstrap, results, 3))
    assert sorted(k.decode() for _, k, _, _ in got) == sorted(ids)  # exactly one per trace
    for _, key, value, headers in got:
        body = json.loads(value)
        assert body["trace_id"] == key.decode()
        assert body == stored[key.decode()]
        # its place among its key's records (docs/guide.md): as stored, no write since
        revision, at = stamps[key.decode()] or (-1, -1)
        assert headers == {"otel_eval.revision": str(revision).encode(),
                           "otel_eval.evaluated_at_ns": str(at).encode(),
                           "otel_eval.row_version": b"0"}
