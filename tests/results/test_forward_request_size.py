"""Forwarder against a downstream with the gRPC default receive limit (4 MiB): every span
arrives, no request over ``max_batch_bytes``, each span under its resource and scope as received.

The downstream is the suite's capture server started with ``max_recv_msg_size_mib=4``, what
an OTLP receiver with no ``max_recv_msg_size_mib`` accepts (collector-config/passthrough.yaml's
``otlp/stamped``). Before the byte bound, the two 2.5 MB traces were merged into one 5 MB
request and the 6 MB trace sent whole: RESOURCE_EXHAUSTED, every span dropped as ``rejected``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2
from support.otlp_capture import Capture, headed_spans

from otel_eval.base.model import Trace
from otel_eval.decode import otlp
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.forward import Forwarder
from otel_eval.telemetry.metrics import Metrics

GRPC_DEFAULT_MIB = 4
PAYLOAD = 100_000  # bytes of one span's gen_ai.input.messages
BIG_SPAN = 3_800_000  # over the default max_batch_bytes (3.5 MiB), under 4 MiB


@pytest.fixture
def default_limit() -> Iterator[Capture]:
    with Capture(max_recv_msg_size_mib=GRPC_DEFAULT_MIB) as ds:
        yield ds


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _request(trace_id: bytes, groups: list[tuple[str, str, int]],
             payload: int = PAYLOAD) -> ExportTraceServiceRequest:
    """One request of ``trace_id``: per (service, scope, n) a scope of ``n`` spans carrying
    ``payload`` bytes each, under that service's resource (schema URLs and versions set, so a
    field lost on the way shows)."""
    req = ExportTraceServiceRequest()
    by_service: dict[str, trace_pb2.ResourceSpans] = {}
    sid = 0
    for service, scope, n in groups:
        rs = by_service.get(service)
        if rs is None:
            rs = by_service[service] = req.resource_spans.add(
                resource=Resource(attributes=[_kv("service.name", service)]),
                schema_url="https://opentelemetry.io/schemas/1.26.0")
        ss = rs.scope_spans.add(scope=InstrumentationScope(name=scope, version="1.2.3"),
                                schema_url="https://opentelemetry.io/schemas/1.27.0")
        for _ in range(n):
            sid += 1
            ss.spans.add(trace_id=trace_id, span_id=sid.to_bytes(8, "big"), name="chat",
                         kind=trace_pb2.Span.SPAN_KIND_CLIENT, start_time_unix_nano=10 + sid,
                         end_time_unix_nano=20 + sid, trace_state="vendor=1", flags=0x301,
                         attributes=[_kv("gen_ai.input.messages", "x" * payload)])
    return req


def _received_as_trace(req: ExportTraceServiceRequest) -> Trace:
    """``req`` through the receiving path (parse, decode), as the assembler hands it on."""
    parsed, rejected = otlp.parse_request(req.SerializeToString())
    decoded = otlp.decode_request(parsed)
    assert not rejected and not decoded.reasons
    return Trace(req.resource_spans[0].scope_spans[0].spans[0].trace_id.hex(), decoded.spans,
                 "complete")


def _per_span(requests: list[ExportTraceServiceRequest]) -> dict[bytes, tuple[object, ...]]:
    """trace id + span id -> (resource spans without scopes, scope spans without spans, span)."""
    out: dict[bytes, tuple[object, ...]] = {}
    for rh, sh, s in headed_spans(requests):
        assert s.trace_id + s.span_id not in out, "a span forwarded twice"
        out[s.trace_id + s.span_id] = (rh, sh, s)
    return out


def test_large_traces_reach_a_downstream_with_the_grpc_default_limit(
        default_limit: Capture) -> None:
    cfg = ExportConfig(forward_endpoint=default_limit.grpc_target)
    sent = [
        _request(bytes(range(1, 17)), [("a", "agent", 25)]),   # ~2.5 MB
        _request(bytes(range(2, 18)), [("b", "agent", 25)]),   # ~2.5 MB: merged, 5 MB
        _request(bytes(range(3, 19)), [("c", "agent", 15), ("c", "llm", 15),
                                       ("d", "agent", 15), ("d", "tools", 15)]),  # ~6 MB
        # one span larger than the bound, smaller than 4 MiB: it can only go alone
        _request(bytes(range(4, 20)), [("e", "agent", 1), ("e", "llm", 1)],
                 payload=BIG_SPAN),
    ]
    assert [round(r.ByteSize() / 1e6, 1) for r in sent] == [2.5, 2.5, 6.0, 7.6]
    m = Metrics()
    fwd = Forwarder(cfg, m)
    for req in sent:  # queued before start: merged as they would be under load
        fwd.pass_on(_received_as_trace(req))
    fwd.start()
    fwd.shutdown(30.0)

    got = list(default_limit.traces)
    expected, arrived = _per_span(sent), _per_span(got)
    n_expected, n_arrived = len(expected), len(arrived)
    assert n_arrived == n_expected == 112
    assert arrived.keys() == expected.keys()
    # field for field (protobuf equality), under the resource and scope it came with
    assert not [k.hex() for k in expected if arrived[k] != expected[k]]
    for req in got:
        n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
        assert req.ByteSize() <= cfg.max_batch_bytes or n == 1
    assert max(r.ByteSize() for r in got) < GRPC_DEFAULT_MIB << 20
    assert m.registry.get_sample_value("otel_eval_forward_spans_sent_total") == len(expected)
    assert not [s for mf in m.registry.collect() for s in mf.samples
                if s.name == "otel_eval_sink_dropped_total" and s.value]
