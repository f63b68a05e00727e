"""Synthetic agent traces for the Kafka tests and bench: each trace is ``spans_per_trace``
spans (children first, root last, the root carrying ``test.span_count``), spread over several
OTLP requests so that one trace spans several Kafka records."""

from __future__ import annotations

import os

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2

SPAN_COUNT_ATTR = "test.span_count"


def trace_ids(n: int, seed: int = 0) -> list[str]:
    rnd = os.urandom if seed == 0 else None
    out = []
    for i in range(n):
        raw = rnd(16) if rnd else (seed * 1_000_003 + i + 1).to_bytes(16, "big")
        out.append(raw.hex())
    return out


def span_pb(trace_id: str, index: int, spans_per_trace: int) -> trace_pb2.Span:
    """Span ``index`` of a trace; the last one is the root."""
    root = index == spans_per_trace - 1
    span = trace_pb2.Span(
        trace_id=bytes.fromhex(trace_id), span_id=(index + 1).to_bytes(8, "big"),
        parent_span_id=b"" if root else spans_per_trace.to_bytes(8, "big"),
        name="invoke_agent" if root else f"execute_tool t{index}",
        start_time_unix_nano=1_700_000_000_000_000_000 + index,
        end_time_unix_nano=1_700_000_000_000_000_000 + 1000 + index)
    if root:
        span.attributes.append(KeyValue(key=SPAN_COUNT_ATTR,
                                        value=AnyValue(int_value=spans_per_trace)))
    return span


def requests_for(ids: list[str], spans_per_trace: int, traces_per_request: int
                 ) -> list[ExportTraceServiceRequest]:
    """For each group of traces: span 0 of all of them in one request, then span 1, ...,
    root last (as an SDK batch exporter would interleave concurrent runs)."""
    out = []
    for g in range(0, len(ids), traces_per_request):
        group = ids[g:g + traces_per_request]
        for index in range(spans_per_trace):
            req = ExportTraceServiceRequest()
            rs = req.resource_spans.add()
            rs.resource.attributes.append(
                KeyValue(key="service.name", value=AnyValue(string_value="agent")))
            ss = rs.scope_spans.add()
            ss.scope.name = "test"
            ss.spans.extend(span_pb(t, index, spans_per_trace) for t in group)
            out.append(req)
    return out
