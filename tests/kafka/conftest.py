"""Kafka test fixtures: librdkafka's mock cluster on loopback (one per session, a fresh
6-partition topic per test), a fresh 6-partition topic on the suite's real broker
(``broker_topic``), and an event loop thread for the async stages."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable, Iterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from kafka_doubles import Topic
from kafka_mock_cluster import MockCluster
from support.kafka_server import KafkaServer
from support.poll import poll_async

from otel_eval.base.aio import LoopThread
from otel_eval.base.kafka.client import client_kwargs
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.receive.kafka.assignment import topic_partitions

_topics = itertools.count()


@pytest.fixture(scope="session")
def mock_cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3) as mc:
        yield mc


@pytest.fixture
def topic(mock_cluster: MockCluster) -> Topic:
    """A fresh 6-partition topic on the shared mock cluster."""
    name = f"otlp_spans_{next(_topics)}"
    mock_cluster.create_topic(name, 6)
    return Topic(name, mock_cluster.bootstraps, 6)




@pytest.fixture
def loop() -> Iterator[LoopThread]:
    """An event loop on its own thread, as the service runs the Kafka stages."""
    thread = LoopThread()
    thread.start()
    yield thread
    thread.shutdown(5.0)


async def _admin(bootstrap: str, action: Callable[[AIOKafkaAdminClient], Awaitable[object]]
                 ) -> None:
    admin = AIOKafkaAdminClient(**client_kwargs(KafkaConfig(brokers=bootstrap)))
    await admin.start()
    try:
        await action(admin)
    finally:
        await admin.close()


async def _listed(cfg: KafkaConfig, partitions: int) -> bool:
    """Whether the broker's metadata of every topic lists ``cfg.topic`` with its partitions
    (as a static assignment reads it)."""
    return len(await topic_partitions(cfg)) == partitions


@pytest.fixture
def broker_topic(kafka_server: KafkaServer) -> Iterator[Topic]:
    """A fresh 6-partition topic on the suite's real broker (librdkafka's mock cluster cannot
    run a two-member aiokafka group), deleted after the test. Yielded once the broker's
    metadata lists it: CreateTopics answers when the controller has the topic, and the broker
    lists it only once it has applied that (a static assignment started right away found
    no topic)."""
    bootstrap = kafka_server.bootstrap
    name = f"otel_eval_group_{uuid.uuid4().hex[:10]}"
    asyncio.run(_admin(bootstrap, lambda a: a.create_topics([NewTopic(name, 6, 1)])))
    listed = KafkaConfig(brokers=bootstrap, topic=name)
    asyncio.run(poll_async(lambda: _listed(listed, 6), f"the broker to list topic {name}"))
    yield Topic(name, bootstrap, 6)
    asyncio.run(_admin(bootstrap, lambda a: a.delete_topics([name])))
