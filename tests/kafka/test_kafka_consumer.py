"""KafkaConsumerStage against librdkafka's mock cluster (real Kafka protocol on loopback)."""

from __future__ import annotations

import asyncio
import base64
import logging
import zlib

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from kafka_doubles import FakeEngine, Topic, WatchedStats, produce_raw, produce_traces
from support.clock import ManualClock

from otel_eval.receive.kafka.consumer import POISON_LOG_INTERVAL_S, KafkaConsumerStage
from otel_eval.receive.kafka.publisher import sarama_partition


async def committed(topic: Topic, group: str) -> dict[int, int | None]:
    c = AIOKafkaConsumer(bootstrap_servers=topic.bootstrap, group_id=group,
                         enable_auto_commit=False)
    await c.start()
    try:
        return {p: await c.committed(TopicPartition(topic.name, p))
                for p in range(topic.partitions)}
    finally:
        await c.stop()


def test_group_member_consumes_and_commits_only_stored_records(topic: Topic) -> None:
    async def scenario() -> None:
        ids = await produce_traces(topic, 30, spans_per_trace=3, traces_per_request=10)
        engine, stats = FakeEngine(), WatchedStats()
        stage = KafkaConsumerStage(topic.config(), engine, stats)
        await stage.start()
        try:
            await engine.until(lambda e: len(e.spans) == 90)
            assert {s.trace_id for s in engine.spans} == set(ids)
            # Nothing stored yet: every partition's commit stays at (or before) offset 0.
            # (30 random trace ids leave a partition empty in ~2.5 % of runs: only those used.)
            parts = {sarama_partition(t.encode(), topic.partitions) for t in ids}
            await stats.until(lambda s: set(s.lags) >= parts)
            assert all(v == 0 for v in stats.commits.values())
            # Store all traces but one: its partition's watermark stops at its first record.
            held = ids[0]
            held_part = sarama_partition(held.encode(), topic.partitions)
            engine.release(lambda tids: held not in tids)
            await stats.until(lambda s: all(s.lags.get(p) == 0 for p in parts
                                            if p != held_part))
            assert stats.lags[held_part] >= 3, stats.lags
            engine.release()
            await stats.until(lambda s: sum(s.commits.values()) == 90, timeout=10)
            assert all(v == 0 for v in stats.lags.values())
        finally:
            await stage.shutdown(5.0)
        assert stage.failure is None
        assert sum(v or 0 for v in (await committed(topic, f"g-{topic.name}")).values()) == 90

    asyncio.run(scenario())


def test_poison_record_is_counted_and_skipped_without_stalling(topic: Topic) -> None:
    async def scenario() -> None:
        await produce_raw(topic, b"\x00not an otlp request\xff", key=b"k", partition=2)
        await produce_raw(topic, b"", key=b"k", partition=2)
        ids = await produce_traces(topic, 12, spans_per_trace=2, traces_per_request=12)
        engine, stats = FakeEngine(), WatchedStats()
        engine.auto_release = True
        stage = KafkaConsumerStage(topic.config(), engine, stats)
        await stage.start()
        try:
            await engine.until(lambda e: len(e.spans) == 24)
            await stats.until(lambda s: s.commits.get(2, 0) >= 2 and sum(s.commits.values())
                              == 24 + 2)
        finally:
            await stage.shutdown(5.0)
        assert {s.trace_id for s in engine.spans} == set(ids)
        assert stats.poison == {"not_otlp": 1, "empty": 1}

    asyncio.run(scenario())


def test_a_flood_of_poison_records_is_one_log_line_then_a_count_of_the_rest(
        topic: Topic, caplog: pytest.LogCaptureFixture) -> None:
    """A topic of records that are not OTLP (a producer with the wrong encoding) logged a
    warning per record: thousands of lines a second on stderr. Every one is counted; the log
    says one, then, after ``POISON_LOG_INTERVAL_S``, how many it left out meanwhile."""
    async def scenario() -> None:
        for _ in range(20):
            await produce_raw(topic, b"\x00not an otlp request\xff", key=b"k", partition=1)
        engine, stats, clock = FakeEngine(), WatchedStats(), ManualClock()
        stage = KafkaConsumerStage(topic.config(), engine, stats, clock=clock)
        await stage.start()
        try:
            await stats.until(lambda s: s.poison.get("not_otlp") == 20)
            clock.advance(POISON_LOG_INTERVAL_S)
            await produce_raw(topic, b"\x00not an otlp request\xff", key=b"k", partition=1)
            await stats.until(lambda s: s.poison.get("not_otlp") == 21)
        finally:
            await stage.shutdown(5.0)

    with caplog.at_level(logging.WARNING, logger="otel_eval.receive.kafka.consumer"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if "poison record" in r.getMessage()]
    assert len(lines) == 2, lines
    assert lines[0].endswith(": not_otlp"), lines
    assert lines[1].endswith(": not_otlp (19 more poison records not logged since the last)")


