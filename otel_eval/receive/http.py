"""OTLP/HTTP receiver: ``POST /v1/traces`` and ``POST /v1/logs`` (GenAI events sent as log
records) with protobuf or JSON bodies, optionally gzip; ``POST /v1/metrics`` is a 404, counted
and naming the fix (``Ingest.unsupported_signal``).

Answers as the OTLP spec says: 200 with an ExportTraceServiceResponse (partial success when
spans were rejected) in the request's encoding; 400 with a google.rpc.Status for a body that
cannot be decoded; 413 past ``max_message_bytes`` (compressed and decompressed, chunked or
not: ``decode.body``); 429 with ``Retry-After`` when throttled, which OTLP exporters retry,
and when the bodies held by every connection at once would pass
``max_body_bytes_in_flight`` (1,024 connections each holding a 64 MiB body otherwise), or
the bodies held by one sender would pass half of it (``peer_share``: throttle reason
``sender_share``; four stalled connections from one address held the whole of it otherwise):
a sender is its address and its token's name (behind a proxy every sender is one address).
Connections, deadlines and limits are the shared HTTP server's (``receive.httpserver``); when
every slot is taken, a new connection closes the oldest partial request (never an
authenticated sender's connection): a flood of partial requests cannot deny exports. A
loopback listener without tokens answers 421 to a ``Host`` that is not ``localhost`` or an
address (DNS rebinding).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from google.protobuf import json_format
from google.rpc import status_pb2

from otel_eval.base.configcheck import parse_endpoint
from otel_eval.base.printable import quoted
from otel_eval.decode.body import BodyError
from otel_eval.receive.config import ReceiverConfig
from otel_eval.receive.httpmessage import Handler, Request, Response
from otel_eval.receive.httpserver import HttpServer
from otel_eval.receive.ingest import Ingest, IngestResult
from otel_eval.receive.security import BearerAuth, TlsFiles, is_loopback, served_host

log = logging.getLogger(__name__)

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_PATHS = ("/v1/traces", "/v1/logs")


def _ctype(req: Request | None) -> str:
    raw = req.header("Content-Type") if req is not None else None
    return (raw or "").split(";")[0].strip().lower()


def _status(code: int, message: str, ctype: str, headers: Mapping[str, str] | None = None,
            close: bool = False) -> Response:
    """A google.rpc.Status in the request's encoding (JSON unless it sent protobuf)."""
    st = status_pb2.Status(code=code, message=message)
    if ctype == _PROTOBUF:
        return Response(code, st.SerializeToString(), _PROTOBUF, headers or {}, close)
    return Response(code, json.dumps(json_format.MessageToDict(st)).encode(), _JSON,
                    headers or {}, close)


def status_error(req: Request | None, code: int, message: str) -> Response:
    """The shared server's own refusals (framing, limits) as OTLP answers them."""
    return _status(code, message, _ctype(req))


def _retry_after(config: ReceiverConfig) -> str:
    return str(max(1, round(config.retry_after_s)))


