"""Kafka records come in through the receivers' door (``receive.ingest``): the consumer and
the publishing front end decode nothing themselves, so decoding, partial rejections,
accounting and throttling answers cannot drift apart from OTLP/gRPC and OTLP/HTTP."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import otel_eval.receive.kafka as kafka_pkg
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.pysource import parse  # one thread at a time
from otel_eval.decode import encode, otlp, otlp_json
from otel_eval.receive.ingest import Decoded, IngestAccounting, decode_traces
from otel_eval.receive.kafka.records import decode_value

DECODERS = {"otel_eval.decode.otlp", "otel_eval.decode.otlp_json", "otel_eval.decode.otlp_logs",
            "otel_eval.decode.encode", "otel_eval.decode"}


def _imports(path: Path) -> set[str]:
    """Modules imported at run time (not under ``if TYPE_CHECKING``)."""
    tree = parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            continue
        todo.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


@pytest.mark.parametrize("module", ["consumer.py", "records.py"])
def test_the_consumer_does_not_decode_requests_itself(module: str) -> None:
    imported = _imports(Path(kafka_pkg.__file__).parent / module)
    assert not imported & DECODERS, imported & DECODERS
    assert "otel_eval.receive.ingest" in imported


def test_a_record_decodes_as_a_request_body() -> None:
    spans = otlp.decode_request(otlp_json.request_from_dict({"resourceSpans": [{"scopeSpans": [{
        "spans": [{"traceId": "ab" * 16, "spanId": "01" * 8, "name": "a"},
                  {"traceId": "zz", "spanId": "02" * 8, "name": "b"}]}]}]})).spans
    body = encode.encode_spans(spans).SerializeToString()
    door = decode_traces(body)
    got = decode_value(body, "otlp_proto", logs=False)
    assert isinstance(got, Decoded) and isinstance(door, Decoded)
    assert [s.span_id for s in got.items] == [s.span_id for s in door.items] == ["01" * 8]
    assert got.rejected == door.rejected


def test_the_kafka_metrics_are_an_ingest_accounting() -> None:
    account: IngestAccounting = KafkaStats()  # mypy checks the protocol
    account.spans_ingested(2, {"invalid_trace_id": 1})
    assert isinstance(account, KafkaStats) and account.accepted == 2
