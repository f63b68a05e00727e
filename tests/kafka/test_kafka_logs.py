"""The logs topic: GenAI events (log records carrying prompts, completions, tool arguments)
consumed by ``serve`` with Kafka and joined to their trace's spans from the spans topic.
Real ``Service`` instances (hand-driven clock) against librdkafka's mock cluster.

The traces are real: the openai-v2-events conformance recordings, whose content travels only
in log records (the official openai-v2 instrumentation's default event mode).
- a consumer-mode service evaluates each trace with its log records, and commits a logs
  record only once the trace it joined is stored;
- records whose trace never gets a span are dropped as ``no_spans`` (counted) after the
  bounded wait, and then committed (done: they never stall their partition);
- a receiver-mode service (``kafka.publish``) publishes log records to the logs topic, keyed
  and partitioned like the spans.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kafka_doubles import Topic
from kafka_mock_cluster import MockCluster
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from support.harness import Harness, running_service
from support.poll import poll
from test_kafka_serve import kafka_changes, read_topic

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.model import LogEvent
from otel_eval.decode import otlp, otlp_json, otlp_logs
from otel_eval.decode.encode import dict_to_attributes
from otel_eval.receive.kafka.publisher import KafkaPublisher, sarama_partition

RECORDINGS = (Path(__file__).resolve().parents[1] / "conformance" / "recordings"
              / "openai-v2-events")
SCENARIOS = ("clean", "loop", "tool_error")


def recording(scenario: str) -> list[tuple[str, bytes]]:
    """(signal, protobuf bytes) of each recorded request, in recorded order."""
    rec = json.loads((RECORDINGS / f"{scenario}.json").read_text("utf-8"))
    out = []
    for item in rec["requests"]:
        raw = json.dumps(item["body"]).encode()
        req: Any = (otlp_json.request_from_json(raw) if item["signal"] == "traces"
                    else otlp_logs.logs_request_from_json(raw))
        out.append((item["signal"], req.SerializeToString()))
    return out


def trace_of(requests: list[tuple[str, bytes]]) -> str:
    (tid,) = {s.trace_id for sig, raw in requests if sig == "traces"
              for s in otlp.decode_request(otlp.parse_request(raw)[0]).spans}
    return tid


@pytest.fixture
def logs_topic(topic: Topic, mock_cluster: MockCluster) -> str:
    """A logs topic co-partitioned with ``topic``."""
    name = f"{topic.name}_logs"
    mock_cluster.create_topic(name, topic.partitions)
    return name


def changes(topic: Topic, logs_topic: str, **more: Any) -> dict[str, Any]:
    return kafka_changes(topic, **{"kafka.logs_topic": logs_topic, **more})


async def publish(topic: Topic, logs_topic: str, requests: list[tuple[str, bytes]],
                  records: tuple[LogEvent, ...] = ()) -> tuple[int, int]:
    """Write recorded requests as the collector's kafka exporter does (spans and logs
    partitioned by trace id); returns (span records, log records) written."""
    pub = KafkaPublisher(KafkaConfig(brokers=topic.bootstrap, topic=topic.name,
                                     logs_topic=logs_topic))
    await pub.start()
    n_spans = n_logs = 0
    try:
        for signal, raw in requests:
            if signal == "traces":
                n_spans += await pub.publish(raw)
            else:
                decoded = otlp_logs.decode_logs(otlp_logs.parse_logs_request(raw)[0])
                n_logs += await pub.publish_logs(decoded.records)
        n_logs += await pub.publish_logs(list(records))
    finally:
        await pub.stop()
    return n_spans, n_logs


def committed(h: Harness, kind: str, partitions: int) -> float:
    return sum(h.sample("otel_eval_kafka_committed_offset", topic=kind, partition=str(p))
               for p in range(partitions))


def accepted_logs(h: Harness) -> float:
    return h.sample("otel_eval_receiver_log_records_accepted_total", protocol="kafka")


def test_log_records_join_their_spans_and_commit_once_stored(
        topic: Topic, logs_topic: str, tmp_path: Path) -> None:
    requests = [r for s in SCENARIOS for r in recording(s)]
    n_records = sum(len(otlp_logs.decode_logs(otlp_logs.parse_logs_request(raw)[0]).records)
                    for sig, raw in requests if sig == "logs")
    orphan = LogEvent("f" * 32, "e" * 16, "gen_ai.choice", 5, {"gen_ai.system": "openai"},
                      {"index": 0, "message": {"role": "assistant", "content": "lost"}})
    span_recs, log_recs = asyncio.run(publish(topic, logs_topic, requests, (orphan,)))
    assert span_recs == len(SCENARIOS)  # one record per trace (and per request for logs)
    with running_service(tmp_path, **changes(topic, logs_topic)) as h:
        poll(lambda: accepted_logs(h) == n_records + 1, "every log record taken")
        poll(lambda: h.sample("otel_eval_kafka_spans_consumed_total") > 0, "the spans")
        # nothing stored yet: no logs record is committed (the spans' neither)
        assert committed(h, "logs", topic.partitions) == 0
        assert h.release() == len(SCENARIOS)
        for ev in h.svc.store.latest(10):
            assert ev["source"] == "kafka"
            assert "unrecorded" not in ev, ev["trace_id"]  # content came from the logs
        clean = h.svc.store.get(trace_of(recording("clean")))
        assert clean is not None and clean["output"] == "It is sunny in Paris."
        [tool] = [s for s in clean["steps"] if s["kind"] == "tool"]
        assert tool["arguments"] == {"city": "Paris"}
        poll(lambda: committed(h, "logs", topic.partitions) == log_recs - 1,
             "the stored traces' log records committed")
        # The orphan's trace never gets a span: dropped after idle_timeout_s, then done.
        assert h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1) == 0
        assert h.sample("otel_eval_assembly_log_records_dropped_total", reason="no_spans") == 1
        poll(lambda: committed(h, "logs", topic.partitions) == log_recs,
             "the dropped record committed")


def test_publish_front_end_writes_log_records_to_the_logs_topic(
        topic: Topic, logs_topic: str, tmp_path: Path) -> None:
    (tmp_path / "front").mkdir()
    (tmp_path / "worker").mkdir()
    with running_service(tmp_path / "front", **changes(topic, logs_topic,
                                                        **{"kafka.publish": True})) as front, \
            running_service(tmp_path / "worker", **changes(topic, logs_topic)) as worker:
        for signal, raw in recording("clean"):
            url = front.http_url.removesuffix("/v1/traces") + f"/v1/{signal}"
            req = urllib.request.Request(url, data=raw,
                                         headers={"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 200
        assert front.sample("otel_eval_kafka_records_published_total", topic="logs") == 1
        poll(lambda: accepted_logs(worker) == 8, "the worker to take the log records")
        poll(lambda: worker.sample("otel_eval_kafka_spans_consumed_total") > 0, "the spans")
        assert worker.release() == 1
        [ev] = worker.svc.store.latest(10)
        assert ev["output"] == "It is sunny in Paris." and "unrecorded" not in ev
    # keyed by trace id, on the partition of the trace's spans
    [(part, key, _value)] = asyncio.run(read_topic(topic.bootstrap, logs_topic,
                                                   topic.partitions))
    [(span_part, span_key, _)] = asyncio.run(read_topic(topic.bootstrap, topic.name,
                                                        topic.partitions))
    assert key == span_key and part == span_part == sarama_partition(key, topic.partitions)


def _app_logs_request(tid: str) -> bytes:
    """One OTLP logs request of service ``shop``: a GenAI event and an application log line
    of trace ``tid``, and a log line with no trace context."""
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add(schema_url="https://opentelemetry.io/schemas/1.30.0")
    rl.resource.attributes.extend(dict_to_attributes({"service.name": "shop"}))
    sl = rl.scope_logs.add(schema_url="https://opentelemetry.io/schemas/1.30.0")
    sl.scope.name, sl.scope.version = "opentelemetry.instrumentation.openai_v2", "2.1b0"
    tb, sb = bytes.fromhex(tid), bytes.fromhex("e" * 16)
    event = sl.log_records.add(time_unix_nano=5, event_name="gen_ai.user.message",
                               trace_id=tb, span_id=sb)
    event.body.kvlist_value.values.add(key="content").value.string_value = "weather?"
    sl.log_records.add(time_unix_nano=6, trace_id=tb, span_id=sb, severity_number=9,
                       severity_text="INFO").body.string_value = "calling the model"
    sl.log_records.add(time_unix_nano=7, severity_number=13).body.string_value = "disk low"
    return req.SerializeToString()


def test_publish_front_end_writes_log_records_whole_under_their_resource_and_scope(
        topic: Topic, logs_topic: str, tmp_path: Path) -> None:
    """``serve --kafka-publish`` stands where the collector's kafka exporter would: what it
    acknowledges goes to the logs topic as the exporter writes it (one request per trace id,
    ``partition_logs_by_trace_id``), each record under its ResourceLogs and ScopeLogs. It
    wrote the GenAI events alone, under an empty resource and scope (a reader of the topic
    lost ``service.name``), and acknowledged every other record, dropped (``ignored``)."""
    tid = "ab" * 16
    with running_service(tmp_path, **changes(topic, logs_topic,
                                             **{"kafka.publish": True})) as front:
        url = front.http_url.removesuffix("/v1/traces") + "/v1/logs"
        req = urllib.request.Request(url, data=_app_logs_request(tid),
                                     headers={"Content-Type": "application/x-protobuf"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        assert front.sample("otel_eval_receiver_log_records_accepted_total",
                            protocol="http") == 3
    records = asyncio.run(read_topic(topic.bootstrap, logs_topic, topic.partitions))
    by_key = {key: ExportLogsServiceRequest.FromString(value) for _p, key, value in records}
    assert set(by_key) == {tid.encode(), None}
    sent = ExportLogsServiceRequest.FromString(_app_logs_request(tid))
    [rl] = sent.resource_logs
    for key, want in ((tid.encode(), list(rl.scope_logs[0].log_records[:2])),
                      (None, [rl.scope_logs[0].log_records[2]])):
        [got] = by_key[key].resource_logs
        assert (got.resource, got.schema_url) == (rl.resource, rl.schema_url)
        [scope] = got.scope_logs
        assert (scope.scope, scope.schema_url) == (rl.scope_logs[0].scope,
                                                   rl.scope_logs[0].schema_url)
        assert list(scope.log_records) == want
    [(part, _k, _v)] = [r for r in records if r[1] is not None]
    assert part == sarama_partition(tid.encode(), topic.partitions)


def test_log_records_whose_spans_never_come_do_not_pause_the_spans_topic(
        topic: Topic, logs_topic: str, tmp_path: Path) -> None:
    """Issue 33, finding 13: orphan log records are in flight until the idle timeout. Counted
    with the spans' records they paused every partition, so a clean trace waited for them
    (18.1 s instead of 1.3 s; here, with the clock by hand, for ever). Now only the logs
    topic pauses."""
    orphans = tuple(LogEvent(f"{0xf00 + i:032x}", "e" * 16, "gen_ai.choice", 5,
                             {"gen_ai.system": "openai"},
                             {"index": 0, "message": {"role": "assistant", "content": "lost"}})
                    for i in range(8))
    asyncio.run(publish(topic, logs_topic, [], orphans))
    more = {"kafka.max_inflight_records": 3, "kafka.max_poll_records": 1}
    with running_service(tmp_path, **changes(topic, logs_topic, **more)) as h:
        poll(lambda: accepted_logs(h) >= 3, "the orphan records to fill the budget")
        spans = [r for r in recording("clean") if r[0] == "traces"]
        span_recs, _ = asyncio.run(publish(topic, logs_topic, spans))
        poll(lambda: h.sample("otel_eval_kafka_spans_consumed_total") > 0,
             "the spans, while the orphan log records wait", timeout_s=15)
        assert h.release() == 1
        assert h.svc.store.get(trace_of(spans)) is not None
        poll(lambda: committed(h, "spans", topic.partitions) == span_recs,
             "the stored trace's spans record committed")
        assert accepted_logs(h) < len(orphans)  # the logs topic itself is held back