def make_handler(config: ReceiverConfig, ingest: Ingest) -> Handler:
    checker = BearerAuth(config.bearer_tokens)
    # A loopback listener without tokens takes only a Host a local sender names it by
    # (``served_host``): a page whose name was rebound to 127.0.0.1 (DNS rebinding) posts
    # same-origin, so no CORS preflight stops it feeding made-up runs to the evaluation.
    # Beyond loopback, senders name the host as they please (a Service, a container).
    check_host = not checker.enabled and is_loopback(parse_endpoint(config.http_endpoint)[0])

    def handle(req: Request) -> Response:
        ctype = _ctype(req)
        if check_host and not served_host(req.header("Host")):
            ingest.metrics.ingest.request_refused("http", "forbidden")
            return _status(421, f"Host {quoted(req.header('Host') or '')} is not served here: "
                                "this loopback listener answers localhost and IP addresses",
                           ctype, close=True)
        # the sender's token name ("" with auth off), or None: refused before the body is
        # read (an unknown client costs nothing); every refusal before the body closes
        # the connection: the unread body must not be parsed as the next request
        sender = checker.identify(req.header("Authorization"))
        if sender is None:
            ingest.metrics.ingest.request_refused("http", "unauthenticated")
            return _status(401, "missing or unknown bearer token", ctype,
                           {"WWW-Authenticate": 'Bearer realm="otel-eval"'}, close=True)
        if checker.enabled:  # kept ahead of partial requests when the listener is full,
            req.authenticated(sender)  # its body in its own share, not its whole address's
        if req.path == "/v1/metrics" and req.method == "POST":  # unread: refused on its path
            return _status(404, ingest.unsupported_signal("http"), ctype, close=True)
        if req.path not in _PATHS:
            return _status(404, "only /v1/traces and /v1/logs are served here", _JSON,
                           close=True)
        if req.method != "POST":
            return _status(405, f"{req.path} takes POST", _JSON, {"Allow": "POST"}, True)
        if ctype not in (_PROTOBUF, _JSON):
            ingest.metrics.ingest.request_refused("http", "unsupported_content_type")
            return _status(415, f"unsupported Content-Type {quoted(ctype)}", _JSON, close=True)
        try:
            body = req.body(config.max_message_bytes)
        except BodyError as e:
            return _unread(e, ctype)
        if req.path == "/v1/logs":
            res = (ingest.handle_logs_json(body, "http", sender) if ctype == _JSON
                   else ingest.handle_logs_bytes(body, "http", sender))
        elif ctype == _JSON:
            res = ingest.handle_json(body, "http", sender)
        else:
            res = ingest.handle_bytes(body, "http", sender)
        return _answer(res, ctype)

    def _unread(e: BodyError, ctype: str) -> Response:
        """A body refused as it was read: throttled (429), or refused whole by reason."""
        if e.status == 429:  # the bodies in flight (or the address's) at their budget
            ingest.metrics.ingest.request_throttled("http", e.reason or "bodies_in_flight")
            return _status(429, str(e), ctype, {"Retry-After": _retry_after(config)}, True)
        if e.reason:  # refused on its headers, as an unsupported Content-Type is
            ingest.metrics.ingest.request_refused("http", e.reason)
            return _status(e.status, str(e), ctype, close=True)
        reason = "too_large" if e.status == 413 else "malformed_request"
        ingest.metrics.ingest.spans_rejected("http", reason, 0)  # spans unknown: unread
        ingest.metrics.ingest.request_refused("http", reason)
        return _status(e.status, str(e), ctype, close=True)

    def _answer(res: IngestResult, ctype: str) -> Response:
        if res.outcome == "invalid":
            return _status(400, res.message, ctype)
        if res.outcome == "too_large":
            return _status(413, res.message, ctype)
        if res.outcome == "throttled":
            return _status(429, res.message, ctype, {"Retry-After": _retry_after(config)})
        resp = res.response()
        if ctype == _JSON:
            return Response(200, json.dumps(json_format.MessageToDict(resp)).encode(), _JSON)
        return Response(200, resp.SerializeToString(), _PROTOBUF)

    return handle


def peer_share(budget: int, config: ReceiverConfig) -> int:
    """The bytes of bodies one sender (its address, and its token's name) holds at once: half
    the budget, and at least one message of ``max_message_bytes`` (a lone sender can always
    send its largest)."""
    return max(budget // 2, config.max_message_bytes)


class HttpReceiver:
    def __init__(self, config: ReceiverConfig, ingest: Ingest) -> None:
        self.config = config
        self.ingest = ingest
        self._server: HttpServer | None = None
        self.port = 0

    def bind(self) -> None:
        """Listen (requests wait until ``start``); ``StartupError`` naming the endpoint."""
        if self._server is not None:
            return
        tls = TlsFiles(self.config.tls, "otlp-http") if self.config.tls.enabled else None
        metrics = self.ingest.metrics
        budget = max(self.config.max_body_bytes_in_flight, self.config.max_message_bytes)
        self._server = HttpServer(
            self.config.http_endpoint, make_handler(self.config, self.ingest),
            name="otlp-http", limits=self.config.http_limits, tls=tls, error=status_error,
            on_close=lambda reason: metrics.ingest.connection_closed("http", reason),
            on_refuse=lambda reason: metrics.ingest.request_refused("http", reason),
            reuse_partial=True,
            body_budget=budget, body_budget_per_peer=peer_share(budget, self.config))
        self._server.bind()
        self.port = self._server.port

    def start(self) -> None:
        self.bind()
        assert self._server is not None
        self._server.start()
        log.info("OTLP/HTTP receiver listening on %s (port %d)", self.config.http_endpoint,
                 self.port)

    def shutdown(self, deadline_s: float) -> None:
        """Stop accepting; the request in progress on each connection finishes."""
        self.stop()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown(0.0)
