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
"""

from __future__ import annotations

from otel_eval.receive.ingest import Decoded, decode_logs, decode_traces
from otel_eval.receive.kafka.batches import Unreadable


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
