"""docs/metrics.md's span invariant through a re-open: spans accepted (+ replayed + the spans
a re-opened trace takes back) = spans released + spans pending. A re-opened trace's earlier
spans are pending and released again; the invariant read 4 accepted = 7 released + 0 pending
before ``assembly_spans_reopened_total`` counted them."""

from __future__ import annotations

import http.client
from collections import Counter
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1 import trace_pb2
from prometheus_client import CollectorRegistry
from support.harness import Harness, running_service

from otel_eval.app.config import Config, replace
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.decode import otlp
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.receive.ingest import Decoded, Ingest
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

TID = bytes(range(1, 17))


def _post(h: Harness, spans: list[trace_pb2.Span]) -> None:
    req = ExportTraceServiceRequest()
    req.resource_spans.add().scope_spans.add().spans.extend(spans)
    assert h.svc.http is not None
    conn = http.client.HTTPConnection("127.0.0.1", h.svc.http.port, timeout=10)
    try:
        conn.request("POST", "/v1/traces", req.SerializeToString(),
                     {"Content-Type": "application/x-protobuf"})
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def _span(n: int, parent: int | None = None) -> trace_pb2.Span:
    span = trace_pb2.Span(trace_id=TID, span_id=bytes([n]) * 8, name=f"s{n}",
                          start_time_unix_nano=10**18 + n, end_time_unix_nano=10**18 + 100)
    if parent is not None:
        span.parent_span_id = bytes([parent]) * 8
    return span


def _sides(h: Harness) -> tuple[float, float]:
    accepted = (h.sample("otel_eval_receiver_spans_accepted_total", protocol="http")
                + h.sample("otel_eval_assembly_spans_reopened_total"))
    return accepted, (h.sample("otel_eval_assembly_spans_released_total")
                      + h.sample("otel_eval_assembly_pending_spans"))


def test_the_span_invariant_holds_through_a_re_open(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        _post(h, [_span(2, parent=1), _span(3, parent=1), _span(1)])
        assert _sides(h) == (3, 3)
        assert h.release() == 1
        _post(h, [_span(4, parent=1)])  # late: re-opens the released trace
        assert h.sample("otel_eval_assembly_traces_reopened_total") == 1
        assert _sides(h) == (7, 7)
        assert h.release() == 1
        assert _sides(h) == (7, 7)
        assert h.sample("otel_eval_assembly_pending_spans") == 0


def test_the_span_invariant_holds_through_a_kafka_hand_over(tmp_path: Path) -> None:
    """A revoked partition's runs in flight are forgotten unjudged (``Engine.hand_over``: the
    next owner replays their records). Their spans were accepted and then neither released
    nor pending: the invariant read 3 accepted = 0 released + 0 pending, with nothing to say
    where they went; they are counted as handed over."""
    clock = [1000.0]
    metrics = Metrics(CollectorRegistry())
    cfg = replace(Config(), **{"assembly.idle_timeout_s": 60.0})
    store = Store(str(tmp_path / "s.db"))
    try:
        engine = Engine(InProcess(Evaluator(cfg), store),
                        StoreHealth(store.location, clock=lambda: clock[0]), metrics,
                        assembly=cfg.assembly, clock=lambda: clock[0])
        spans = otlp.decode_request(_request([_span(2, parent=1), _span(3, parent=1)])).spans
        Ingest(engine, metrics).admit(Decoded("traces", spans, Counter()), metrics.kafka,
                                      source="kafka")
        reg = metrics.registry

        def sample(name: str, **labels: str) -> float:
            return reg.get_sample_value(name, labels) or 0.0

        assert sample("otel_eval_receiver_spans_accepted_total", protocol="kafka") == 2
        assert engine.hand_over({TID.hex()}) == 1
        assert sample("otel_eval_assembly_pending_spans") == 0
        assert sample("otel_eval_assembly_spans_handed_over_total") == 2
        assert sample("otel_eval_receiver_spans_accepted_total", protocol="kafka") == (
            sample("otel_eval_assembly_spans_released_total")
            + sample("otel_eval_assembly_pending_spans")
            + sample("otel_eval_assembly_spans_handed_over_total"))
    finally:
        store.close()


def _request(spans: list[trace_pb2.Span]) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    req.resource_spans.add().scope_spans.add().spans.extend(spans)
    return req
