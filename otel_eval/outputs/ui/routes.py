"""Output (part): the web view's routes, each a small function request -> response.

    GET /ui/                                  recent runs, filtered as /v1/evaluations
    GET /ui/runs/{trace_id}                   one run as a tree of steps
    GET /ui/runs/{trace_id}/steps/{index}     one step whole
    GET /ui/sessions                          conversations, filtered as /v1/sessions
    GET /ui/sessions/{session_id}             one conversation as a transcript of its turns
    GET /ui/issues                            the recurring issues
    GET /ui/static/style.css                  the stylesheet (the only static file)

``handle`` takes a path and query string and returns (status, headers, body); the admin
server mounts it and checks the read token first. Read-only: no route writes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote

from otel_eval.outputs.ui.html import HEADERS, Html, h, join, page
from otel_eval.outputs.ui.issues import issues_page
from otel_eval.outputs.ui.run import tree
from otel_eval.outputs.ui.runs import DEFAULT_LIMIT, FILTERS, runs_page
from otel_eval.outputs.ui.runview import run_page, step_page
from otel_eval.outputs.ui.sessions import session_page, sessions_page
from otel_eval.outputs.ui.text import Redact
from otel_eval.outputs.ui.values import short
from otel_eval.store.query import EvaluationQuery, Page, QueryError
from otel_eval.store.sessions import SessionQuery

_RUN = re.compile(r"^/ui/runs/([0-9a-fA-F]{32})(?:/steps/([0-9]{1,9}))?$")
_HTML = "text/html; charset=utf-8"
_MAX_QUERY = 4096  # characters of a query string


@dataclass
class Sources:
    """What the pages read (the admin server fills it from its API)."""

    query: Callable[[EvaluationQuery], Page]
    get: Callable[[str], dict[str, Any] | None]
    issues: Callable[[], dict[str, Any] | None]
    redact: Redact = None  # as the judge redacts (judge.redaction)
    trace_url: str = ""  # the trace backend's URL of a trace, {trace_id} in it; "" = none
    # conversations (GET /v1/sessions, /v1/sessions/{id}); None = not served
    sessions: Callable[[SessionQuery], dict[str, Any]] | None = None
    session: Callable[[str], dict[str, Any] | None] | None = None


Response = tuple[int, dict[str, str], bytes]


def _html(status: int, title: str, body: Html, nav: str = "") -> Response:
    return status, {**HEADERS, "Content-Type": _HTML}, page(title, body, nav)


def _not_found(message: str) -> Response:
    return _html(404, "not found", join([h("h1", "Not found"), h("p", message, class_="error")]))


def _runs(sources: Sources, query: str) -> Response:
    raw = parse_qs(query[:_MAX_QUERY], keep_blank_values=True)
    known = (*FILTERS, "cursor")
    unknown = sorted(set(raw) - set(known))
    params = {k: v[0] for k, v in raw.items() if k in known and v and v[0]}  # a form's blanks
    try:
        if unknown:
            raise QueryError(unknown[0], "unknown parameter")
        q = EvaluationQuery.from_params({"limit": [DEFAULT_LIMIT],
                                         **{k: [v] for k, v in params.items()}})
    except QueryError as e:
        return _html(400, "runs", runs_page(None, params, str(e)), "runs")
    return _html(200, "runs", runs_page(sources.query(q), params), "runs")


def _run(sources: Sources, trace_id: str, index: str | None) -> Response:
    body = sources.get(trace_id.lower())
    if body is None:
        return _not_found(f"No evaluation for trace {trace_id.lower()}.")
    t = tree(body)
    if index is None:
        return _html(200, f"run {trace_id[:8]}", run_page(t, sources.redact, sources.trace_url),
                     "runs")
    shown = step_page(t, int(index), sources.redact)
    if shown is None:
        return _not_found(f"Trace {trace_id.lower()} has no step {index}.")
    return _html(200, f"step {index} of {trace_id[:8]}", shown, "runs")


def _sessions(sources: Sources, path: str, query: str) -> Response:
    if sources.sessions is None or sources.session is None:
        return _not_found("Conversations are not served here.")
    if path != "/ui/sessions":
        session_id = unquote(path[len("/ui/sessions/"):])
        record = sources.session(session_id) if session_id else None
        if record is None:
            return _not_found(f"No conversation {short(session_id, 120)!r}.")
        return _html(200, "conversation", session_page(record, sources.get, sources.redact),
                     "sessions")
    raw = parse_qs(query[:_MAX_QUERY], keep_blank_values=True)
    params = {k: v[0] for k, v in raw.items() if v and v[0]}  # a form's blanks
    try:
        q = SessionQuery.from_params({k: [v] for k, v in params.items()})
    except QueryError as e:
        return _html(400, "conversations", sessions_page(None, params, str(e)), "sessions")
    return _html(200, "conversations", sessions_page(sources.sessions(q), params), "sessions")


def _static(name: str) -> Response:
    data = resources.files("otel_eval.outputs.ui").joinpath("static", name).read_bytes()
    return 200, {**HEADERS, "Content-Type": "text/css; charset=utf-8",
                 "Cache-Control": "max-age=3600"}, data


def handle(sources: Sources, path: str, query: str) -> Response:
    """The response to ``GET path?query`` (``path`` under ``/ui``)."""
    if path in ("/ui", "/ui/"):
        return _runs(sources, query)
    if path == "/ui/issues":
        return _html(200, "issues", issues_page(sources.issues()), "issues")
    if path == "/ui/sessions" or path.startswith("/ui/sessions/"):
        return _sessions(sources, path, query)
    if path == "/ui/static/style.css":
        return _static("style.css")
    found = _RUN.match(path)
    if found:
        return _run(sources, found.group(1), found.group(2))
    return _not_found("No such page.")
