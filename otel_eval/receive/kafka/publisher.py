"""Stage: Kafka publish (``serve --kafka-publish``). Receivers become stateless front ends that
write each OTLP request to the topic exactly as the collector's kafka exporter does.

    receiver request bytes -> split per trace id -> encode (otlp_proto | otlp_json)
        -> key = hex trace id -> partition = fnv1a(key) (Sarama-compatible) -> topic

The exporter with ``partition_traces_by_id: true`` splits a request into one request per trace
id (resource and scope kept), keys each record with the trace id as 32 lowercase hex
characters, and its Sarama-compatible hash partitioner picks ``|int32(fnv1a32(key))| % n``.
Doing the same means a trace whose spans arrive partly through a collector and partly through
otel-eval still lands on one partition. ``publish`` returns once the brokers acknowledged
(``acks``), so a receiver acknowledges its client only after Kafka has the data.

``publish_logs`` writes log records to ``logs_topic`` the same way (the exporter with
``partition_logs_by_trace_id: true``, ``batchpersignal.SplitLogs``): one record per trace id,
keyed by it, so with as many partitions as the spans topic a trace's log records land on its
spans' partition number; each log record under its ResourceLogs and ScopeLogs as received
(``HeldRecord.origin``), records without a trace id in a record without a key. The front end
hands it every record it acknowledged, GenAI event or not (``Ingest(every_log_record=True)``):
the topic is the user's telemetry, which other readers than otel-eval's workers may consume.

A trace's record over ``max_request_bytes`` (or the broker's own limit) can never be written:
it is dropped and counted (``publish_dropped(kind, "record_too_large")``), the request's other
records are written, and ``RecordsTooLarge`` names the traces left out, so the front end
rejects their items with that reason instead of asking the exporter to retry for ever.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_eval.base.kafka.client import client_kwargs
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import RECORD_TOO_LARGE, KafkaMetrics, KafkaStats
from otel_eval.base.model import LogEvent
from otel_eval.decode import otlp_json, otlp_logs
from otel_eval.decode.encode import header
from otel_eval.decode.otlp_logs import HeldRecord

_FNV_OFFSET, _FNV_PRIME = 0x811C9DC5, 0x01000193
class RecordsTooLarge(Exception):
    """The records of ``trace_ids`` were too large to write; the request's others were."""

    def __init__(self, trace_ids: set[str]) -> None:
        super().__init__(f"{len(trace_ids)} trace(s) too large for a Kafka record")
        self.trace_ids = trace_ids


def fnv1a32(data: bytes) -> int:
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def sarama_partition(key: bytes, n_partitions: int) -> int:
    """Sarama's default hash partitioner (and franz-go's SaramaCompatHasher)."""
    h = fnv1a32(key)
    signed = h - (1 << 32) if h & 0x80000000 else h
    # Go's % truncates toward zero; Sarama then takes the absolute value.
    part = abs(signed) % n_partitions
    return part


def fnv1a_partitioner(key: bytes | None, all_partitions: Sequence[int],
                      available: Sequence[int]) -> int:
    """aiokafka ``partitioner`` callable matching the collector's kafka exporter."""
    parts = sorted(all_partitions)
    if key is None:
        return random.choice(list(available) or parts)
    return parts[sarama_partition(key, len(parts))]


def split_by_trace(req: ExportTraceServiceRequest) -> list[tuple[str, ExportTraceServiceRequest]]:
    """One request per trace id, keeping resource and scope (``batchpersignal.SplitTraces``):
    each entry's every field as received (``encode.header``: a newer OTLP's too). Order
    follows the first appearance of each trace id. Spans with a malformed trace id stay
    together under the hex of their bytes (the engine rejects them with a reason)."""
    out: dict[str, ExportTraceServiceRequest] = {}
    scopes: dict[tuple[str, int, int], Any] = {}  # (trace, rs index, ss index) -> ScopeSpans
    for ri, rs in enumerate(req.resource_spans):
        rs_head = None
        for si, ss in enumerate(rs.scope_spans):
            ss_head = None
            for span in ss.spans:
                key = span.trace_id.hex()
                ss_out = scopes.get((key, ri, si))
                if ss_out is None:
                    sub = out.get(key)
                    if sub is None:
                        sub = out[key] = ExportTraceServiceRequest()
                    rs_out = scopes.get((key, ri, -1))
                    if rs_out is None:
                        if rs_head is None:  # one copy of the entry, for every trace
                            rs_head = header(rs, "scope_spans")
                        rs_out = scopes[(key, ri, -1)] = sub.resource_spans.add()
                        rs_out.CopyFrom(rs_head)
                    if ss_head is None:
                        ss_head = header(ss, "spans")
                    ss_out = scopes[(key, ri, si)] = rs_out.scope_spans.add()
                    ss_out.CopyFrom(ss_head)
                ss_out.spans.append(span)
    return list(out.items())


