"""sidecar.yaml for real: agent -> collector -> otel-eval serve, and the trace backend.

Every conformance recording is sent by the official SDK exporters (traces and logs, OTLP/gRPC)
to the real collector running the shipped sidecar.yaml (endpoints rewritten to loopback,
tests/support/otel_collector.py); the collector fans the spans out to a capture backend and
to a real ``otel-eval serve``, and the log records to serve. Each recording's evaluation
through the collector must equal its direct evaluation, and the backend must get every span.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import topology
from recording_agent import replay, requests
from support.otel_collector import Collector, render
from support.otlp_capture import Capture
from support.poll import poll
from support.ports import free_port

pytestmark = pytest.mark.slow


def test_every_recording_through_the_sidecar_collector_equals_its_direct_evaluation(
        otelcol_bin: Path, tmp_path: Path) -> None:
    recs = topology.recordings()
    want = topology.direct(recs, tmp_path / "direct")
    assert set(want) == topology.runs(recs)
    assert topology.setup_only(recs)  # AutoGen's create_agent traces: sent, not evaluated
    agent = f"127.0.0.1:{free_port()}"
    with Capture() as backend, topology.serve(tmp_path / "serve") as served:
        cfg = render("sidecar.yaml", {
            "0.0.0.0:4317": agent, "0.0.0.0:4318": f"127.0.0.1:{free_port()}",
            "tempo:4317": backend.grpc_target, "otel-eval:4317": served.grpc_target})
        with Collector(otelcol_bin, cfg, tmp_path) as collector:
            spans = logs = 0
            for rec in recs:
                sent = replay(rec, agent)
                spans, logs = spans + sent.spans, logs + sent.log_records
            poll(lambda: topology.received_all(served, spans, logs),
                 "serve to receive every span and log record", timeout_s=topology.DEADLINE_S)
            poll(lambda: len(backend.spans()) >= spans, "the backend to receive every span",
                 timeout_s=topology.DEADLINE_S)
            got = poll(lambda: topology.stored_at_least(served, len(want)),
                       "serve to evaluate every recording", timeout_s=topology.DEADLINE_S)
            assert collector.proc is not None and collector.proc.poll() is None
    assert set(got) == set(want)
    mismatched = {tid: topology.differences(got[tid], want[tid])
                  for tid in want if got[tid] != want[tid]}
    assert not mismatched, mismatched
    # The backend got each span once, the ids the agent sent.
    sent_ids = sorted((s.trace_id.hex(), s.span_id.hex()) for rec in recs
                      for signal, req in requests(rec) if signal == "traces"
                      for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans)
    assert sorted((s.trace_id.hex(), s.span_id.hex()) for s in backend.spans()) == sent_ids
