"""Stage: Kafka ingest, record batches. A compressed batch fetched from the topic is
decompressed at most ``kafka.max_batch_bytes``, and a batch that does not decompress is
skipped, never raised.

aiokafka decompresses a whole batch (gzip, snappy, lz4, zstd) in one call without a bound,
so anyone who can write to the topic could send a small bomb (a 1 MB zstd batch inflates
past 20 GB) that the OTLP receivers' ``max_message_bytes`` never sees; and a batch whose
compressed data does not decompress (a valid CRC over garbage) raised out of ``getmany``,
the consumer loop died, and every restart died on the same batch. Here:

- the codecs aiokafka's record batches call (``gzip_decode``, ``snappy_decode``,
  ``lz4_decode``, ``zstd_decode``, looked up in their modules' globals) are replaced by
  bounded ones: past the bound ``BatchTooLarge`` (nothing larger is ever allocated);
- the fetcher's ``MemoryRecords`` hands out batches whose iteration turns a failure to
  decompress or to parse into one record at the batch's last offset whose value is
  ``Unreadable`` (its reason: ``batch_too_large`` or ``batch_corrupt``): the consumer counts
  it as poison with that reason and finishes it, so the partition moves past the batch.

The bound is read from ``MAX_BATCH_BYTES`` (a context variable: the consumer sets it on its
loop before its fetch and consume tasks start, so each stage's own setting applies).
"""

from __future__ import annotations

import io
import mmap
import struct
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from otel_eval.decode.compressed import GZIP_MAGIC, TooLarge, read_data, unzstd

BATCH_TOO_LARGE = "batch_too_large"
BATCH_CORRUPT = "batch_corrupt"

# Most bytes one record batch may decompress to (``KafkaConfig.max_batch_bytes``).
MAX_BATCH_BYTES: ContextVar[int] = ContextVar("kafka_max_batch_bytes", default=64 << 20)


class BatchTooLarge(ValueError):
    """A batch decompressing past ``MAX_BATCH_BYTES``."""


class Unreadable(bytes):
    """The value of the one record standing for a skipped batch (empty), with its reason."""

    reason: str

    def __new__(cls, reason: str) -> Unreadable:
        self = super().__new__(cls, b"")
        self.reason = reason
        return self


def _limit() -> int:
    return MAX_BATCH_BYTES.get()


def _too_large() -> BatchTooLarge:
    return BatchTooLarge(f"record batch decompresses past {_limit()} bytes")


def gzip_decode(data: Any) -> bytes:
    raw = bytes(data)
    if raw[:2] != GZIP_MAGIC:
        raise ValueError("gzip batch without the gzip magic")
    try:
        return read_data(raw, _limit())
    except TooLarge:
        raise _too_large() from None


def zstd_decode(data: Any) -> bytes:
    try:
        return unzstd(bytes(data), _limit())
    except TooLarge:
        raise _too_large() from None


def lz4_decode(data: Any) -> bytes:
    import cramjam

    # an anonymous mapping: its pages are memory only once written
    with mmap.mmap(-1, _limit() + 1) as out:
        try:
            n = cramjam.lz4.decompress_into(bytes(data), out)
        except cramjam.DecompressionError as e:
            if "whole buffer" in str(e):  # full: more was coming
                raise _too_large() from None
            raise
        if n > _limit():
            raise _too_large()
        return out[:n]


_XERIAL_HEADER = b"\x82SNAPPY\x00"


def snappy_decode(data: Any) -> bytes:
    """Raw snappy, or xerial's blocks (as aiokafka's ``snappy_decode``); each block's
    stated length is checked against the bound before it is decompressed."""
    import cramjam

    raw = bytes(data)
    blocks = [raw]
    if len(raw) > 16 and raw[:8] == _XERIAL_HEADER:
        blocks, pos = [], 16
        while pos < len(raw):
            (size,) = struct.unpack_from("!i", raw, pos)
            if size < 0:
                raise ValueError("xerial snappy block of negative size")
            blocks.append(raw[pos + 4:pos + 4 + size])
            pos += 4 + size
    out, left = io.BytesIO(), _limit()
    for block in blocks:
        n = cramjam.snappy.decompress_raw_len(block)
        if n > left:
            raise _too_large()
        left -= n
        out.write(cramjam.snappy.decompress_raw(block))
    return out.getvalue()


_CODECS: dict[str, Callable[[Any], bytes]] = {
    "gzip_decode": gzip_decode, "snappy_decode": snappy_decode,
    "lz4_decode": lz4_decode, "zstd_decode": zstd_decode}


@dataclass(frozen=True)
class _Placeholder:
    """What aiokafka's fetcher reads of a record, for a skipped batch."""

    offset: int
    value: Unreadable
    key: None = None
    timestamp: int = -1
    timestamp_type: int = 0
    checksum: None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)


class _Batch:
    """A fetched batch; its iteration never raises for the batch's content."""

    def __init__(self, batch: Any) -> None:
        self._batch = batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __next__(self) -> Any:  # a control batch's marker (aiokafka reads it so)
        return next(self._batch)

    def __iter__(self) -> Iterator[Any]:
        batch = self._batch
        try:
            yield from batch
        except BatchTooLarge:
            yield _Placeholder(batch.next_offset - 1, Unreadable(BATCH_TOO_LARGE))
        except Exception:  # corrupt compressed data or records, an unknown codec
            yield _Placeholder(batch.next_offset - 1, Unreadable(BATCH_CORRUPT))


class _Records:
    """aiokafka's ``MemoryRecords`` handing out ``_Batch``es."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def next_batch(self) -> _Batch | None:
        batch = self._inner.next_batch()
        return None if batch is None else _Batch(batch)


def install() -> None:
    """Bound aiokafka's record decompression and skip unreadable batches (idempotent).
    Fails loudly when the pinned aiokafka's internals moved."""
    import importlib

    from aiokafka.consumer import fetcher

    names = ["aiokafka.record.default_records", "aiokafka.record.legacy_records",
             "aiokafka.record._crecords.default_records",
             "aiokafka.record._crecords.legacy_records"]
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError:  # the C extension is absent (pure Python install)
            continue
        for codec, fn in _CODECS.items():
            if hasattr(module, codec):
                setattr(module, codec, fn)
    inner = fetcher.MemoryRecords
    if not getattr(inner, "_otel_eval_bounded", False):
        def records(data: Any) -> _Records:
            return _Records(inner(data))

        records._otel_eval_bounded = True  # type: ignore[attr-defined]
        fetcher.MemoryRecords = records
