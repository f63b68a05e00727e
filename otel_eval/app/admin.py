"""The admin endpoint: ``/metrics``, health, and the results API.

    GET  /metrics                       Prometheus text, or OpenMetrics (with exemplars) when
                                        the scraper asks for it in Accept
    GET  /healthz                       200 while every stage is alive (liveness)
    GET  /readyz                        200 once receivers listen and until shutdown begins,
                                        while the store takes writes; 503 {"reason": ...}
                                        otherwise (a store refusing writes: named, with why)
    GET  /v1/evaluations?service=&agent=&task_id=&status=&passed=&detector=&since=&until=
                        &limit=&cursor=
                                        newest first, the per-trace JSON objects, one page:
                                        {"evaluations": [...], "next_cursor": ... | null};
                                        a bad parameter is a 400 naming it (otel_eval.store.query)
    GET  /v1/evaluations/{trace_id}     one object, 404 if unknown
    POST /v1/feedback                   {"trace_id", "outcome"}: records a known outcome and
                                        re-judges the stored verdict (lucky passes)
    GET  /v1/issues                     recurring issues (when the clustering stage runs)
    GET  /v1/calibration                the judge checked against people: AUC and Cohen's
                                        kappa of every judge score and p_success against the
                                        recorded outcomes, per agent (evaluate.calibration)
    GET  /ui/...                        the web view (``otel_eval.outputs.ui.routes``): runs, one
                                        run,
                                        issues; HTML under a strict Content-Security-Policy

With ``admin.read_tokens`` / ``write_tokens`` set, every path but ``admin.public_paths``
needs ``Authorization: Bearer <token>``: a read or write token for GET, a write token for
POST (401 without a known token, 403 for a read token on a write). A browser on ``/ui/`` may
send the token as the password of HTTP Basic authentication (any user name): a 401 there
asks for it with ``WWW-Authenticate: Basic``. TLS (and mTLS) from
``admin.tls``, as on the receivers.

Each route is a handler ``Request -> Response`` on the shared HTTP server
(``receive.httpserver``: deadlines, connection limits, a reserve of slots for the probe paths
and ``/metrics``).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry

from otel_eval.base.configcheck import FieldErrors, validate
from otel_eval.decode.body import BodyError, loads_bounded
from otel_eval.outputs.ui.routes import Sources
from otel_eval.outputs.ui.routes import handle as ui_handle
from otel_eval.outputs.ui.text import Redact
from otel_eval.receive.config import HttpLimits
from otel_eval.receive.httpserver import Handler, HttpServer, Request, Response
from otel_eval.receive.security import (
    BearerAuth,
    Listeners,
    TlsFiles,
    TlsServerConfig,
    exposed_insecurely,
    exposure_problems,
)
from otel_eval.store.query import EvaluationQuery, Page, QueryError
from otel_eval.telemetry.metrics import render


@dataclass(frozen=True)
class AdminConfig:
    # Serves /metrics, /healthz, /readyz and the results API (/v1/evaluations, /v1/feedback).
    endpoint: str = "localhost:8888"
    # TLS on the admin listener (same keys as receiver.tls; reloaded when the files change).
    tls: TlsServerConfig = field(default_factory=TlsServerConfig)
    # Tokens that may read (GET /v1/evaluations, /v1/issues), name -> token, sent as
    # `Authorization: Bearer <token>`. With any read or write token set, reads need one of them.
    read_tokens: dict[str, str] = field(default_factory=dict, repr=False)
    # Tokens that may write (POST /v1/feedback) and read, name -> token. With tokens
    # configured, a read token on a write is 403 and no token is 401.
    write_tokens: dict[str, str] = field(default_factory=dict, repr=False)
    # Paths served without a token (Prometheus scrapes and kubelet probes).
    public_paths: list[str] = field(default_factory=lambda: ["/metrics", "/healthz",
                                                             "/readyz"])
    # Start even though the endpoint is not loopback and lacks TLS or tokens.
    allow_insecure_non_loopback: bool = False
    # The page of one trace in your trace backend, `{trace_id}` replaced by the 32-hex id
    # (e.g. http://jaeger:16686/trace/{trace_id}); the web view's run page links to it.
    # Empty: no link. http(s) only.
    trace_url: str = ""
    # Admin connections, as receiver.http_limits; reserved_connections slots beyond
    # max_connections serve only /healthz, /readyz and /metrics (probes and scrapes get in
    # during a flood of partial requests).
    limits: HttpLimits = field(default_factory=lambda: HttpLimits(reserved_connections=16))
    # (service, agent) pairs with series of their own on /metrics, one budget shared by every
    # per-trace metric: the first this many distinct pairs; every other pair is counted as
    # service="_other", agent="_other" on all of them alike (so ratios hold). A pair costs
    # ~65 series lines (4 histograms): 250 keep /metrics under ~20k lines.
    metrics_max_pairs: int = 250

    def __post_init__(self) -> None:
        validate(self, endpoints=("endpoint",), minimum={"metrics_max_pairs": 1})
        if self.trace_url and (not self.trace_url.startswith(("http://", "https://"))
                               or "{trace_id}" not in self.trace_url):
            raise FieldErrors({"trace_url": "expected an http(s) URL with {trace_id} in it, "
                                             f"got {self.trace_url!r}"})

    def _listeners(self) -> Listeners:
        return [("admin.endpoint", self.endpoint)]

    def exposure_problems(self) -> list[str]:
        """As ``ReceiverConfig.exposure_problems``: read or write tokens count as
        authentication."""
        return exposure_problems(self._listeners(), self.tls,
                                 bool(self.read_tokens or self.write_tokens),
                                 self.allow_insecure_non_loopback)

    def exposed_insecurely(self) -> bool:
        return exposed_insecurely(self._listeners(), self.tls,
                                  bool(self.read_tokens or self.write_tokens),
                                  self.allow_insecure_non_loopback)

log = logging.getLogger(__name__)

_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
# Largest feedback body, bytes: it holds a trace id and an outcome.
MAX_FEEDBACK_BYTES = 1 << 20
# Longest query string read, bytes (a URL past it is refused before parsing).
MAX_QUERY_BYTES = 8 * 1024


@dataclass
class AdminApi:
    """What the admin endpoint reads; the service fills it in."""

    registry: CollectorRegistry
    query: Callable[[EvaluationQuery], Page]
    get: Callable[[str], dict[str, Any] | None]
    feedback: Callable[[str, str], dict[str, Any] | None]  # -> updated evaluation or None
    healthy: Callable[[], bool]
    ready: Callable[[], bool]
    unready: Callable[[], str] = lambda: "not serving"  # why /readyz answers 503
    issues: Callable[[], dict[str, Any] | None] = lambda: None
    # the agreement of the judge and the predictor with the recorded outcomes
    # (evaluate.calibration.report); None: not served
    calibration: Callable[[], dict[str, Any] | None] = lambda: None
    refused: Callable[[str, str], None] = lambda _protocol, _reason: None  # counts refusals
    redact: Redact = None  # the judge's redaction, applied to what the web view shows
    trace_url: str = ""  # admin.trace_url: the trace backend's page of a trace
    # Connections closed early, by reason (httpserver.CLOSE_REASONS).
    connection_closed: Callable[[str], None] = lambda _reason: None


def _is_ui(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


def basic_as_bearer(authorization: str | None) -> str | None:
    """``Basic base64(user:token)`` as ``Bearer token`` (a browser's way to send a token)."""
    scheme, _, encoded = (authorization or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return authorization
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return "Bearer " + decoded.partition(":")[2]


class AdminAuth:
    """Who may do what on the admin endpoint (``admin.read_tokens`` / ``write_tokens``)."""

    def __init__(self, config: AdminConfig) -> None:
        self.readers = BearerAuth({**config.read_tokens, **config.write_tokens})
        self.writers = BearerAuth(config.write_tokens)
        self.public = frozenset(p.rstrip("/") or "/" for p in config.public_paths)

    @property
    def enabled(self) -> bool:
        return self.readers.enabled

    def check(self, path: str, authorization: str | None, write: bool) -> tuple[int, str]:
        """(0, sender) when allowed, else (401 or 403, why)."""
        if not self.enabled or (path in self.public and not write):
            return 0, ""
        reader = self.readers.identify(authorization)
        if reader is None:
            return 401, "missing or unknown bearer token"
        if not write:
            return 0, reader
        writer = self.writers.identify(authorization) if self.writers.enabled else None
        return (0, writer) if writer is not None else (403, "this token may not write")


def _json(status: int, obj: Any, headers: Mapping[str, str] | None = None,
          close: bool = False) -> Response:
    return Response(status, json.dumps(obj).encode(), "application/json", headers or {},
                    close)


def _error(status: int, message: str, **extra: Any) -> Response:
    return _json(status, {"error": message, **extra})


def make_handler(api: AdminApi, auth: AdminAuth | None = None) -> Handler:
    access = auth or AdminAuth(AdminConfig())
    sources = Sources(api.query, api.get, api.issues, api.redact, api.trace_url)

    def handle(req: Request) -> Response:
        path = req.path.rstrip("/") or "/"
        write = req.method not in ("GET", "HEAD")
        authorization = req.header("Authorization")
        ui = _is_ui(path) and not write
        status, why = access.check(path, basic_as_bearer(authorization) if ui
                                   else authorization, write)
        if status:
            api.refused("admin", "unauthenticated" if status == 401 else "forbidden")
            scheme = 'Basic realm="otel-eval", charset="UTF-8"' if ui else \
                'Bearer realm="otel-eval"'
            return _json(status, {"error": why}, {"WWW-Authenticate": scheme}, close=True)
        if req.method == "POST":
            return feedback(req) if path == "/v1/feedback" else _json(
                404, {"error": f"unknown path {req.path!r}"}, close=True)
        if req.method != "GET":
            return _json(405, {"error": f"{req.method} is not served here"},
                         {"Allow": "GET, POST"}, close=True)
        return read(req, path)

    def read(req: Request, path: str) -> Response:
        if path == "/metrics":
            data, ctype = render(api.registry, req.header("Accept"))
            return Response(200, data, ctype)
        if path == "/healthz":
            ok = api.healthy()
            return _json(200 if ok else 503, {"status": "ok" if ok else "unavailable"})
        if path == "/readyz":
            if api.ready():
                return _json(200, {"status": "ok"})
            return _json(503, {"status": "unavailable", "reason": api.unready()})
        if path == "/v1/evaluations":
            return evaluations(req)
        if path.startswith("/v1/evaluations/"):
            trace_id = path.rsplit("/", 1)[1].lower()
            body = api.get(trace_id) if _TRACE_ID.match(trace_id) else None
            return _json(200, body) if body else _error(
                404, f"no evaluation for trace {trace_id!r}")
        if _is_ui(path):
            code, headers, data = ui_handle(sources, req.path, req.query)
            ctype = headers.pop("Content-Type")
            return Response(code, data, ctype, headers)
        if path == "/v1/calibration":
            found = api.calibration()
            return _json(200, found) if found is not None else _error(
                404, "calibration is not served here")
        if path == "/v1/issues":
            issues = api.issues()
            return _json(200, issues) if issues is not None else _error(
                404, "issue clustering is not enabled (issues.interval_s)")
        return _error(404, f"unknown path {req.path!r}")

    def evaluations(req: Request) -> Response:
        if len(req.query) > MAX_QUERY_BYTES:
            return _error(414, f"query string longer than {MAX_QUERY_BYTES} bytes")
        try:
            query = EvaluationQuery.from_params(parse_qs(req.query, keep_blank_values=True))
        except QueryError as e:
            return _error(400, str(e), parameter=e.param)
        return _json(200, api.query(query).to_json())

    def feedback(req: Request) -> Response:
        try:
            raw = req.body(MAX_FEEDBACK_BYTES)
        except BodyError as e:  # what was not read must not become a request
            return _json(e.status, {"error": str(e)}, close=True)
        try:
            body = loads_bounded(raw or b"null", max_depth=8)
            trace_id, outcome = str(body["trace_id"]).lower(), body["outcome"]
        except (ValueError, KeyError, TypeError) as e:
            why = f" ({e})" if isinstance(e, ValueError) else ""
            return _error(400, 'expected JSON {"trace_id": "<32 hex>", "outcome": ...}' + why)
        if not _TRACE_ID.match(trace_id):
            return _error(400, f"trace_id must be 32 hex digits, got {trace_id!r}")
        try:
            updated = api.feedback(trace_id, outcome)
        except ValueError as e:
            return _error(400, str(e))
        return _json(200, updated) if updated else _error(
            404, f"no evaluation for trace {trace_id!r}: feedback is taken once the trace "
            "is evaluated (nothing recorded)")

    return handle


class AdminServer:
    def __init__(self, endpoint: str, api: AdminApi, config: AdminConfig | None = None) -> None:
        self.endpoint = endpoint
        self.api = api
        self.config = config or AdminConfig(endpoint=endpoint)
        self._server: HttpServer | None = None
        self.port = 0

    def start(self) -> None:
        tls = TlsFiles(self.config.tls, "admin") if self.config.tls.enabled else None
        self._server = HttpServer(self.endpoint, make_handler(self.api, AdminAuth(self.config)),
                                  name="otel-eval-admin", limits=self.config.limits, tls=tls,
                                  on_close=self.api.connection_closed)
        self._server.start()
        self.port = self._server.port
        log.info("admin endpoint listening on %s (port %d)", self.endpoint, self.port)

    def shutdown(self, deadline_s: float) -> None:
        self.stop()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown(0.0)
