"""The end-to-end tests' agent (tests/recording_agent.py) sends what the stacks recorded: each
recorded request, rebuilt as SDK objects and encoded by the SDK's own OTLP encoder, is the
recorded protobuf again, except a span's ``flags``: the Python SDK writes no W3C trace-flags
bits there (the JS SDK does: 0x101 vs 0x100), and always says whether the parent is remote:
as the recording said it, or where it did not, remote for the remote_parent scenario's
scripted parent only."""

from __future__ import annotations

from typing import Any

import pytest
import topology
from conformance.scenarios import REMOTE_SPAN_ID
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.trace.v1 import trace_pb2
from recording_agent import parent_is_remote, requests, retraced, sdk_batch, trace_ids

HAS_IS_REMOTE = trace_pb2.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
IS_REMOTE = trace_pb2.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK


def _spans(req: Any) -> list[Any]:
    return [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]


def _without_flags(req: Any) -> Any:
    for s in _spans(req):
        s.flags = 0
    return req


@pytest.mark.parametrize("rec", topology.recordings(),
                         ids=lambda r: f"{r['stack']}/{r['scenario']}")
def test_the_sdk_encodes_each_recorded_request_as_recorded(rec: dict[str, Any]) -> None:
    for signal, req in requests(rec):
        batch = sdk_batch(signal, req)
        if signal == "logs":
            assert encode_logs(batch) == req
            continue
        encoded = encode_spans(batch)
        for was, now in zip(_spans(req), _spans(encoded), strict=True):
            if not was.parent_span_id:
                continue
            remote = parent_is_remote(was)
            assert now.flags & (HAS_IS_REMOTE | IS_REMOTE) == (
                HAS_IS_REMOTE | (IS_REMOTE if remote else 0)), (was.name, was.flags)
        assert _without_flags(encoded) == _without_flags(req)


def test_only_the_scripted_remote_parent_is_remote_where_a_recording_does_not_say() -> None:
    said = {True: 0, False: 0}
    for rec in topology.recordings():
        for signal, req in requests(rec):
            for s in _spans(req) if signal == "traces" else []:
                if s.parent_span_id and not s.flags & HAS_IS_REMOTE:
                    said[parent_is_remote(s)] += 1
                    assert parent_is_remote(s) == (rec["scenario"] == "remote_parent"
                                                   and s.parent_span_id.hex() == REMOTE_SPAN_ID)
    assert said[True] and said[False]  # both cases occur in the corpus


def test_retraced_moves_spans_and_log_records_to_the_new_trace_id() -> None:
    rec = next(r for r in topology.recordings() if any(
        item["signal"] == "logs" for item in r["requests"]))
    reqs = requests(rec)
    old = trace_ids(reqs)
    new = {tid: f"{i:032x}" for i, tid in enumerate(sorted(old), 1)}
    moved = retraced(reqs, new)
    assert trace_ids(moved) == set(new.values())
    assert trace_ids(reqs) == old  # the original is untouched
    assert [type(r) for _, r in moved] == [type(r) for _, r in reqs]
