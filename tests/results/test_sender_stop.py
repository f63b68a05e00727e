"""The sender's stop (``shutdown``) against a downstream that does not answer: what the stop
cuts is dropped for the stop, not for good, so the spool keeps it for the restart."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from results_sample import evaluation, trace

from otel_eval.base.component import Held, settle
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.forward import Forwarder
from otel_eval.telemetry.metrics import Metrics


class _Hanging(trace_service_pb2_grpc.TraceServiceServicer):
    """Takes each call and answers only once ``release`` is set (a stuck collector)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def Export(self, request: Any, context: Any) -> Any:
        self.entered.set()
        self.release.wait()
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def hanging() -> Iterator[tuple[_Hanging, int]]:
    servicer = _Hanging()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    servicer.release.set()
    server.stop(grace=None)


def test_a_call_in_flight_at_the_deadline_is_dropped_for_the_stop(
        hanging: tuple[_Hanging, int]) -> None:
    """The call's own timeout (30 s) outlives the stop's deadline: the stop closes the channel
    under it. Those spans were not refused by the downstream: counted ``shutdown``, and the
    trace stays held (replayed after the restart), not released as if dropped for good."""
    servicer, port = hanging
    released: list[Held] = []
    m = Metrics()
    fwd = Forwarder(ExportConfig(forward_endpoint=f"127.0.0.1:{port}", timeout_s=30.0), m)
    held = Held("t", 0, released.extend)
    fwd.start()
    fwd.export(trace(), evaluation(), held)
    settle([held])  # finishing's own share
    assert servicer.entered.wait(30.0)
    fwd.shutdown(0.0)
    worker = fwd._sender._thread
    assert worker is not None
    worker.join(30.0)  # the worker, past the cut call, has counted it
    assert not worker.is_alive()

    def dropped(reason: str) -> float:
        return m.registry.get_sample_value("otel_eval_sink_dropped_total",
                                           {"sink": "forward", "reason": reason}) or 0.0

    assert (dropped("shutdown"), dropped("rejected")) == (3, 0)
    assert released == []


def test_a_hung_downstream_does_not_hold_the_stop_past_its_deadline(
        hanging: tuple[_Hanging, int], caplog: pytest.LogCaptureFixture) -> None:
    """``shutdown(deadline_s)`` stops within the deadline (``base.component``): the call in
    flight is cut at the deadline, not left to run on; the worker has stopped and counted it
    when ``shutdown`` returns, so the service's next parts get the time left."""
    servicer, port = hanging
    m = Metrics()
    fwd = Forwarder(ExportConfig(forward_endpoint=f"127.0.0.1:{port}", timeout_s=30.0), m)
    fwd.start()
    fwd.export(trace(), evaluation())
    assert servicer.entered.wait(30.0)
    fwd.shutdown(0.0)
    worker = fwd._sender._thread
    assert worker is not None and not worker.is_alive()
    assert "did not stop within the deadline" not in caplog.text
    assert m.registry.get_sample_value("otel_eval_sink_dropped_total",
                                       {"sink": "forward", "reason": "shutdown"}) == 3
