"""``otel-eval serve --events-endpoint --forward-endpoint``: a trace sent over OTLP/gRPC comes
back out stamped, and its evaluation arrives as gen_ai.evaluation.result log records."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from results_sample import ROOT, TRACE_ID, trace
from support.otlp_capture import Capture
from support.ports import free_port

from otel_eval.decode.encode import encode_spans
from otel_eval.decode.otlp import attributes_to_dict
from otel_eval.outputs.events import EVENT_NAME


def _export_when_up(port: int, deadline_s: float = 30.0) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=deadline_s)
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(encode_spans(trace().spans),
                                                                timeout=10)


def test_serve_forwards_stamped_spans_and_emits_events(downstream: Capture,
                                                       tmp_path: Path) -> None:
    grpc_port = free_port()
    (tmp_path / "c.yaml").write_text("assembly:\n  grace_s: 0.1\n")
    endpoint = f"127.0.0.1:{downstream.port}"
    with (tmp_path / "serve.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "otel_eval.app.cli", "serve", "--config",
             str(tmp_path / "c.yaml"),
             "--grpc-endpoint", f"127.0.0.1:{grpc_port}",
             "--http-endpoint", f"127.0.0.1:{free_port()}",
             "--admin-endpoint", f"127.0.0.1:{free_port()}", "--store",
             str(tmp_path / "r.db"), "--events-endpoint", endpoint, "--forward-endpoint",
             endpoint], stdout=log, stderr=subprocess.STDOUT)
        try:
            _export_when_up(grpc_port)
            downstream.wait_for(lambda ds: ds.traces and ds.logs, timeout=30)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    spans = {s.span_id.hex(): s for req in downstream.traces for rs in req.resource_spans
             for ss in rs.scope_spans for s in ss.spans}
    assert set(spans) == {s.span_id for s in trace().spans}
    root = attributes_to_dict(spans[ROOT].attributes)
    assert root["otel_eval.verdict"] in ("pass", "fail")
    assert root["otel_eval.finding_count"] >= len(root["otel_eval.findings"])
    records = [r for req in downstream.logs for rl in req.resource_logs for sl in rl.scope_logs
               for r in sl.log_records]
    assert records and all(r.event_name == EVENT_NAME and r.trace_id.hex() == TRACE_ID
                           for r in records)
    names = [attributes_to_dict(r.attributes)["gen_ai.evaluation.name"] for r in records]
    assert names.count("otel_eval.verdict") == 1
    assert len(records) == root["otel_eval.finding_count"] + 1