def encode(req: ExportTraceServiceRequest, encoding: str) -> bytes:
    if encoding == "otlp_json":
        return json.dumps(otlp_json.request_to_json(req), separators=(",", ":")).encode()
    return bytes(req.SerializeToString())


def encode_logs_by_trace(records: Sequence[LogEvent | HeldRecord],
                         encoding: str) -> list[tuple[str, bytes]]:
    """(trace id, one logs request) per trace id, in first-appearance order ("": records
    without one), each record under its resource and scope as received when it was held
    with them (``otlp_logs.encode_logs``)."""
    groups: dict[str, list[LogEvent | HeldRecord]] = {}
    for r in records:
        groups.setdefault(r.trace_id, []).append(r)
    out = []
    for tid, group in groups.items():
        req = otlp_logs.encode_logs(group)
        value = (json.dumps(otlp_json.request_to_json(req), separators=(",", ":")).encode()
                 if encoding == "otlp_json" else bytes(req.SerializeToString()))
        out.append((tid, value))
    return out


class KafkaPublisher:
    """``await start()``, ``await publish(request_bytes, trace_ids)``, ``await stop()``."""

    def __init__(self, config: KafkaConfig, metrics: KafkaMetrics | None = None) -> None:
        self.config = config
        self.metrics: KafkaMetrics = metrics if metrics is not None else KafkaStats()
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        cfg = self.config
        kw: dict[str, Any] = {}
        if cfg.partitioner == "fnv1a":
            kw["partitioner"] = fnv1a_partitioner
        producer = AIOKafkaProducer(
            **client_kwargs(cfg), acks="all" if cfg.acks == "all" else 1,
            compression_type=None if cfg.compression == "none" else cfg.compression,
            max_request_size=cfg.max_request_bytes, **kw)
        await producer.start()
        self._producer = producer

    async def shutdown(self, deadline_s: float) -> None:
        """Flush what is buffered and close (the producer's own flush bounds the wait)."""
        await self.stop()

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def publish(self, request_bytes: bytes, trace_ids: Sequence[str] | None = None
                      ) -> int:
        """Write one OTLP/protobuf request of received spans (``encode_spans``': its
        headers as received, less the pre-1.0 spans field); returns the number of records
        written.
        With exactly one trace id known, the bytes go out as received (no re-encoding)."""
        producer = self._producer
        if producer is None:
            raise RuntimeError("KafkaPublisher.publish before start()")
        cfg = self.config
        if trace_ids is not None and len(set(trace_ids)) == 1 and cfg.encoding == "otlp_proto":
            parts = [(trace_ids[0], request_bytes)]
        else:
            req = ExportTraceServiceRequest.FromString(request_bytes)
            parts = [(tid, encode(sub, cfg.encoding)) for tid, sub in split_by_trace(req)]
        return await self._send(producer, cfg.topic, "spans", parts)

    async def publish_logs(self, records: Sequence[LogEvent | HeldRecord]) -> int:
        """Write log records to ``logs_topic``, one record per trace id (module docstring);
        returns the number of records written (0 without a logs topic)."""
        producer = self._producer
        if producer is None:
            raise RuntimeError("KafkaPublisher.publish_logs before start()")
        cfg = self.config
        if not cfg.logs_topic or not records:
            return 0
        parts = encode_logs_by_trace(records, cfg.logs_encoding)
        return await self._send(producer, cfg.logs_topic, "logs", parts)

    async def _send(self, producer: AIOKafkaProducer, topic: str, kind: str,
                    parts: list[tuple[str, bytes]]) -> int:
        """Write each (trace id, value) keyed by the trace id; returns how many were written.
        Raises ``RecordsTooLarge`` after writing the others when some could not be."""
        too_large: set[str] = set()
        sent = []
        for tid, value in parts:
            try:
                # no trace id (a log line of no span): no key, as the exporter writes it
                key = tid.encode() if tid else None
                sent.append((tid, await producer.send(topic, value, key=key)))
            except MessageSizeTooLargeError:  # over max_request_bytes: never fits
                too_large.add(tid)
        results = await asyncio.gather(*(f for _, f in sent), return_exceptions=True)
        for (tid, _), res in zip(sent, results, strict=True):
            if isinstance(res, MessageSizeTooLargeError):  # over the broker's limit
                too_large.add(tid)
            elif isinstance(res, BaseException):
                raise res
        written = len(parts) - len(too_large)
        self.metrics.published(kind, written)
        if too_large:
            self.metrics.publish_dropped(kind, RECORD_TOO_LARGE, len(too_large))
            raise RecordsTooLarge(too_large)
        return written
