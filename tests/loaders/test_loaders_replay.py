"""Replay through the official SDK exporters into real OTLP servers on free ports; the spans
received equal the spans loaded, and so do the trajectories built from them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from otel_eval.app.replay import make_exporter, replay
from otel_eval.base.model import Span, Trace
from otel_eval.base.steps import Trajectory
from otel_eval.decode.otlp import decode_request
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.receive.loaders import load_file, load_path
from otel_eval.receive.loaders.files import release

DATA = Path(__file__).resolve().parents[1] / "data" / "loaders"
CFG = TrajectoryConfig()


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []

    def Export(self, request: ExportTraceServiceRequest, context: Any,
               ) -> ExportTraceServiceResponse:
        self.requests.append(request)
        return ExportTraceServiceResponse()


@pytest.fixture
def grpc_collector() -> Iterator[tuple[str, _Collector]]:
    collector = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", collector
    server.stop(None).wait()


@pytest.fixture
def http_collector() -> Iterator[tuple[str, list[ExportTraceServiceRequest]]]:
    received: list[ExportTraceServiceRequest] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            req = ExportTraceServiceRequest()
            req.ParseFromString(body)
            received.append(req)
            out = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()
    thread.join()


def _key(span: Span) -> tuple[Any, ...]:
    return (span.trace_id, span.span_id, span.parent_span_id, span.name, span.start_ns,
            span.end_ns, span.status, span.status_message, span.attributes,
            [(e.name, e.time_unix_nano, e.attributes) for e in span.events],
            dict(span.resource), span.scope)


def _received(requests: list[ExportTraceServiceRequest]) -> list[Span]:
    return [s for req in requests for s in decode_request(req).spans]


def _trajectories(traces: list[Trace]) -> list[Trajectory]:
    return [build_trajectory(t, CFG) for t in sorted(traces, key=lambda t: t.trace_id)]


def _same_evaluation(sent: list[Trace], received: list[Span]) -> None:
    back = release(received, "otlp")
    for a, b in zip(_trajectories(sent), _trajectories(back), strict=True):
        assert [s.to_json() for s in a.steps] == [s.to_json() for s in b.steps]
        assert (a.input, a.output, a.task_id, a.tools, a.convention) == (
            b.input, b.output, b.task_id, b.tools, b.convention)


def test_grpc_replay_preserves_ids_times_status_attributes(
        grpc_collector: tuple[str, _Collector], datasets: Path) -> None:
    endpoint, collector = grpc_collector
    trail = sorted((datasets / "trail" / "GAIA" / "traces").glob("*.json.gz"))[:3]
    traces = [t for f in [*trail, DATA / "otlp_request.json", DATA / "tau_runs.json",
                          DATA / "mini.traj.json"] for t in load_file(f)]
    sent = replay(traces, endpoint, "grpc", batch_spans=16)
    spans = [s for t in traces for s in t.spans]
    assert sent == len(spans) and len(collector.requests) > 1  # batched
    received = _received(collector.requests)
    assert sorted(map(_key, received), key=repr) == sorted(map(_key, spans), key=repr)
    _same_evaluation(traces, received)


def test_http_replay(http_collector: tuple[str, list[ExportTraceServiceRequest]]) -> None:
    endpoint, received = http_collector
    traces = list(load_path(DATA / "tau_runs.json"))
    assert replay(traces, endpoint, "http") == sum(len(t.spans) for t in traces)
    spans = _received(received)
    assert sorted(map(_key, spans), key=repr) == sorted(
        (_key(s) for t in traces for s in t.spans), key=repr)
    _same_evaluation(traces, spans)


def test_tau_bench_file_replayed_equals_eval(grpc_collector: tuple[str, _Collector],
                                             datasets: Path) -> None:
    endpoint, collector = grpc_collector
    traces = list(load_path(datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json"))
    replay(traces, endpoint)
    _same_evaluation(traces, _received(collector.requests))


def test_unknown_protocol_is_refused() -> None:
    with pytest.raises(ValueError, match="protocol"):
        make_exporter("127.0.0.1:4317", "kafka")  # type: ignore[arg-type]
