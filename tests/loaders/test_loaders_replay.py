"""Replay through the official SDK exporters into real OTLP servers on free ports; the spans
received equal the spans loaded, and so do the trajectories built from them."""

from __future__ import annotations

import shutil
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
from opentelemetry.sdk.resources import Resource

from otel_eval.app.replay import make_exporter, replay, to_readable_log
from otel_eval.base.model import LogEvent, Span, Trace
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


def test_an_ipv6_endpoint_is_replayed_to(tmp_path: Path) -> None:
    """``--endpoint [::1]:PORT`` (HOST:PORT of an IPv6 address, as every endpoint setting
    takes it) was accepted and then sent to ``::1:PORT`` (gRPC: "Misformatted domain name")
    or ``http://::1:PORT`` (not a URL): the exporter failed every batch."""
    import socket

    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    collector = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    try:
        port = server.add_insecure_port("[::1]:0")
    except RuntimeError:
        pytest.skip("no IPv6 loopback")
    server.start()
    try:
        traces = list(load_path(DATA / "tau_runs.json"))
        assert replay(traces, f"[::1]:{port}", "grpc") == sum(len(t.spans) for t in traces)
    finally:
        server.stop(None).wait()
    assert len(_received(collector.requests)) == sum(len(t.spans) for t in traces)
    http = make_exporter("[::1]:4318", "http")
    try:
        assert http._endpoint == "http://[::1]:4318/v1/traces"  # type: ignore[attr-defined]
    finally:
        http.shutdown()


def test_unknown_protocol_is_refused() -> None:
    with pytest.raises(ValueError, match="protocol"):
        make_exporter("127.0.0.1:4317", "kafka")  # type: ignore[arg-type]


@pytest.mark.parametrize("source", ["tau_runs.json", "mini.traj.json"])
def test_replay_converts_with_the_configured_task_and_outcome_attributes(
        grpc_collector: tuple[str, _Collector], tmp_path: Path, source: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``replay`` had no ``--config``: tau-bench and mini-swe-agent files were converted with
    the default trajectory.task_id_attribute / outcome_attribute, so a serve configured with
    other names read no task id nor outcome from the replayed runs."""
    from otel_eval.app.cli import main

    endpoint, collector = grpc_collector
    config = tmp_path / "otel-eval.yaml"
    config.write_text("trajectory:\n  task_id_attribute: app.task\n"
                      "  outcome_attribute: app.outcome\n")
    served = TrajectoryConfig(task_id_attribute="app.task", outcome_attribute="app.outcome")
    assert main(["replay", str(DATA / source), "--endpoint", endpoint,
                 "--config", str(config)]) == 0, capsys.readouterr().err
    back = release(_received(collector.requests), "otlp")
    offline = list(load_path(DATA / source, config=served))  # as eval --config reads them
    assert back and len(back) == len(offline)
    for a, b in zip(sorted(offline, key=lambda t: t.trace_id),
                    sorted(back, key=lambda t: t.trace_id), strict=True):
        ta, tb = build_trajectory(a, served), build_trajectory(b, served)
        assert tb.task_id is not None and tb.task_id == ta.task_id
        assert tb.root_attributes.get("app.outcome") == ta.root_attributes.get("app.outcome")
        assert "otel_eval.task.id" not in tb.root_attributes


def test_every_command_takes_config() -> None:
    """Each command reads the configuration (replay: the attributes it writes), so each takes
    ``--config FILE``, the one definition."""
    import argparse

    from otel_eval.app.cli import build_parser

    (commands,) = [a for a in build_parser()._actions
                   if isinstance(a, argparse._SubParsersAction)]
    for name, parser in commands.choices.items():
        (config,) = [a for a in parser._actions if "--config" in a.option_strings]
        assert (config.metavar, config.dest) == ("FILE", "config"), name
        assert str(config.help).startswith("YAML configuration (default: embedded)"), name


def test_replay_reads_its_paths_as_eval_does(grpc_collector: tuple[str, _Collector],
                                            tmp_path: Path) -> None:
    """``replay`` sends the traces ``eval`` evaluates: its paths one stream (load_paths), so
    a copy of an export given as a second path is refused as late and reported, not sent
    again (the receiver would refuse every span of it as a duplicate)."""
    import io

    from otel_eval.app.cli import build_parser, cmd_replay

    endpoint, collector = grpc_collector
    paths = [shutil.copy(DATA / "otlp_request.json", tmp_path / name)
             for name in ("a.json", "b.json")]
    args = build_parser().parse_args(["replay", *map(str, paths), "--endpoint", endpoint])
    assert cmd_replay(args, io.StringIO()) == 1  # the copy's spans reported
    spans = [s for t in load_file(DATA / "otlp_request.json") for s in t.spans]
    assert sorted(map(_key, _received(collector.requests)), key=repr) == sorted(
        map(_key, spans), key=repr)


def test_a_record_is_replayed_with_its_observed_time() -> None:
    """What orders a span's records stamped alike (``conventions.events``) is sent again as
    read, so the replayed run is read in the order ``eval`` reads the file in."""
    rec = LogEvent("ab" * 16, "cd" * 8, "gen_ai.user.message", 1_000, {}, {"content": "hi"},
                   observed_time_unix_nano=2_000)
    assert to_readable_log(rec, Resource.create({})).log_record.observed_timestamp == 2_000
