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


# The external parts a test may need, each a marker (declared in pyproject.toml). A test that
# uses one of these fixtures carries its part's marker without saying so; a test that starts a
# program itself (prometheus, promtool, chromium) says so with an explicit mark. Every test with
# a part also carries ``external``: ``pytest -m "not external"`` is the fast lane (the Python
# lock only); CI runs everything.
PART_OF_FIXTURE = {
    "postgresql_server": "postgres", "postgresql_url": "postgres",
    "kafka_server": "kafka_broker",
    "otelcol_bin": "collector",  # built with Go by scripts/collector
    "helm": "helm",  # fetched with npm
    "browser": "browser",  # headless Chromium
}
PARTS = ("collector", "kafka_broker", "postgres", "prometheus", "browser", "alertmanager", "helm")


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the markers must be there by then
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            if part := PART_OF_FIXTURE.get(fixture):
                item.add_marker(part)
        if any(item.get_closest_marker(part) for part in PARTS):
            item.add_marker("external")


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
