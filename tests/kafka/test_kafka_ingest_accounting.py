"""Spans from Kafka records are accounted as the receivers' are: every span accepted, or
rejected with a reason (invalid ids, invalid UTF-8 salvaged from the record, duplicates),
under ``otel_eval_receiver_spans_*{protocol="kafka"}``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafka_doubles import Topic, produce_raw
from support.harness import running_service
from support.poll import poll
from test_kafka_serve import kafka_changes

from otel_eval.base.model import Span
from otel_eval.decode import encode
from otel_eval.receive.ingest import Decoded
from otel_eval.receive.kafka.records import decode_value

TRACE = "ab" * 16


def _record() -> bytes:
    """7 spans: 3 good, a duplicate, 2 with a bad trace id, 1 with invalid UTF-8 in its name."""
    good = [Span(TRACE, f"{i + 1:016x}", None if i == 0 else f"{1:016x}", f"s{i}", 1, 2)
            for i in range(3)]
    req = encode.encode_spans([*good, good[1]])
    spans = req.resource_spans[0].scope_spans[0].spans
    for trace_id in (b"\x01\x02", b""):
        bad = spans.add()
        bad.CopyFrom(spans[0])
        bad.trace_id = trace_id
    utf8 = spans.add()
    utf8.CopyFrom(spans[0])
    utf8.span_id = bytes.fromhex("00000000000000ff")
    utf8.name = "MARKERX"
    return req.SerializeToString().replace(b"MARKERX", b"MARK\xffRX")


def test_decode_value_salvages_and_keeps_the_reasons() -> None:
    decoded = decode_value(_record(), "otlp_proto", logs=False)
    assert isinstance(decoded, Decoded)
    assert len(decoded.items) == 4  # the duplicate is the assembler's to refuse
    assert dict(decoded.rejected) == {"invalid_trace_id": 2, "invalid_utf8": 1}
    assert decode_value(b"\x0a\xff\xff\xff\xff", "otlp_proto", logs=False) == "not_otlp"
    assert decode_value(b"", "otlp_proto", logs=True) == "empty"


def test_kafka_spans_are_accounted_like_receiver_spans(topic: Topic, tmp_path: Path) -> None:
    asyncio.run(produce_raw(topic, _record(), key=TRACE.encode(), partition=0))
    with running_service(tmp_path, **kafka_changes(topic)) as h:
        def sample(name: str, **labels: str) -> float:
            return h.sample(f"otel_eval_receiver_spans_{name}_total", protocol="kafka",
                            **labels)

        poll(lambda: sample("received") == 7, "the record's 7 spans accounted")
        assert sample("accepted") == 3
        assert sample("rejected", reason="invalid_trace_id") == 2
        assert sample("rejected", reason="invalid_utf8") == 1
        assert sample("rejected", reason="duplicate_span") == 1
        assert h.release() == 1
        stored = h.svc.store.get(TRACE)
        assert stored is not None and stored["counts"]["spans"] == 3
