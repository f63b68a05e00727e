"""The admin endpoint: ``/metrics``, health, and the results API (its paths and what they
answer: ``app.admin_routes``).

Who may do what (tokens), and what a browser may not make it do (DNS rebinding, CSRF):
``app.admin_access``. TLS (and mTLS) from ``admin.tls``, as on the receivers.

One routing table (``app.admin_routes.routes``: ``receive.routing``, method and path pattern
-> handler) serves the API and the web view's pages on the shared HTTP server
(``receive.httpserver``: deadlines, connection limits, a reserve of slots for the probe paths
and ``/metrics``; when every slot is taken, a new connection closes the oldest partial
request, never one that showed a token, as on the OTLP/HTTP receiver: a flood of partial
requests cannot deny the API).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from otel_eval.app.admin_access import AdminAuth, basic_as_bearer, browser_guard
from otel_eval.app.admin_config import AdminConfig
from otel_eval.app.admin_routes import (
    _SERVED_METHODS,
    AdminApi,
    _json,
    _miss,
    _not_allowed,
    routes,
)
from otel_eval.app.admin_routes import (
    MAX_FEEDBACK_BYTES as MAX_FEEDBACK_BYTES,
)
from otel_eval.base.configcheck import parse_endpoint
from otel_eval.base.loglimit import LogLimiter
from otel_eval.receive.httpmessage import Handler, Request, Response
from otel_eval.receive.httpserver import HttpServer
from otel_eval.receive.security import (
    TlsFiles,
    is_loopback,
)
from otel_eval.store.failures import write_failure

log = logging.getLogger(__name__)

# Longest query string of any path, API or web view, bytes: a longer one is 414 before any
# route parses it (a route never reads a cut query, whose filters past the cut would vanish).
MAX_QUERY_BYTES = 8 * 1024
# Retry-After of a read the store could not answer (503), seconds
STORE_RETRY_AFTER_S = 5
# A store that is down fails every read: one line per this many seconds, the rest counted.
STORE_READ_LOG_INTERVAL_S = 10.0


# What the admin endpoint answers before the store is open (``AdminApi.opened``): the probes,
# and the process's metrics (a 503 there is ``up == 0``: OtelEvalDown would page through every
# migration; the gauges computed from the store wait for it, ``CalibrationMetrics``).
_UNGATED = frozenset({"/healthz", "/readyz", "/metrics"})


def _is_ui(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


def _store_read(respond: Callable[[Request], Response], req: Request,
                failure_log: LogLimiter) -> Response:
    """``respond(req)``, or 503 with the reason when the store cannot answer (down, out of
    connections, a lock held past ``store.lock_timeout_s``): the store's state, not a bug of
    ours, so no 500 and no traceback; its line limited by ``failure_log`` (a store down
    fails every request)."""
    try:
        return respond(req)
    except Exception as e:
        reason = write_failure(e)
        if reason is None:
            raise
        left_out = failure_log.allow()
        if left_out is not None:
            log.warning("store read for %s failed (%s: %s)%s", req.path, reason,
                        type(e).__name__, LogLimiter.since(left_out, "failed store reads"))
        return _json(503, {"error": f"the store is unavailable ({reason}); retry later",
                           "reason": reason}, {"Retry-After": str(STORE_RETRY_AFTER_S)})


def _auth(config: AdminConfig) -> AdminAuth:
    return AdminAuth(config.read_tokens, config.write_tokens, config.public_paths)


def make_handler(api: AdminApi, auth: AdminAuth | None = None, *,
                 allowed_hosts: Iterable[str] = (), loopback: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> Handler:
    """Every request passes the browser checks (``browser_guard``), a method no route serves
    is a 405 with ``Allow`` (before any token is asked for: no token makes it served), and
    it is authorized (the web view may send its token as Basic), its query bounded (414
    past ``MAX_QUERY_BYTES``), then routed (``routes``); a store that cannot answer is a 503
    (``_store_read``). Without tokens, only localhost, addresses and ``allowed_hosts`` are
    served as Host, whatever the listener's address; with tokens, on a ``loopback``
    listener, so are the public paths (served without a token: a rebound page has none).
    ``clock``: the time of the limit on the store's failure lines."""
    access = auth or _auth(AdminConfig())
    failure_log = LogLimiter(STORE_READ_LOG_INTERVAL_S, clock)  # called from every connection
    router = routes(api, access.writes)
    served_hosts = frozenset(h.lower() for h in allowed_hosts)

    def host_checked(path: str, method: str) -> frozenset[str] | None:
        """The names served besides localhost and addresses, None when any Host is."""
        if not access.enabled or (loopback and access.is_public(path, method == "POST")):
            return served_hosts
        return None

    def handle(req: Request) -> Response:
        path = req.path.rstrip("/") or "/"
        if (refused := browser_guard(req, path, host_checked(path, req.method))) is not None:
            api.refused("admin", "forbidden")
            return refused
        if req.method not in _SERVED_METHODS:  # 405 with Allow, whatever the token: the
            # path's methods (RFC 9110 15.5.6), or the endpoint's for a path none serves
            return _not_allowed(req, router.allowed(req.path)) or _miss(req)
        write = req.method == "POST"
        authorization = req.header("Authorization")
        ui = _is_ui(path) and not write
        status, why = access.check(path, basic_as_bearer(authorization) if ui
                                   else authorization, write)
        if status:
            api.refused("admin", "unauthenticated" if status == 401 else "forbidden")
            scheme = 'Basic realm="otel-eval", charset="UTF-8"' if ui else \
                'Bearer realm="otel-eval"'
            return _json(status, {"error": why}, {"WWW-Authenticate": scheme}, close=True)
        if why:  # (0, the token's name): kept ahead of partial requests when full
            req.authenticated()
        if len(req.query) > MAX_QUERY_BYTES:  # after a POST, its unread body closes
            return _json(414, {"error": f"query string longer than {MAX_QUERY_BYTES} bytes"},
                         close=write)
        if path not in _UNGATED and not api.opened():
            return _json(503, {"error": "starting or stopping: the store is not open (a "
                               "migration may take a while); retry later"},
                         {"Retry-After": str(STORE_RETRY_AFTER_S)}, close=write)
        return _store_read(router, req, failure_log)

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
        handler = make_handler(self.api, _auth(self.config),
                               allowed_hosts=self.config.allowed_hosts,
                               loopback=is_loopback(parse_endpoint(self.endpoint)[0]))
        # when full, a new connection closes the oldest partial request (never a token
        # holder's): a flood of partial requests cannot deny the API and the web view
        self._server = HttpServer(self.endpoint, handler, name="otel-eval-admin",
                                  limits=self.config.limits, tls=tls,
                                  on_close=self.api.connection_closed,
                                  on_refuse=lambda reason: self.api.refused("admin", reason),
                                  reuse_partial=True)
        self._server.start()
        self.port = self._server.port
        log.info("admin endpoint listening on %s (port %d)", self.endpoint, self.port)

    def shutdown(self, deadline_s: float) -> None:
        self.stop()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown(0.0)
