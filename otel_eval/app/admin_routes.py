"""The admin endpoint's routes, served by ``app.admin``: what it reads (``AdminApi``),
its handlers and its one routing table (``routes``).

    GET  /metrics                       Prometheus text, or OpenMetrics (with exemplars) when
                                        the scraper asks for it in Accept
    GET  /healthz                       200 while every stage is alive (liveness)
    GET  /readyz                        200 once receivers listen and until shutdown begins,
                                        while the store takes writes and every stage is
                                        alive; 503 {"reason": ...} otherwise (a store
                                        refusing writes or a stage that died: named)
    GET  /v1/evaluations?service=&agent=&task_id=&status=&passed=&detector=&since=&until=&window=
                        &counted_since=&counted_until=&counted_window=&limit=&cursor=
                                        newest first, the per-trace JSON objects, one page:
                                        {"evaluations": [...], "next_cursor": ... | null};
                                        a bad parameter is a 400 naming it (otel_eval.store.query)
    GET  /v1/evaluations/{trace_id}     one object, 404 if unknown
    GET  /v1/sessions?service=&agent=&passed=&since=&until=&limit=&cursor=
                                        (and counted_since=&counted_until=&counted_window=: the
                                        window the session metrics count in, store.sessions)
                                        conversations, newest last turn first, computed from
                                        the stored turns: {"sessions": [...], "next_cursor"}
                                        (otel_eval.store.sessions, evaluate.sessions.reader)
    GET  /v1/sessions/{session_id}?service=
                                        one session (the id URL-encoded) within a service,
                                        404 if no turn has it; without ?service=, the one
                                        service's whose turns carry the id, 409 naming them
                                        when several do
    GET  /v1/sessions?id={session_id}&service=
                                        the same: how an id "." or ".." is reached (a client
                                        resolves such a path segment before sending it)
    POST /v1/feedback                   {"trace_id", "outcome"}: records a known outcome and
                                        re-judges the stored verdict (lucky passes)
    GET  /v1/issues                     recurring issues (when the clustering stage runs)
    GET  /v1/issues/{id}/runs           every run of one issue, ?offset=&limit= (<= 1000),
                                        or ?cursor= (next_cursor: the pages of one
                                        clustering run, 410 once it is gone;
                                        otel_eval.outputs.issues.runs)
    GET  /v1/calibration                the judge checked against people: AUC and Cohen's
                                        kappa of every judge score and p_success against the
                                        recorded outcomes, per agent (evaluate.calibration)
    GET  /ui/...                        the web view (``otel_eval.outputs.ui.routes``): runs, one
                                        run (with a form that records its outcome through
                                        POST /v1/feedback), conversations, one conversation,
                                        issues, calibration; HTML under a strict
                                        Content-Security-Policy

Every 400 is ``{"error": "NAME: why", "parameter": NAME}``, NAME the query parameter, or the
feedback body's field (``body``: the body as a whole), as ``_bad`` and ``QueryError`` say.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

from prometheus_client import CollectorRegistry

from otel_eval.base.model import is_trace_id
from otel_eval.base.printable import quoted
from otel_eval.decode.body import BodyError, loads_bounded
from otel_eval.outputs.issues.runs import NoRun, RunsAt, RunsGone
from otel_eval.outputs.ui.outcome import Writes
from otel_eval.outputs.ui.routes import PAGES, Sources, View
from otel_eval.outputs.ui.text import Redact
from otel_eval.receive.httpmessage import Request, Response
from otel_eval.receive.routing import RouteHandler, Router, route
from otel_eval.store.query import EvaluationQuery, Page, QueryError
from otel_eval.store.sessions import AmbiguousSession, SessionQuery, session_service
from otel_eval.telemetry.metrics import render

# the admin endpoint's lines keep one logger name (``app.admin``), whichever module says them
log = logging.getLogger("otel_eval.app.admin")

# Largest feedback body, bytes: it holds a trace id and an outcome.
MAX_FEEDBACK_BYTES = 1 << 20


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
    # (issue id, where) -> one page of the issue's runs, or None (unknown issue); raises
    # RunsGone for a cursor of a clustering run no longer kept (outputs.issues.runs)
    issue_runs: Callable[[str, RunsAt], dict[str, Any] | None] = lambda _i, _a: None
    # trace id -> the issues (issue_id, title) of the last clustering run the run is one of
    run_issues: Callable[[str], list[dict[str, str]]] = lambda _t: []
    # the agreement of the judge and the predictor with the recorded outcomes
    # (evaluate.calibration.report); None: not served
    calibration: Callable[[], dict[str, Any] | None] = lambda: None
    refused: Callable[[str, str], None] = lambda _protocol, _reason: None  # counts refusals
    redact: Redact = None  # the judge's redaction, applied to what the web view shows
    trace_url: str = ""  # admin.trace_url: the trace backend's page of a trace
    # Connections closed early, by reason (httpserver.CLOSE_REASONS).
    connection_closed: Callable[[str], None] = lambda _reason: None
    # Sessions (evaluate.sessions.reader.SessionReader.page / get); None: not served (404).
    sessions: Callable[[SessionQuery], dict[str, Any]] | None = None
    session: Callable[[str, str | None], dict[str, Any] | None] | None = None
    # prediction.pass_threshold: the web view marks a p_success below it as predicted to fail
    pass_threshold: float = 0.5
    # Whether what the API reads is open: serve starts the admin endpoint before it opens
    # (and migrates) the store, so probes see a live process; until then, and again once
    # the stop closes it, only /healthz, /readyz and /metrics are answered, the rest 503
    # (Retry-After).
    opened: Callable[[], bool] = lambda: True


def _json(status: int, obj: Any, headers: Mapping[str, str] | None = None,
          close: bool = False) -> Response:
    return Response(status, json.dumps(obj).encode(), "application/json", headers or {},
                    close)


def _error(status: int, message: str, **extra: Any) -> Response:
    return _json(status, {"error": message, **extra})


def _bad(parameter: str, message: str) -> Response:
    """The one shape of every 400 of the API: ``{"error": "NAME: why", "parameter": NAME}``,
    NAME a query parameter or a field of the body (``body`` for the body as a whole)."""
    return _error(400, f"{parameter}: {message}", parameter=parameter)


def no_params(query: str) -> Response | None:
    """The 400 of a path that takes no parameter and was given one (its first), as
    ``/v1/sessions/{id}`` refuses an unknown one; None without any. Taken and not read, a
    dashboard's ``/v1/issues?service=travel`` got every service's issues as if filtered."""
    name = next(iter(parse_qs(query, keep_blank_values=True)), None)
    if name is None:
        return None
    e = QueryError(name, "unknown parameter (this path takes none)")
    return _error(400, str(e), parameter=e.param)


def _page(sources: Sources, page: View) -> RouteHandler:
    """A web view page (``outputs.ui.routes.PAGES``) as a route of the admin endpoint."""
    def serve(req: Request, found: re.Match[str]) -> Response:
        code, headers, data = page(sources, found, req.query)
        ctype = headers.pop("Content-Type")
        return Response(code, data, ctype, headers)
    return serve


# the methods some route serves (HEAD wherever GET is); any other is _miss's 405
_SERVED_METHODS = frozenset(("GET", "HEAD", "POST"))

# OTLP/HTTP paths: an exporter sent to the admin port instead of the OTLP/HTTP receiver
_OTLP_PATHS = frozenset(("/v1/traces", "/v1/logs", "/v1/metrics"))
_OTLP_FIX = ("this is otel-eval's admin port; send OTLP/HTTP to the OTLP/HTTP receiver "
             "(receiver.http_endpoint, localhost:4318 by default) or OTLP/gRPC to "
             "receiver.grpc_endpoint (localhost:4317)")
_otlp_told = threading.Event()


def _miss(req: Request) -> Response:
    """No route: an unknown path (404; after a POST, the unread body closes the connection),
    or a method the admin endpoint does not serve (405; HEAD is served wherever GET is:
    ``receive.routing``). An OTLP export here (an exporter given the admin port) is a 404
    that names the receiver, said once in the log (its retries at debug)."""
    if req.method in ("GET", "HEAD"):
        return _error(404, f"unknown path {quoted(req.path)}")
    if req.method == "POST":
        why = f"unknown path {quoted(req.path)}"
        if (req.path.rstrip("/") or "/") in _OTLP_PATHS:
            why = f"{why}: {_OTLP_FIX}"
            level = logging.DEBUG if _otlp_told.is_set() else logging.WARNING
            _otlp_told.set()
            log.log(level, "an OTLP exporter from %s posted %s to the admin port; %s",
                    req.peer, quoted(req.path), _OTLP_FIX)
        return _json(404, {"error": why}, close=True)
    return _json(405, {"error": f"{quoted(req.method)} is not served here"},
                 {"Allow": ", ".join(sorted(_SERVED_METHODS))}, close=True)


class _Routes:
    """The admin API's handlers, ``Request, path match -> Response``."""

    def __init__(self, api: AdminApi) -> None:
        self.api = api

    def metrics(self, req: Request, _found: re.Match[str]) -> Response:
        data, ctype = render(self.api.registry, req.header("Accept"))
        return Response(200, data, ctype)

    def healthz(self, _req: Request, _found: re.Match[str]) -> Response:
        ok = self.api.healthy()
        return _json(200 if ok else 503, {"status": "ok" if ok else "unavailable"})

    def readyz(self, _req: Request, _found: re.Match[str]) -> Response:
        if self.api.ready():
            return _json(200, {"status": "ok"})
        return _json(503, {"status": "unavailable", "reason": self.api.unready()})

    def evaluation(self, req: Request, found: re.Match[str]) -> Response:
        if (refused := no_params(req.query)) is not None:
            return refused
        trace_id = found.group(1).lower()
        body = self.api.get(trace_id) if is_trace_id(trace_id) else None
        return _json(200, body) if body else _error(  # named as it was asked for
            404, f"no evaluation for trace {quoted(found.group(1))}")

    def issues(self, req: Request, _found: re.Match[str]) -> Response:
        if (refused := no_params(req.query)) is not None:
            return refused
        issues = self.api.issues()
        return _json(200, issues) if issues is not None else _error(404, NoRun.OFF)

    def issue_runs(self, req: Request, found: re.Match[str]) -> Response:
        issue_id = found.group(1)
        try:
            at = RunsAt.from_query(req.query)
            page = self.api.issue_runs(issue_id, at)
        except QueryError as e:
            return _error(400, str(e), parameter=e.param)
        except RunsGone as e:  # its pages cannot go on: never a page of another list
            return _error(410, f"cursor: {e}", parameter="cursor", generated_at=e.latest)
        except NoRun as e:  # none yet, the job off or a follower of the fleet's: say which
            return _error(404, str(e))
        return _json(200, page) if page is not None else _error(
            404, f"no issue {quoted(issue_id)} in {at.paged()}")

    def calibration(self, req: Request, _found: re.Match[str]) -> Response:
        if (refused := no_params(req.query)) is not None:
            return refused
        found = self.api.calibration()
        return _json(200, found) if found is not None else _error(
            404, "calibration is not served here")

    def evaluations(self, req: Request, _found: re.Match[str]) -> Response:
        try:
            query = EvaluationQuery.from_params(parse_qs(req.query, keep_blank_values=True))
        except QueryError as e:
            return _error(400, str(e), parameter=e.param)
        return _json(200, self.api.query(query).to_json())

    def sessions(self, req: Request, _found: re.Match[str]) -> Response:
        params = parse_qs(req.query, keep_blank_values=True)
        if "id" in params:  # one conversation, its id in the query (an id "." or "..")
            ids = params.pop("id")
            if len(ids) != 1:
                return _bad("id", "given more than once")
            if not ids[0]:
                return _bad("id", "empty: a conversation id is at least one character")
            return self._session(ids[0], params)
        if self.api.sessions is None:
            return _error(404, "sessions are not served here")
        try:
            query = SessionQuery.from_params(params)
        except QueryError as e:
            return _error(400, str(e), parameter=e.param)
        return _json(200, self.api.sessions(query))

    def session(self, req: Request, found: re.Match[str]) -> Response:
        # the id URL-encoded (a "/" in it as %2F)
        return self._session(unquote(found.group(1)),
                             parse_qs(req.query, keep_blank_values=True))

    def _session(self, session_id: str, params: dict[str, list[str]]) -> Response:
        """One conversation: ``/v1/sessions/{id}?service=``, or ``/v1/sessions?id=&service=``
        for an id no path carries (".", "..": a client resolves such a segment)."""
        if self.api.session is None:
            return _error(404, "sessions are not served here")
        try:
            service = session_service(params)
            record = self.api.session(session_id, service)
        except QueryError as e:
            return _error(400, str(e), parameter=e.param)
        except AmbiguousSession as e:
            return _error(409, f"conversation {quoted(session_id)} is in several services: "
                          "name one with ?service=", services=e.services)
        return _json(200, record) if record else _error(404, f"no session {quoted(session_id)}")

    def feedback(self, req: Request, _found: re.Match[str]) -> Response:
        if (refused := no_params(req.query)) is not None:
            return refused  # its body unread: the connection closes after the answer
        try:
            raw = req.body(MAX_FEEDBACK_BYTES)
        except BodyError as e:  # what was not read must not become a request
            bad = {"parameter": "body"} if e.status == 400 else {}
            return _json(e.status, {"error": f"body: {e}" if bad else str(e), **bad},
                         close=True)
        try:
            body = loads_bounded(raw or b"null", max_depth=8)
            sent, outcome = str(body["trace_id"]), body["outcome"]
        except (ValueError, KeyError, TypeError) as e:
            why = f" ({e})" if isinstance(e, ValueError) else ""
            missing = e.args[0] if isinstance(e, KeyError) else "body"
            return _bad(missing, 'expected JSON {"trace_id": "<32 hex>", "outcome": ...}'
                        + why)
        if not is_trace_id(trace_id := sent.lower()):
            return _bad("trace_id", f"must be 32 hex digits, got {quoted(sent)}")
        try:
            updated = self.api.feedback(trace_id, outcome)
        except ValueError as e:
            return _bad("outcome", str(e))
        return _json(200, updated) if updated else _error(
            404, f"no evaluation for trace {quoted(sent)}: feedback is taken once the trace "
            "is evaluated (nothing recorded)")


