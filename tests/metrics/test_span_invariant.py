"""docs/metrics.md's span invariant through a re-open: spans accepted (+ replayed + the spans
a re-opened trace takes back) = spans released + spans pending. A re-opened trace's earlier
spans are pending and released again; the invariant read 4 accepted = 7 released + 0 pending
before ``assembly_spans_reopened_total`` counted them."""

from __future__ import annotations

import http.client
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1 import trace_pb2
from support.harness import Harness, running_service

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
