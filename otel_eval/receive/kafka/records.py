"""Stage: Kafka ingest, record decoding. A topic's record value decoded for the receivers'
door, or named as poison.

A record is decoded as a receiver decodes a request body (``receive.ingest``: ``decode_traces``
for ``topic``, ``decode_logs`` for ``logs_topic``, in the encoding the topic is configured
with): the same decoders and the same partial rejections, by reason, as OTLP/gRPC and
OTLP/HTTP. Nothing here decodes OTLP itself, so the Kafka path cannot drift from theirs.

Promise: a value that is no OTLP request at all is not raised but returned as its poison
reason, from a closed set: ``empty`` (a tombstone or an empty value), ``not_otlp`` (whatever
the decoders raised), and the reason of a record batch skipped whole (``batches``:
``batch_too_large``, ``batch_corrupt``). The consumer counts it, marks the record done and
skips it, so one hostile record never stalls its partition.

A record is decoded within the receivers' decoding budget (``receive.decoding.DecodeBudget``,
``receiver.max_decoding_bytes``: one budget for every door), charged as a request of its bytes
is before it is parsed (``Decoder.prepare``). Its charge is held until the engine took it
(the engine's pending budget counts it from then), also while it waits in the retry queue
after a refusal: decoded, it holds that memory (the partitions of the records waiting pause
once they hold half the budget, ``flow``). When the budget is held by others (requests
or records being decoded, records waiting), the record waits as its bytes, counted once as
throttled (``decoding``), its partition stalled and paused (the records read behind it wait
as their bytes too, no more than one fetched result: ``KafkaConfig.fetched_bytes`` counts
them), and is decoded on a later retry pass: Kafka is at-least-once here, so it is never
dropped (the committed position stays at it). One whose charge alone passes the budget (a
receiver answers 413 to such a request, never retried) could never be decoded: it is
poison, ``too_large``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import TopicPartition

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaMetrics
from otel_eval.base.loglimit import LogLimiter
from otel_eval.receive.decoding import DecodeBudget
from otel_eval.receive.ingest import Decoded, Ingest, decode_logs, decode_traces
from otel_eval.receive.kafka.batches import Unreadable
from otel_eval.receive.kafka.offsets import Ticket

log = logging.getLogger("otel_eval.receive.kafka.consumer")  # the consumer's, as before

# A poison record is logged at most once per this many seconds (each is counted).
POISON_LOG_INTERVAL_S = 10.0


def decode_value(value: bytes | None, encoding: str, *, logs: bool) -> Decoded | str:
    """A spans-topic (or, with ``logs``, a logs-topic) record value as the door's ``Decoded``,
    or its poison reason (``empty``, ``not_otlp``, a skipped batch's)."""
    if isinstance(value, Unreadable):  # the record standing for a batch skipped whole
        return value.reason
    if not value:  # a tombstone or an empty value: no request
        return "empty"
    try:
        return decode_logs(value, encoding) if logs else decode_traces(value, encoding)
    except Exception:  # MalformedRequest, ValueError, whatever a hostile record raises
        return "not_otlp"


@dataclass(slots=True, eq=False)
class Record:
    """A record taken from ``tp``, as the consumer holds it until the engine took it: its
    bytes until decoded (``value``), then ``decoded`` (None: nothing in it for the engine),
    and the decoding budget it holds (``charge``)."""

    tp: TopicPartition
    ticket: Ticket[TopicPartition]
    value: bytes | None
    decoded: Decoded | None = None
    charge: int = 0
    waited: bool = False  # counted as throttled (``decoding``) once


class Decoder:
    """Decodes the consumer's records within ``decoding`` (None: unbounded), on its loop."""

    def __init__(self, config: KafkaConfig, metrics: KafkaMetrics, ingest: Ingest,
                 decoding: DecodeBudget | None, clock: Callable[[], float]) -> None:
        self.config, self.metrics, self.ingest, self.decoding = config, metrics, ingest, decoding
        # a topic of records that are not OTLP: each counted, one logged per interval
        self._poison_log = LogLimiter(POISON_LOG_INTERVAL_S, clock)

    def _logs(self, tp: TopicPartition) -> bool:
        return bool(self.config.logs_topic) and tp.topic == self.config.logs_topic

    def prepare(self, rec: Record) -> frozenset[str] | str:
        """``rec`` decoded and charged: its trace ids (none when nothing in it is for the
        engine: ``rec.decoded`` None, the record done), or ``decoding``: the budget is held
        by others, ``rec`` waits as its bytes (module docstring)."""
        cfg, value, logs = self.config, rec.value, self._logs(rec.tp)
        encoding = cfg.logs_encoding if logs else cfg.encoding
        refused = ""
        if self.decoding is not None and value:
            refused, rec.charge = self.decoding.take(value, json=encoding == "otlp_json")
            if refused == "decoding":
                if not rec.waited:
                    rec.waited = True
                    self.metrics.throttled("decoding")
                return "decoding"
        decoded = refused or decode_value(value, encoding, logs=logs)  # or too_large
        rec.value = None
        rec.decoded = self._usable(rec, decoded, logs)
        if rec.decoded is None:
            self.give_back(rec)
            return frozenset()
        return rec.decoded.trace_ids

    def _usable(self, rec: Record, decoded: Decoded | str, logs: bool) -> Decoded | None:
        """None for poison (counted, one logged per interval) and for a logs record with no
        GenAI event (accounted)."""
        if isinstance(decoded, str):
            left_out = self._poison_log.allow()
            if left_out is not None:
                log.warning("kafka poison record %s[%d]@%d: %s%s", rec.tp.topic,
                            rec.tp.partition, rec.ticket.offset, decoded,
                            LogLimiter.since(left_out, "poison records"))
            self.metrics.record_poison(decoded)
            return None
        if logs and not decoded.items:
            self.ingest.admit(decoded, self.metrics, source="kafka")  # ignored, rejected
            return None
        if not logs:
            self.metrics.record_consumed(len(decoded.items))
        return decoded

    def give_back(self, rec: Record) -> None:
        """``rec``'s charge: the engine took it, or it is no longer this consumer's."""
        if rec.charge and self.decoding is not None:
            self.decoding.give_back(rec.charge)
        rec.charge = 0