def routes(api: AdminApi, writes: Writes = "open") -> Router:
    """The admin endpoint's one routing table: the API, then the web view's pages. Patterns
    match the raw path; the API's and the pages take trailing slashes (``/healthz/`` is
    ``/healthz``, ``/ui/issues/`` is ``/ui/issues``).
    ``writes``: who may write (``AdminAuth.writes``; the run page's outcome form asks for a
    write token, or says why no outcome can be recorded)."""
    r = _Routes(api)
    sources = Sources(api.query, api.get, api.issues, api.redact, api.trace_url,
                      api.issue_runs, api.sessions, api.session, api.calibration,
                      api.pass_threshold, writes, api.run_issues)
    router = Router((
        route("GET", r"/metrics/*", r.metrics),
        route("GET", r"/healthz/*", r.healthz),
        route("GET", r"/readyz/*", r.readyz),
        route("GET", r"/v1/evaluations/*", r.evaluations),
        route("GET", r"/v1/evaluations/([^/]+)/*", r.evaluation),
        route("GET", r"/v1/sessions/*", r.sessions),
        route("GET", r"/v1/sessions/(.*[^/])/*", r.session),
        route("GET", r"/v1/issues/*", r.issues),
        route("GET", r"/v1/issues/([A-Za-z0-9_.:-]{1,80})/runs/*", r.issue_runs),
        route("GET", r"/v1/calibration/*", r.calibration),
        route("POST", r"/v1/feedback/*", r.feedback),
        *(route("GET", pattern, _page(sources, page)) for pattern, page in PAGES),
    ), lambda req: _not_allowed(req, router.allowed(req.path)) or _miss(req))
    return router


def _not_allowed(req: Request, allowed: frozenset[str]) -> Response | None:
    """A path served for other methods only (``GET /v1/feedback``, ``POST /v1/evaluations``):
    405 naming them in ``Allow`` (RFC 9110 15.5.6), not a 404 "unknown path"; None when the
    path is served for none (after a request other than GET or HEAD, its unread body
    closes the connection)."""
    if not allowed:
        return None
    return _json(405, {"error": f"{quoted(req.path)} takes {', '.join(sorted(allowed))}"},
                 {"Allow": ", ".join(sorted(allowed))},
                 close=req.method not in ("GET", "HEAD"))
