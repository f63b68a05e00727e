"""Kafka test fixtures: librdkafka's mock cluster on loopback (one per session, a fresh
6-partition topic per test), and an event loop thread for the async stages."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from kafka_doubles import Topic
from kafka_mock_cluster import MockCluster

from otel_eval.base.aio import LoopThread

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
