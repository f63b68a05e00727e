"""A real OTLP/gRPC downstream (TraceService + LogsService) that records what it receives;
optionally over TLS (a certificate pair, and a client CA for mTLS) demanding a bearer token,
and scripted to fail, with or without a RetryInfo delay."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Downstream(trace_service_pb2_grpc.TraceServiceServicer,
                 logs_service_pb2_grpc.LogsServiceServicer):
    """Records every request; ``fail_next`` scripts error codes for the next calls (a
    ``(RESOURCE_EXHAUSTED, seconds)`` pair throttles with that RetryInfo delay, as otel-eval's
    own receiver does); with ``token`` set, a call without ``authorization: Bearer <token>``
    is refused UNAUTHENTICATED (and counted in ``unauthenticated``)."""

    def __init__(self, token: str = "") -> None:
        self.traces: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.logs: list[logs_service_pb2.ExportLogsServiceRequest] = []
        self.fail_next: list[grpc.StatusCode | tuple[grpc.StatusCode, float]] = []
        self.failed: list[grpc.StatusCode] = []
        self.failed_at: list[float] = []  # time.monotonic() of each scripted failure
        self.reject_spans = 0
        self.token = token
        self.unauthenticated = 0
        self.metadata: list[dict[str, str]] = []  # of each accepted call
        self.accepted_at: list[float] = []  # time.monotonic() of each accepted call
        self.cond = threading.Condition()
        self.port = 0

    def _maybe_fail(self, context: Any) -> None:
        with self.cond:
            step = self.fail_next.pop(0) if self.fail_next else None
            code, delay = step if isinstance(step, tuple) else (step, None)
            if code is not None:
                self.failed.append(code)
                self.failed_at.append(time.monotonic())
                self.cond.notify_all()
        if code is None:
            return
        if delay is not None:
            info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(
                seconds=int(delay), nanos=int(delay % 1 * 1e9)))
            st = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message="throttled")
            st.details.add().Pack(info)
            context.set_trailing_metadata((("grpc-status-details-bin", st.SerializeToString()),))
        context.abort(code, "scripted failure")

    def _authenticate(self, context: Any) -> None:
        md = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        if self.token and md.get("authorization") != f"Bearer {self.token}":
            with self.cond:
                self.unauthenticated += 1
                self.cond.notify_all()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bearer token required")
        with self.cond:
            self.metadata.append(md)
            self.accepted_at.append(time.monotonic())

    def Export(self, request: Any, context: Any) -> Any:
        self._authenticate(context)
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
def serving(token: str = "", tls: tuple[Path, Path] | None = None,
            client_ca: Path | None = None) -> Iterator[Downstream]:
    """A ``Downstream`` served on 127.0.0.1, port 0 (``.port``), stopped on exit; over TLS
    with ``tls`` = (cert, key), requiring client certificates signed by ``client_ca``."""
    ds = Downstream(token)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(ds, server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(LogsServicer(ds), server)
    if tls is None:
        ds.port = server.add_insecure_port("127.0.0.1:0")
    else:
        creds = grpc.ssl_server_credentials(
            [(tls[1].read_bytes(), tls[0].read_bytes())],
            root_certificates=client_ca.read_bytes() if client_ca else None,
            require_client_auth=client_ca is not None)
        ds.port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    try:
        yield ds
    finally:
        server.stop(grace=None)
