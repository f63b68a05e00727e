"""OTLP/HTTP receiver: ``POST /v1/traces`` and ``POST /v1/logs`` (GenAI events sent as log
records) with protobuf or JSON bodies, optionally gzip.

Answers as the OTLP spec says: 200 with an ExportTraceServiceResponse (partial success when
spans were rejected) in the request's encoding; 400 with a google.rpc.Status for a body that
cannot be decoded; 413 past ``max_message_bytes`` (compressed and decompressed, chunked or
not: ``receiver.body``); 429 with ``Retry-After`` when throttled, which OTLP exporters retry.
Also hosts ``serve_http``, the small threaded-server starter the admin endpoint reuses.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from google.rpc import status_pb2

from otel_eval.base.configcheck import parse_endpoint
from otel_eval.decode.body import BodyError, read_body
from otel_eval.receive.config import ReceiverConfig
from otel_eval.receive.ingest import Ingest, IngestResult
from otel_eval.receive.security import BearerAuth, TlsFiles

log = logging.getLogger(__name__)

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"

# Seconds a TLS client has for its handshake (it runs on the connection's own thread).
_HANDSHAKE_TIMEOUT_S = 10.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # listen() backlog: the socketserver default of 5 drops connection bursts (SYN queue)
    # from many exporters flushing at once; the kernel caps it at net.core.somaxconn.
    request_queue_size = 1024
    # Connections served at once (a thread each); more are closed as they are accepted, so
    # idle or slow clients cannot grow threads and memory without bound.
    max_connections = 1024
    # A connection idle this long (no byte of a request arriving) is closed, seconds.
    idle_timeout_s = 120.0
    tls: TlsFiles | None = None
    slots: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            log.debug("%s: connection limit (%d) reached; closing a new connection",
                      type(self).__name__, self.max_connections)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the thread
        except BaseException:
            self.slots.release()
            raise

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self.tls is not None:
            # no handshake here: a client that never completes one would block accept()
            sock = self.tls.context().wrap_socket(sock, server_side=True,
                                                  do_handshake_on_connect=False)
        return sock, addr

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            if self.tls is not None:
                try:
                    request.settimeout(_HANDSHAKE_TIMEOUT_S)
                    request.do_handshake()
                except (OSError, ssl.SSLError) as e:  # wrong CA, no client cert, plain...
                    log.debug("%s: TLS handshake from %s failed: %s", self.tls.name,
                              client_address[0], type(e).__name__)
                    self.shutdown_request(request)
                    return
            # http.server answers a timeout by closing the connection
            request.settimeout(self.idle_timeout_s)
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def serve_http(endpoint: str, handler: type[BaseHTTPRequestHandler], name: str,
               tls: TlsFiles | None = None) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Bind ``HOST:PORT`` (port 0 picks a free one) and serve in a daemon thread."""
    host, port = parse_endpoint(endpoint)
    server = _Server((host, port), handler, bind_and_activate=False)
    server.tls = tls
    server.slots = threading.BoundedSemaphore(server.max_connections)
    try:
        server.server_bind()
        server.server_activate()
    except OSError:
        server.server_close()
        raise
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    return server, thread


def make_handler(config: ReceiverConfig, ingest: Ingest) -> type[BaseHTTPRequestHandler]:
    checker = BearerAuth(config.bearer_tokens)

    class OtlpHttpHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "otel-eval"

        def log_message(self, format: str, *args: object) -> None:
            log.debug("otlp-http: " + format, *args)

        def do_POST(self) -> None:
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            # the sender's token name ("" with auth off), or None: refused
            sender = checker.identify(self.headers.get("Authorization"))
            # every refusal before the body is read closes the connection: the unread body
            # must not be parsed as the next request
            if sender is None:  # before the body is read: an unknown client costs nothing
                ingest.metrics.request_refused("http", "unauthenticated")
                self.close_connection = True
                self._status(401, "missing or unknown bearer token", ctype,
                             {"WWW-Authenticate": 'Bearer realm="otel-eval"'})
                return
            path = self.path.split("?", 1)[0]
            if path not in ("/v1/traces", "/v1/logs"):
                self.close_connection = True
                self._status(404, "only /v1/traces and /v1/logs are served here", _JSON)
                return
            if ctype not in (_PROTOBUF, _JSON):
                self.close_connection = True
                self._status(415, f"unsupported Content-Type {ctype!r}", _JSON)
                return
            try:
                body = read_body(self, config.max_message_bytes)
            except BodyError as e:
                ingest.metrics.spans_rejected(
                    "http", "too_large" if e.status == 413 else "malformed_request", 0)
                self.close_connection = True  # the rest of the body was not read
                self._status(e.status, str(e), ctype)
                return
            if path == "/v1/logs":
                res = (ingest.handle_logs_json(body, "http", sender) if ctype == _JSON
                       else ingest.handle_logs_bytes(body, "http", sender))
            elif ctype == _JSON:
                res = ingest.handle_json(body, "http", sender)
            else:
                res = ingest.handle_bytes(body, "http", sender)
            self._answer(res, ctype)

        def _answer(self, res: IngestResult, ctype: str) -> None:
            if res.outcome == "invalid":
                self._status(400, res.message, ctype)
            elif res.outcome == "throttled":
                self._status(429, res.message, ctype,
                             {"Retry-After": str(max(1, round(config.retry_after_s)))})
            else:
                resp = res.response()
                if ctype == _JSON:
                    data = json.dumps(json_format.MessageToDict(resp)).encode()
                else:
                    data = resp.SerializeToString()
                self._send(200, data, ctype)

        def _status(self, code: int, message: str, ctype: str,
                    headers: dict[str, str] | None = None) -> None:
            st = status_pb2.Status(code=code, message=message)
            data = (json.dumps(json_format.MessageToDict(st)).encode() if ctype != _PROTOBUF
                    else st.SerializeToString())
            self._send(code, data, ctype if ctype in (_PROTOBUF, _JSON) else _JSON, headers)

        def _send(self, code: int, data: bytes, ctype: str,
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

    return OtlpHttpHandler

class HttpReceiver:
    def __init__(self, config: ReceiverConfig, ingest: Ingest) -> None:
        self.config = config
        self.ingest = ingest
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    def start(self) -> None:
        tls = TlsFiles(self.config.tls, "otlp-http") if self.config.tls.enabled else None
        self._server, _ = serve_http(self.config.http_endpoint,
                                     make_handler(self.config, self.ingest), "otlp-http", tls)
        self.port = self._server.server_address[1]
        log.info("OTLP/HTTP receiver listening on %s (port %d)", self.config.http_endpoint,
                 self.port)

    def shutdown(self, deadline_s: float) -> None:
        """Stop accepting; the request in progress on each connection finishes."""
        self.stop()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
