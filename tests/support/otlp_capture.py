"""The tests' one OTLP backend: a server on loopback port 0 that keeps what it is sent.

gRPC (TraceService and LogsService, what ``otlp_grpc`` exporters and our sinks send) and HTTP
(``otlp_http`` exporters and the conformance stacks: protobuf or JSON with hex ids, gzip or
not, chunked or not, any path ending in ``/v1/traces`` or ``/v1/logs``, e.g. Loki's
``/otlp/v1/logs``). Every request is kept as protobuf, by signal (``traces``, ``logs``) and in
arrival order (``arrivals``); ``recorded()`` gives them as OTLP/JSON with hex ids (the
conformance recordings' form). Anything else is answered 404/415/400 and noted in ``errors``.

Scripted failures for the exporters' retry paths: ``fail_next`` (gRPC status codes for the next
calls, recorded in ``failed`` when used; a ``(RESOURCE_EXHAUSTED, seconds)`` pair throttles with
that RetryInfo delay, as otel-eval's own receiver does), ``reject_spans`` (a partial success).
For the exporters' transport, gRPC can be served over TLS (``tls`` = (cert, key); client
certificates signed by ``client_ca`` required) and demand a bearer ``token``: a call without
``authorization: Bearer <token>`` is refused UNAUTHENTICATED (counted in ``unauthenticated``).
gRPC accepts requests up to ``max_recv_msg_size_mib`` (the collector's OTLP receiver setting
of that name): 64 by default, so that the suite's large traces fit; 4 is the gRPC default that
a downstream configured with no limit has (larger requests answered RESOURCE_EXHAUSTED).
``start()`` binds, ``stop()`` closes; ``with Capture() as c`` does both.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import duration_pb2, json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

_SIGNALS: dict[str, tuple[str, type[Message], type[Message]]] = {
    "/v1/traces": ("traces", trace_service_pb2.ExportTraceServiceRequest,
                   trace_service_pb2.ExportTraceServiceResponse),
    "/v1/logs": ("logs", logs_service_pb2.ExportLogsServiceRequest,
                 logs_service_pb2.ExportLogsServiceResponse)}
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


class Capture:
    """``grpc_target`` (HOST:PORT, ``port``) and ``http_url`` (base URL, also ``endpoint``).
    ``token``, ``tls``, ``client_ca`` and ``max_recv_msg_size_mib`` apply to gRPC only (the
    HTTP side stays plain)."""

    def __init__(self, token: str = "", tls: tuple[Path, Path] | None = None,
                 client_ca: Path | None = None, max_recv_msg_size_mib: int = 64) -> None:
        self.traces: list[Any] = []
        self.logs: list[Any] = []
        self.arrivals: list[tuple[str, Message]] = []
        self.errors: list[str] = []
        self.fail_next: list[grpc.StatusCode | tuple[grpc.StatusCode, float]] = []
        self.failed: list[grpc.StatusCode] = []
        self.reject_spans = 0
        self.token = token
        self.unauthenticated = 0
        self.metadata: list[dict[str, str]] = []  # of each authenticated gRPC call
        self.cond = threading.Condition()
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                 options=[("grpc.max_receive_message_length",
                                           max_recv_msg_size_mib << 20)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(self), self._grpc)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_Logs(self), self._grpc)
        if tls is None:
            self.port = self._grpc.add_insecure_port("127.0.0.1:0")
        else:
            creds = grpc.ssl_server_credentials(
                [(tls[1].read_bytes(), tls[0].read_bytes())],
                root_certificates=client_ca.read_bytes() if client_ca else None,
                require_client_auth=client_ca is not None)
            self.port = self._grpc.add_secure_port("127.0.0.1:0", creds)
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._http_thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    endpoint = http_url

    def start(self) -> Capture:
        self._grpc.start()
        self._http_thread.start()
        return self

    def stop(self) -> None:
        self._grpc.stop(grace=None)
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add(self, signal: str, request: Message) -> Message:
        """Keep ``request``; the response to send (a partial success when scripted)."""
        with self.cond:
            (self.traces if signal == "traces" else self.logs).append(request)
            self.arrivals.append((signal, request))
            self.cond.notify_all()
        if signal == "logs":
            return logs_service_pb2.ExportLogsServiceResponse()
        response = trace_service_pb2.ExportTraceServiceResponse()
        if self.reject_spans:
            response.partial_success.rejected_spans = self.reject_spans
        return response

    def scripted_failure(self) -> tuple[grpc.StatusCode, float | None] | None:
        """The next scripted failure: its code and RetryInfo delay (None: no RetryInfo)."""
        with self.cond:
            step = self.fail_next.pop(0) if self.fail_next else None
            if step is None:
                return None
            code, delay = step if isinstance(step, tuple) else (step, None)
            self.failed.append(code)
            self.cond.notify_all()
        return code, delay

    def authenticated(self, context: Any) -> bool:
        """Whether the call carries the bearer token (when one is demanded); its metadata
        is kept when it does, the refusal counted when it does not."""
        md = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        with self.cond:
            if self.token and md.get("authorization") != f"Bearer {self.token}":
                self.unauthenticated += 1
                self.cond.notify_all()
                return False
            self.metadata.append(md)
        return True

    def wait_for(self, predicate: Callable[[Capture], Any], timeout: float = 10.0) -> None:
        """Until ``predicate(self)`` holds (woken by each request; ``timeout`` only fails)."""
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self), timeout), "timed out"

    def spans(self) -> list[Any]:
        with self.cond:
            reqs = list(self.traces)
        return [s for r in reqs for rs in r.resource_spans for ss in rs.scope_spans
                for s in ss.spans]

    def log_records(self) -> list[Any]:
        with self.cond:
            reqs = list(self.logs)
        return [lr for r in reqs for rl in r.resource_logs for sl in rl.scope_logs
                for lr in sl.log_records]

    def recorded(self) -> list[dict[str, Any]]:
        """``[{"signal", "body": <OTLP JSON, hex ids>}]`` in arrival order."""
        with self.cond:
            arrivals = list(self.arrivals)
        return [{"signal": signal, "body": hex_ids(json_format.MessageToDict(msg))}
                for signal, msg in arrivals]


def headed_spans(requests: Iterable[Any]) -> Iterator[tuple[Any, Any, Any]]:
    """(ResourceSpans without its scopes, ScopeSpans without its spans, Span) of every span of
    trace ``requests``, in order: what a forwarded span arrived under, to compare with what
    was sent field for field."""
    for req in requests:
        for rs in req.resource_spans:
            rhead = trace_pb2.ResourceSpans(resource=rs.resource, schema_url=rs.schema_url)
            for ss in rs.scope_spans:
                shead = trace_pb2.ScopeSpans(scope=ss.scope, schema_url=ss.schema_url)
                for span in ss.spans:
                    yield rhead, shead, span


def hex_ids(obj: Any) -> Any:
    """Turn protobuf-JSON base64 ids into OTLP/JSON hex ids, in place; returns ``obj``."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in _ID_KEYS and isinstance(v, str):
                obj[k] = base64.b64decode(v).hex()
            else:
                hex_ids(v)
    elif isinstance(obj, list):
        for v in obj:
            hex_ids(v)
    return obj


