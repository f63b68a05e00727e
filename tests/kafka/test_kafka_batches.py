"""Compressed record batches: decompressed within ``kafka.max_batch_bytes`` (a decompression
bomb is skipped, counted), and a batch that does not decompress skipped, never raised (it
killed the consumer loop, and every restart died on the same batch)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.consumer import fetcher
from aiokafka.record import _crecords
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import TopicPartition
from kafka_doubles import FakeEngine, Topic, WatchedStats, produce_traces

from otel_eval.receive.kafka import batches
from otel_eval.receive.kafka.consumer import KafkaConsumerStage

BOMB = b"\0" * (4 << 20)  # 4 MiB of zeros: a few hundred bytes compressed


def _batch(codec: int, values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 30)
    for i, v in enumerate(values):
        b.append(i, timestamp=None, key=None, value=v, headers=[])
    return bytes(b.build())


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_fetched_bomb_is_one_unreadable_record_not_inflated(codec: int) -> None:
    batches.install()
    token = batches.MAX_BATCH_BYTES.set(1 << 20)
    try:
        raw = _batch(codec, [BOMB, BOMB, b"x"])
        records = fetcher.PartitionRecords(TopicPartition("t", 0), fetcher.MemoryRecords(raw),
                                           None, 0, None, None, True, 0)
        got = list(records)
        small = fetcher.PartitionRecords(
            TopicPartition("t", 0), fetcher.MemoryRecords(_batch(codec, [b"a", b"b"])),
            None, 0, None, None, True, 0)
        assert [r.value for r in small] == [b"a", b"b"]  # within the bound: read as ever
    finally:
        batches.MAX_BATCH_BYTES.reset(token)
    assert [(r.offset, r.value) for r in got] == [(2, b"")]
    assert isinstance(got[0].value, batches.Unreadable)
    assert got[0].value.reason == "batch_too_large"
    assert records.next_fetch_offset == 3


def test_xerial_snappy_block_of_negative_size_is_corrupt_not_endless() -> None:
    header = b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2
    with pytest.raises(ValueError, match="negative"):
        batches.snappy_decode(header + b"\xff\xff\xff\xfc" + b"abcd")


async def _produce(topic: Topic, value: bytes, compression: str, **kw: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=topic.bootstrap,
                                compression_type=compression, **kw)
    await producer.start()
    try:
        await producer.send_and_wait(topic.name, value, key=b"k", partition=2)
    finally:
        await producer.stop()


def _consume_after(topic: Topic, reason: str, **config: int) -> None:
    """Traces written after the batch are all consumed, the batch counted once as poison
    under ``reason``, the loop alive, and partition 2 committed past the batch."""
    async def scenario() -> None:
        ids = await produce_traces(topic, 12, spans_per_trace=2, traces_per_request=12)
        engine, stats = FakeEngine(), WatchedStats()
        engine.auto_release = True
        stage = KafkaConsumerStage(topic.config(**config), engine, stats)
        await stage.start()
        try:
            await stats.until(lambda s: sum(s.poison.values()) == 1
                              and sum(s.commits.values()) == 24 + 1)
        finally:
            await stage.shutdown(5.0)
        assert stage.failure is None
        assert {s.trace_id for s in engine.spans} == set(ids)
        assert stats.poison == {reason: 1}

    asyncio.run(scenario())


def test_decompression_bomb_on_the_topic_is_skipped_and_counted(topic: Topic) -> None:
    asyncio.run(_produce(topic, BOMB, "zstd", max_request_size=8 << 20))
    _consume_after(topic, "batch_too_large", max_batch_bytes=1 << 20)


def test_batch_that_does_not_decompress_is_skipped_not_raised(
        topic: Topic, monkeypatch: pytest.MonkeyPatch) -> None:
    # a producer whose gzip writes garbage: the batch's CRC is valid, its content is not
    monkeypatch.setattr(_crecords.default_records, "gzip_encode",
                        lambda data, compresslevel=None: b"\x1f\x8bnot gzip at all")
    asyncio.run(_produce(topic, b"whatever", "gzip"))
    monkeypatch.undo()
    _consume_after(topic, "batch_corrupt")
