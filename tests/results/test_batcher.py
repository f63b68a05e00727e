"""The sender's batcher on sizes alone: what ``take`` merges and how ``split`` cuts a request
too large, for traces and logs. Sizes are serialized sizes; nothing here is timed."""

from __future__ import annotations

import collections
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otel_eval.outputs.batcher import LOGS, TRACES, Layout, Queued, batches, split, take


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _traces(sizes: list[list[list[int]]]) -> ExportTraceServiceRequest:
    """sizes[resource][scope] = the payload bytes of each span, in order."""
    req = ExportTraceServiceRequest()
    sid = 0
    for r, scopes in enumerate(sizes):
        rs = req.resource_spans.add(resource=Resource(attributes=[_kv("service.name", f"s{r}")]),
                                    schema_url=f"https://example.com/r{r}")
        for s, spans in enumerate(scopes):
            ss = rs.scope_spans.add(scope=InstrumentationScope(name=f"scope{s}", version="1"),
                                    schema_url=f"https://example.com/s{s}")
            for size in spans:
                sid += 1
                ss.spans.add(trace_id=b"\x01" * 16, span_id=sid.to_bytes(8, "big"),
                             name="chat", attributes=[_kv("payload", "x" * size)])
    return req


def _flat(requests: list[Any], layout: Layout) -> list[tuple[Any, Any, Any]]:
    """Every item in order, with its resource entry (no scopes) and scope entry (no items)."""
    out = []
    for req in requests:
        for rs in getattr(req, layout.resources):
            rh = type(rs)()
            rh.CopyFrom(rs)
            rh.ClearField(layout.scopes)
            for ss in getattr(rs, layout.scopes):
                sh = type(ss)()
                sh.CopyFrom(ss)
                sh.ClearField(layout.items)
                out += [(rh, sh, item) for item in getattr(ss, layout.items)]
    return out


def _queued(*sizes: tuple[int, int]) -> collections.deque[Queued[Any]]:
    return collections.deque(Queued(ExportTraceServiceRequest(), n, b) for n, b in sizes)


@pytest.mark.parametrize(("queued", "max_items", "max_bytes", "taken"), [
    # (items, bytes) per queued request -> how many the next batch takes
    ([(10, 2_500_000), (10, 2_500_000)], 2048, 3_670_016, 1),   # the audit's two traces
    ([(10, 1_000_000), (10, 1_000_000), (10, 1_670_016), (1, 1)], 2048, 3_670_016, 3),
    ([(10, 100), (10, 100)], 15, 3_670_016, 1),                 # the item bound still holds
    ([(10, 6_000_000), (1, 10)], 2048, 3_670_016, 1),           # too large: alone, split later
    ([(3000, 10), (1, 10)], 2048, 3_670_016, 1),                # too many items: alone, whole
    ([(1, 10)] * 5, 2048, 3_670_016, 5),
])
def test_take_stops_before_either_bound(queued: list[tuple[int, int]], max_items: int,
                                        max_bytes: int, taken: int) -> None:
    q = _queued(*queued)
    assert len(take(q, max_items, max_bytes)) == taken
    assert len(q) == len(queued) - taken


def test_a_merged_request_is_the_sum_of_its_parts() -> None:
    parts = [_traces([[[100, 2000]]]), _traces([[[5000], [7]], [[1]]])]
    (merged, n), = batches([Queued(p, 3, p.ByteSize()) for p in parts], TRACES, 1 << 20,
                           ExportTraceServiceRequest)
    assert merged.ByteSize() == sum(p.ByteSize() for p in parts) and n == 6
    assert _flat([merged], TRACES) == _flat(parts, TRACES)


@pytest.mark.parametrize("bound", [1024, 3000, 5000, 9000, 20_000, 50_000, 1 << 20])
def test_split_pieces_stay_under_the_bound_and_keep_every_field(bound: int) -> None:
    req = _traces([[[1000] * 7, [2500, 10, 10, 4000]], [[300] * 30], [[6000], [], [1, 2, 3]]])
    pieces = split(req, TRACES, bound, ExportTraceServiceRequest)
    for piece, n in pieces:
        assert n == len(_flat([piece], TRACES))
        assert piece.ByteSize() <= bound or n == 1  # one span larger than the bound: alone
    assert _flat([p for p, _ in pieces], TRACES) == _flat([req], TRACES)  # order, all fields
    if req.ByteSize() <= bound:
        assert len(pieces) == 1


def test_pieces_are_filled_not_one_item_each() -> None:
    req = _traces([[[1000] * 100]])  # ~106 kB of 100 spans of ~1.06 kB
    pieces = split(req, TRACES, 10_000, ExportTraceServiceRequest)
    assert [n for _, n in pieces] == [9] * 11 + [1]
    assert all(p.ByteSize() > 10_000 - 1100 for p, _ in pieces[:-1])


def test_a_span_larger_than_the_bound_goes_alone_under_its_resource_and_scope() -> None:
    req = _traces([[[10, 50_000, 10]]])
    pieces = split(req, TRACES, 20_000, ExportTraceServiceRequest)
    assert [n for _, n in pieces] == [1, 1, 1]
    big = pieces[1][0]
    assert big.ByteSize() > 20_000
    assert big.resource_spans[0].resource == req.resource_spans[0].resource
    assert big.resource_spans[0].scope_spans[0].scope == req.resource_spans[0].scope_spans[0].scope


def test_fields_this_protobuf_does_not_know_are_kept() -> None:
    """A newer sender's fields (unknown here) on the resource and scope entries survive."""
    unknown = b"\xf8\x06\x2a"  # field 111, varint 42
    req = _traces([[[3000, 3000, 3000]]])
    rs, ss = req.resource_spans[0], req.resource_spans[0].scope_spans[0]
    rs.MergeFromString(unknown)
    ss.MergeFromString(unknown)
    pieces = split(req, TRACES, 5000, ExportTraceServiceRequest)
    assert len(pieces) == 3
    for piece, _ in pieces:
        assert piece.resource_spans[0].SerializeToString().endswith(unknown)
        assert piece.resource_spans[0].scope_spans[0].SerializeToString().endswith(unknown)


def test_logs_split_the_same_way() -> None:
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add(resource=Resource(attributes=[_kv("service.name", "otel-eval")]))
    sl = rl.scope_logs.add(scope=InstrumentationScope(name="otel_eval.outputs.events"))
    sl.log_records.extend(logs_pb2.LogRecord(event_name="gen_ai.evaluation.result",
                                             attributes=[_kv("e", "x" * 900)])
                          for _ in range(20))
    pieces = split(req, LOGS, 4000, ExportLogsServiceRequest)
    assert [n for _, n in pieces] == [4] * 5
    assert all(p.ByteSize() <= 4000 for p, _ in pieces)
    assert _flat([p for p, _ in pieces], LOGS) == _flat([req], LOGS)