def _base64_ids(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_KEYS
                and isinstance(v, str) else _base64_ids(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_base64_ids(v) for v in obj]
    return obj


def decode(suffix: str, body: bytes, content_type: str, encoding: str) -> Message:
    """One HTTP request body -> its protobuf request; ValueError when it is not OTLP."""
    if encoding == "gzip":
        body = gzip.decompress(body)
    msg = _SIGNALS[suffix][1]()
    if content_type == "application/x-protobuf":
        msg.ParseFromString(body)
    elif content_type == "application/json":
        # OTLP/JSON carries hex ids; protobuf's parser wants base64 for bytes fields.
        json_format.ParseDict(_base64_ids(json.loads(body)), msg)
    else:
        raise ValueError(f"unsupported Content-Type {content_type!r}")
    return msg


def _export(capture: Capture, signal: str, request: Message, context: Any) -> Message:
    """One gRPC Export: refused without the token, failed as scripted, else kept."""
    if not capture.authenticated(context):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "bearer token required")
    if (failure := capture.scripted_failure()) is not None:
        code, delay = failure
        if delay is not None:  # throttled: RetryInfo in the status details, as gRPC carries it
            info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(
                seconds=int(delay), nanos=int(delay % 1 * 1e9)))
            st = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message="throttled")
            st.details.add().Pack(info)
            context.set_trailing_metadata((("grpc-status-details-bin", st.SerializeToString()),))
        context.abort(code, "scripted failure")
    return capture.add(signal, request)


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, capture: Capture) -> None:
        self.capture = capture

    def Export(self, request: Any, context: Any) -> Any:
        return _export(self.capture, "traces", request, context)


class _Logs(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, capture: Capture) -> None:
        self.capture = capture

    def Export(self, request: Any, context: Any) -> Any:
        return _export(self.capture, "logs", request, context)


def _handler(capture: Capture) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            body = self._body()
            suffix = next((s for s in _SIGNALS if path.endswith(s)), None)
            if suffix is None:
                capture.errors.append(f"POST {path}")
                self._send(404, b"", "text/plain")
                return
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            try:
                msg = decode(suffix, body, ctype,
                             (self.headers.get("Content-Encoding") or "").lower())
            except (ValueError, DecodeError, json_format.ParseError, OSError) as e:
                capture.errors.append(f"POST {path} ({ctype}): {e}")
                self._send(415 if ctype not in ("application/x-protobuf", "application/json")
                           else 400, str(e).encode(), "text/plain")
                return
            response = capture.add(_SIGNALS[suffix][0], msg)
            if ctype == "application/json":
                self._send(200, json_format.MessageToJson(response).encode(), ctype)
            else:
                self._send(200, response.SerializeToString(), ctype)

        def _body(self) -> bytes:
            # The OTel JS exporter streams its body (chunked, no Content-Length).
            if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))
            out = b""
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                out += self.rfile.read(size)
                self.rfile.readline()  # the CRLF after each chunk
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return out

        def _send(self, code: int, data: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
