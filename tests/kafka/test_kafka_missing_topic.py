"""A topic the consumer is configured with that does not exist is not read, and not created:
subscribing by name (or describing it by name for a static assignment) asked the brokers for
its metadata by name, and a broker with ``auto.create.topics.enable`` (Kafka's default; the
mock cluster too) created it with its default partition count. With the default
``kafka.logs_topic`` a worker on a cluster without log records made an ``otlp_logs`` topic
of the wrong partition count, and warned at every assignment that it was not co-partitioned.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from kafka_doubles import FakeEngine, Topic, produce_traces

from otel_eval.receive.kafka.consumer import KafkaConsumerStage


async def topics(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


@pytest.mark.parametrize("assignment", ["group", "static"])
def test_a_logs_topic_that_does_not_exist_is_not_created(topic: Topic, assignment: str,
                                                         caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    logs = f"{topic.name}_logs_{assignment}"

    async def scenario() -> set[str]:
        await produce_traces(topic, 3, spans_per_trace=2)
        engine = FakeEngine()
        engine.auto_release = True
        stage = KafkaConsumerStage(topic.config(logs_topic=logs, assignment=assignment),
                                   engine)
        await stage.start()
        try:
            await engine.until(lambda e: len(e.spans) == 6)  # the spans topic is read
        finally:
            await stage.shutdown(5.0)
        assert stage.failure is None
        return await topics(topic.bootstrap)

    assert logs not in asyncio.run(scenario())
    assert "must be equal" not in caplog.text


def test_the_subscription_matches_exactly_the_configured_topics() -> None:
    import re

    from otel_eval.receive.kafka.assignment import subscription

    pattern = re.compile(subscription(["otlp.spans", "otlp_logs"]))
    assert [t for t in ("otlp.spans", "otlp_logs", "otlpXspans", "otlp_logs2", "a_otlp_logs")
            if pattern.match(t)] == ["otlp.spans", "otlp_logs"]
