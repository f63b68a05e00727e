"""Sessions through Kafka with two consumers: the turns of tau-bench conversations, one
trace each, published keyed by trace id (as the collector's kafka exporter writes them), land
on different partitions and so on two consumer services (static assignment, on librdkafka's
mock cluster) sharing one PostgreSQL store; either service answers ``/v1/sessions/{id}`` with
every turn in order, complete once both consumers' session jobs checked (each once)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from kafka_doubles import Topic
from sessions.conversations import tau_turns
from support.harness import running_service
from support.kafka_server import KafkaServer

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.decode.otlp_json import request_from_json
from otel_eval.receive.kafka.publisher import KafkaPublisher


def _wait(cond: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # the consumers run on their services' loop threads


async def _publish(topic: Topic, bodies: list[dict[str, Any]]) -> None:
    pub = KafkaPublisher(KafkaConfig(brokers=topic.bootstrap, topic=topic.name,
                                     encoding="otlp_proto"))
    await pub.start()
    try:
        for body in bodies:
            await pub.publish(request_from_json(json.dumps(body)).SerializeToString())
    finally:
        await pub.stop()


def test_turns_on_two_consumers_make_whole_sessions(topic: Topic, tmp_path: Path,
                                                    datasets: Path,
                                                    postgresql_url: str) -> None:
    runs = json.loads((datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json")
                      .read_text())[:3]
    conversations = [(f"k-{i}", tau_turns(run, i, "gen_ai.conversation.id", f"k-{i}"))
                     for i, run in enumerate(runs)]
    bodies = [body for _, turns in conversations for _, body in turns]
    n_spans = sum(len(ss["spans"]) for b in bodies for rs in b["resourceSpans"]
                  for ss in rs["scopeSpans"])
    asyncio.run(_publish(topic, bodies))
    with ExitStack() as stack:
        consumers = [stack.enter_context(running_service(
            tmp_path / f"c{i}", **{
                "store.url": postgresql_url, "kafka.brokers": topic.bootstrap,
                "kafka.topic": topic.name, "kafka.logs_topic": "",
                "kafka.group_id": f"g-{topic.name}", "kafka.commit_interval_s": 0.05,
                "kafka.throttle_retry_s": 0.05, "kafka.assignment": "static",
                "kafka.worker_count": 2, "kafka.worker_index": i})) for i in range(2)]
        _wait(lambda: sum(h.sample("otel_eval_kafka_spans_consumed_total")
                          for h in consumers) == n_spans, "every span consumed")
        stored = [h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1)
                  for h in consumers]
        assert sum(stored) == len(bodies) and min(stored) > 0  # both consumers evaluated
        # both consumers' session jobs check at once, long after: each session completes once
        later = time.time() + consumers[0].svc.config.sessions.idle_timeout_s + 1
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda h: h.svc.session_job.tick(later), consumers))
        assert sum(done) == len(conversations)
        for h in consumers:
            for session_id, turns in conversations:
                record = h.svc.sessions.get(session_id)
                assert record is not None
                assert record["traces"] == [trace_id for trace_id, _ in turns]
                assert record["turns"] == len(turns)
                assert (record["status"], record["completion"]) == ("complete", 0)


@pytest.fixture
def group_topic(kafka_server: KafkaServer) -> Iterator[Topic]:
    """A 6-partition topic of its own on the suite's real broker (a group of two needs one:
    librdkafka's mock cluster cannot run a two-member aiokafka group, test_kafka_group)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from otel_eval.base.kafka.client import client_kwargs

    name = f"otel_eval_sessions_{uuid.uuid4().hex[:10]}"

    async def admin(create: bool) -> None:
        client = AIOKafkaAdminClient(**client_kwargs(KafkaConfig(brokers=kafka_server.bootstrap)))
        await client.start()
        try:
            if create:
                await client.create_topics([NewTopic(name, 6, 1)])
            else:
                await client.delete_topics([name])
        finally:
            await client.close()

    asyncio.run(admin(True))
    yield Topic(name, kafka_server.bootstrap, 6)
    asyncio.run(admin(False))


@pytest.mark.kafka_broker
def test_turns_through_a_consumer_group_of_two_on_a_real_broker_complete_once(
        group_topic: Topic, tmp_path: Path, datasets: Path, postgresql_url: str) -> None:
    """The same conversations through a real broker and a consumer group of two services
    (partitions assigned and rebalanced by the group), one PostgreSQL store: every turn
    stored, each session complete once, whichever member stored its turns."""
    runs = json.loads((datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json")
                      .read_text())[3:6]
    conversations = [(f"g-{i}", tau_turns(run, 10 + i, "gen_ai.conversation.id", f"g-{i}"))
                      for i, run in enumerate(runs)]
    asyncio.run(_publish(group_topic, [body for _, turns in conversations
                                        for _, body in turns]))
    with ExitStack() as stack:
        members = [stack.enter_context(running_service(
            tmp_path / f"m{i}", **{
                "store.url": postgresql_url, "kafka.brokers": group_topic.bootstrap,
                "kafka.topic": group_topic.name, "kafka.logs_topic": "",
                "kafka.group_id": f"g-{group_topic.name}", "kafka.commit_interval_s": 0.05,
                "kafka.throttle_retry_s": 0.05})) for i in range(2)]

        def stored() -> bool:
            for h in members:  # the members' assemblies release what they hold
                h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1)
            return all((members[0].svc.sessions.get(s) or {}).get("traces")
                       == [t for t, _ in turns] for s, turns in conversations)

        _wait(stored, "every turn stored", timeout_s=120)
        later = time.time() + members[0].svc.config.sessions.idle_timeout_s + 1
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda h: h.svc.session_job.tick(later), members))
        assert sum(done) == len(conversations)
        for h in members:
            for session_id, turns in conversations:
                record = h.svc.sessions.get(session_id)
                assert record is not None
                assert (record["status"], record["completion"]) == ("complete", 0)
                assert record["traces"] == [trace_id for trace_id, _ in turns]
