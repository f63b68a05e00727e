"""The consumer's fetch sizes come from ``kafka`` config (aiokafka's own buffers: one fetched
result per assigned partition, ``max_partition_fetch_bytes``, and a response per broker in
flight, ``fetch_max_bytes``), not aiokafka's defaults whatever is configured."""

from __future__ import annotations

import asyncio

from kafka_doubles import FakeEngine, Topic, WatchedStats

from otel_eval.receive.kafka.consumer import KafkaConsumerStage


def test_the_fetch_sizes_configured_are_the_consumers(topic: Topic) -> None:
    async def scenario() -> None:
        stage = KafkaConsumerStage(topic.config(max_partition_fetch_bytes=256 * 1024,
                                                fetch_max_bytes=4 * 1024 * 1024),
                                   FakeEngine(), WatchedStats())
        await stage.start()
        try:
            fetcher = stage._consumer._fetcher  # type: ignore[union-attr]
            assert fetcher._max_partition_fetch_bytes == 256 * 1024
            assert fetcher._fetch_max_bytes == 4 * 1024 * 1024
        finally:
            await stage.shutdown(5.0)

    asyncio.run(scenario())
