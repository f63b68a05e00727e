"""A trace/logs backend for the end-to-end tests: an OTLP server on loopback port 0 that keeps
what a collector's exporter sends it. gRPC (``otlp_grpc`` exporters: TraceService and
LogsService) and HTTP (``otlp_http`` exporters: protobuf, gzip or not, any path ending in
``/v1/traces`` or ``/v1/logs``, e.g. Loki's ``/otlp/v1/logs``). Every request is kept as
protobuf, by signal, in arrival order; ``start()`` binds, ``stop()`` closes.
"""

from __future__ import annotations

import gzip
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

_HTTP = {"/v1/traces": ("traces", trace_service_pb2.ExportTraceServiceRequest,
                        trace_service_pb2.ExportTraceServiceResponse),
         "/v1/logs": ("logs", logs_service_pb2.ExportLogsServiceRequest,
                      logs_service_pb2.ExportLogsServiceResponse)}


class Capture:
    """``grpc_target`` (HOST:PORT) and ``http_url`` (base URL) once started."""

    def __init__(self) -> None:
        self.requests: dict[str, list[Any]] = {"traces": [], "logs": []}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                 options=[("grpc.max_receive_message_length", 64 << 20)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(self), self._grpc)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_Logs(self), self._grpc)
        self._grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._http_thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self._grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def start(self) -> Capture:
        self._grpc.start()
        self._http_thread.start()
        return self

    def stop(self) -> None:
        self._grpc.stop(grace=None)
        self._http.shutdown()
        self._http.server_close()

    def add(self, signal: str, request: Any) -> None:
        with self._lock:
            self.requests[signal].append(request)

    def spans(self) -> list[Any]:
        with self._lock:
            reqs = list(self.requests["traces"])
        return [s for r in reqs for rs in r.resource_spans for ss in rs.scope_spans
                for s in ss.spans]

    def log_records(self) -> list[Any]:
        with self._lock:
            reqs = list(self.requests["logs"])
        return [lr for r in reqs for rl in r.resource_logs for sl in rl.scope_logs
                for lr in sl.log_records]

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, capture: Capture) -> None:
        self.capture = capture

    def Export(self, request: Any, context: Any) -> Any:
        self.capture.add("traces", request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _Logs(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, capture: Capture) -> None:
        self.capture = capture

    def Export(self, request: Any, context: Any) -> Any:
        self.capture.add("logs", request)
        return logs_service_pb2.ExportLogsServiceResponse()


def _handler(capture: Capture) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?", 1)[0]
            suffix = next((s for s in _HTTP if path.endswith(s)), None)
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if suffix is None or ctype != "application/x-protobuf":
                capture.errors.append(f"POST {path} ({ctype})")
                self._send(404 if suffix is None else 415, b"")
                return
            signal, request_cls, response_cls = _HTTP[suffix]
            if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
                body = gzip.decompress(body)
            request = request_cls()
            request.ParseFromString(body)
            capture.add(signal, request)
            self._send(200, response_cls().SerializeToString())

        def _send(self, code: int, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
