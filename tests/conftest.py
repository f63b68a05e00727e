"""The suite's fixtures: the shared datasets and the real external parts (tests/support/)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import otel_collector
from support.kafka_server import KafkaServer
from support.postgresql_server import PostgresServer

ROOT = Path(__file__).resolve().parents[1]


def _datasets() -> Path:
    """``$OTEL_EVAL_DATASETS``, else ``../shared/datasets`` beside the checkout, else the
    workplace's ``/work/shared/datasets`` (a checkout elsewhere, e.g. a CI clone)."""
    if env := os.environ.get("OTEL_EVAL_DATASETS"):
        return Path(env)
    beside = ROOT.parent / "shared" / "datasets"
    return beside if beside.is_dir() else Path("/work/shared/datasets")


DATASETS = _datasets()


@pytest.fixture(scope="session")
def datasets() -> Path:
    """The shared public datasets (read-only). Their absence is a broken checkout, not a skip."""
    assert DATASETS.is_dir(), f"expected the shared datasets at {DATASETS}"
    return DATASETS


@pytest.fixture(scope="session")
def postgresql_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session (tests/support/postgresql_server.py)."""
    with PostgresServer() as server:
        yield server


@pytest.fixture
def postgresql_url(postgresql_server: PostgresServer) -> str:
    """The URL of a fresh, empty database on the session's server."""
    return postgresql_server.create_database()


@pytest.fixture(scope="session")
def kafka_server() -> Iterator[KafkaServer]:
    """One real Kafka broker for the session (tests/support/kafka_server.py: KRaft, one node, the
    Maven Central jars that scripts/kafka-broker fetches and caches)."""
    with KafkaServer() as server:
        yield server


@pytest.fixture(scope="session")
def otelcol_bin() -> Path:
    """The OpenTelemetry Collector of collector-config/builder.yaml, built by scripts/collector
    (official builder; once per manifest, cached). No Go toolchain fails the tests, never
    skips them (tests/support/otel_collector.py)."""
    return otel_collector.build()
