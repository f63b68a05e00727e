"""A real OTLP/gRPC downstream (TraceService + LogsService) that records what it receives."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Downstream(trace_service_pb2_grpc.TraceServiceServicer,
                 logs_service_pb2_grpc.LogsServiceServicer):
    """Records every request; ``fail_next`` scripts error codes for the next calls."""

    def __init__(self) -> None:
        self.traces: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.logs: list[logs_service_pb2.ExportLogsServiceRequest] = []
        self.fail_next: list[grpc.StatusCode] = []
        self.failed: list[grpc.StatusCode] = []
        self.reject_spans = 0
        self.cond = threading.Condition()
        self.port = 0

    def _maybe_fail(self, context: Any) -> None:
        with self.cond:
            code = self.fail_next.pop(0) if self.fail_next else None
            if code is not None:
                self.failed.append(code)
                self.cond.notify_all()
        if code is not None:
            context.abort(code, "scripted failure")

    def Export(self, request: Any, context: Any) -> Any:
        self._maybe_fail(context)
        with self.cond:
            if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
                self.traces.append(request)
                resp = trace_service_pb2.ExportTraceServiceResponse()
                resp.partial_success.rejected_spans = self.reject_spans
            else:
                self.logs.append(request)
                resp = logs_service_pb2.ExportLogsServiceResponse()
            self.cond.notify_all()
        return resp

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self), timeout), "timed out"


class LogsServicer(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, ds: Downstream) -> None:
        self.ds = ds

    def Export(self, request: Any, context: Any) -> Any:
        return self.ds.Export(request, context)


@contextmanager
def serving() -> Iterator[Downstream]:
    """A ``Downstream`` served on 127.0.0.1, port 0 (``.port``), stopped on exit."""
    ds = Downstream()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(ds, server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(LogsServicer(ds), server)
    ds.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield ds
    finally:
        server.stop(grace=None)