def test_throttled_engine_pauses_then_retries_in_order(topic: Topic) -> None:
    async def scenario() -> None:
        await produce_traces(topic, 6, spans_per_trace=2, traces_per_request=6)
        engine, stats = FakeEngine(), WatchedStats()
        engine.throttle = "pending_spans"
        engine.auto_release = True
        stage = KafkaConsumerStage(topic.config(), engine, stats)
        await stage.start()
        try:
            await stats.until(lambda s: s.throttles["pending_spans"] >= 2 and s.is_paused)
            assert engine.spans == []
            engine.throttle = None
            await engine.until(lambda e: len(e.spans) == 12)
            await stats.until(lambda s: sum(s.commits.values()) == 12 and not s.is_paused)
        finally:
            await stage.shutdown(5.0)
        for tid in {s.trace_id for s in engine.spans}:  # children before root, as produced
            names = [s.is_entry for s in engine.spans if s.trace_id == tid]
            assert names == [False, True]

    asyncio.run(scenario())


def test_a_record_refused_on_every_retry_is_counted_once(topic: Topic) -> None:
    # kafka_throttled_total: "Records the engine refused"; each retry pass (every
    # throttle_retry_s) counted the waiting record again, so it grew with the wait
    async def scenario() -> None:
        await produce_traces(topic, 1, spans_per_trace=2)
        engine, stats = FakeEngine(), WatchedStats()
        engine.throttle = "service_share"
        engine.auto_release = True
        stage = KafkaConsumerStage(topic.config(), engine, stats)
        await stage.start()
        try:
            await engine.until(lambda e: e.refusals >= 4)
            assert stats.throttles == {"service_share": 1}
            engine.throttle = None
            await engine.until(lambda e: len(e.spans) == 2)
            await stats.until(lambda s: sum(s.commits.values()) == 2)
        finally:
            await stage.shutdown(5.0)
        assert stats.throttles == {"service_share": 1}

    asyncio.run(scenario())


def test_backpressure_pauses_at_max_inflight(topic: Topic) -> None:
    async def scenario() -> None:
        await produce_traces(topic, 40, spans_per_trace=2, traces_per_request=40)
        engine, stats = FakeEngine(), WatchedStats()
        stage = KafkaConsumerStage(topic.config(max_inflight_records=10, max_poll_records=5),
                                   engine, stats)
        await stage.start()
        try:
            await stats.until(lambda s: s.is_paused)
            taken = engine.calls
            assert 10 <= taken < 80
            engine.release()
            await stats.until(lambda s: not s.is_paused)
            engine.auto_release = True
            engine.release()
            await engine.until(lambda e: e.calls == 80)
            engine.release()
            await stats.until(lambda s: sum(s.commits.values()) == 80)
        finally:
            await stage.shutdown(5.0)
        assert stats.pauses >= 1

    asyncio.run(scenario())


def test_static_assignment_splits_partitions_between_workers(topic: Topic) -> None:
    async def scenario() -> None:
        ids = await produce_traces(topic, 60, spans_per_trace=1, traces_per_request=20)
        engines, stages, changed = [], [], asyncio.Condition()
        for i in range(2):
            e = FakeEngine(changed)
            e.auto_release = True
            cfg = topic.config(assignment="static", worker_index=i, worker_count=2)
            stages.append(KafkaConsumerStage(cfg, e, WatchedStats()))
            engines.append(e)
        for s in stages:
            await s.start()
        try:
            await engines[0].until(lambda _: sum(len(e.spans) for e in engines) == 60)
        finally:
            for s in stages:
                await s.shutdown(5.0)
        got = [{s.trace_id for s in e.spans} for e in engines]
        assert got[0] | got[1] == set(ids) and not got[0] & got[1]
        parts = [{tp.partition for tp in s.tracker.partitions()} for s in stages]
        assert parts == [{0, 2, 4}, {1, 3, 5}]  # partition p goes to worker p % 2
        assert sum(stages[0].metrics.commits.values()) + sum(  # type: ignore[attr-defined]
            stages[1].metrics.commits.values()) == 60  # type: ignore[attr-defined]

    asyncio.run(scenario())


def test_committed_metadata_past_the_bounds_is_ignored_counted_and_replayed(
        topic: Topic) -> None:
    """Metadata anyone in the group could commit (4000 characters of zlib: ~24M offsets
    inflated and kept in a set at the assignment) is read as absent, counted: every record
    from the committed position is taken again, none skipped, and the stage does not fail."""
    hostile = "oe1:24000000:" + base64.b64encode(zlib.compress(b"\xff" * 3_000_000, 9)).decode()

    async def scenario() -> None:
        await produce_raw(topic, b"", key=b"k", partition=1)  # poison: counted when taken
        c = AIOKafkaConsumer(bootstrap_servers=topic.bootstrap, group_id=f"g-{topic.name}",
                             enable_auto_commit=False)
        await c.start()
        try:
            c.assign([TopicPartition(topic.name, 1)])
            await c.commit({TopicPartition(topic.name, 1): OffsetAndMetadata(0, hostile)})
        finally:
            await c.stop()
        stats = WatchedStats()
        stage = KafkaConsumerStage(topic.config(assignment="static"), FakeEngine(), stats)
        await stage.start()
        try:
            await stats.until(lambda s: s.poison["empty"] == 1)  # offset 0 not skipped
        finally:
            await stage.shutdown(5.0)
        assert stage.failure is None
        assert stats.metadata_ignores == {"too_large": 1}

    asyncio.run(scenario())
