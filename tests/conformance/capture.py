"""An OTLP/HTTP capture server on loopback, for recording the corpus.

Accepts ``POST /v1/traces`` and ``POST /v1/logs`` with protobuf or JSON bodies, gzip or not,
answers 200 with an empty export response in the request's content type, and keeps every
request in arrival order as ``{"signal": "traces" | "logs", "body": <OTLP JSON>}`` where the
body is ``json_format.MessageToDict`` of the request with trace/span ids turned to hex (the
OTLP/JSON encoding). Anything else gets a 404 (path) or 400/415 (body) and is noted in
``errors``; a recording with errors is not written.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

_SIGNALS: dict[str, tuple[str, type[Message], type[Message]]] = {
    "/v1/traces": ("traces", ExportTraceServiceRequest, ExportTraceServiceResponse),
    "/v1/logs": ("logs", ExportLogsServiceRequest, ExportLogsServiceResponse),
}
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


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


def decode(path: str, body: bytes, content_type: str, encoding: str) -> dict[str, Any]:
    """One request -> its stored form; ValueError when it is not OTLP."""
    signal, request_cls, _ = _SIGNALS[path]
    if encoding == "gzip":
        body = gzip.decompress(body)
    msg = request_cls()
    if content_type == "application/x-protobuf":
        msg.ParseFromString(body)
    elif content_type == "application/json":
        # OTLP/JSON carries hex ids; protobuf's parser wants base64 for bytes fields.
        json_format.ParseDict(_base64_ids(json.loads(body)), msg)
    else:
        raise ValueError(f"unsupported Content-Type {content_type!r}")
    return {"signal": signal, "body": hex_ids(json_format.MessageToDict(msg))}


class Capture:
    """The server: ``start()`` binds 127.0.0.1:0; ``endpoint`` is the OTLP base URL."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Capture:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(self, item: dict[str, Any] | None, error: str | None = None) -> None:
        with self._lock:
            if item is not None:
                self.requests.append(item)
            if error is not None:
                self.errors.append(error)


def _handler(capture: Capture) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            body = self._body()
            if path not in _SIGNALS:
                capture.add(None, f"POST {path}")
                self._send(404, b"", "text/plain")
                return
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            try:
                item = decode(path, body, ctype,
                              (self.headers.get("Content-Encoding") or "").lower())
            except (ValueError, DecodeError, json_format.ParseError, OSError) as e:
                capture.add(None, f"POST {path}: {e}")
                self._send(400, str(e).encode(), "text/plain")
                return
            capture.add(item)
            response = _SIGNALS[path][2]()
            if ctype == "application/json":
                self._send(200, b"{}", ctype)
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
