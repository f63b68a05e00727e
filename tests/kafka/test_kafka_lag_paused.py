"""The lag gauge while the consumer is paused for backpressure: what the topic holds that this
worker has not finished, per partition, growing as the producer goes on writing."""

from __future__ import annotations

import asyncio

from kafka_doubles import FakeEngine, Topic, WatchedStats, produce_traces

from otel_eval.receive.kafka.consumer import KafkaConsumerStage


def test_lag_keeps_counting_what_is_written_while_the_consumer_is_paused(
        topic: Topic) -> None:
    async def scenario() -> None:
        await produce_traces(topic, 40, spans_per_trace=1, traces_per_request=40)
        engine, stats = FakeEngine(), WatchedStats()  # stores nothing: every record in flight
        stage = KafkaConsumerStage(topic.config(max_inflight_records=10, max_poll_records=5),
                                   engine, stats)
        await stage.start()
        try:
            await stats.until(lambda s: s.is_paused)
            # paused, so nothing is taken; the producer writes 30 more records
            await produce_traces(topic, 30, spans_per_trace=1, traces_per_request=30)
            # nothing is stored or committed: every record of the topic is lag, on every
            # partition (those never read from included)
            await stats.until(lambda s: sum(s.lags.values()) == 70)
            assert len(stats.lags) == topic.partitions
        finally:
            await stage.shutdown(5.0)

    asyncio.run(scenario())
