"""Kafka test fixtures: librdkafka's mock cluster on loopback (one per session, a fresh
6-partition topic per test)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from kafka_doubles import Topic
from kafka_mock_cluster import MockCluster

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


