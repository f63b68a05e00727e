"""A real OTLP/gRPC server (TraceService + LogsService) on 127.0.0.1, port 0, for the sinks."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from results_downstream import Downstream, LogsServicer


@pytest.fixture
def downstream() -> Iterator[Downstream]:
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
