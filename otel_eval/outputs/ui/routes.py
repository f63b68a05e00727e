"""Output (part): the web view's routes, each a small function request -> response.

    GET /ui/                                  recent runs, filtered as /v1/evaluations
    GET /ui/runs/{trace_id}?from=N            one run as a tree of steps (from step N + 1)
    GET /ui/runs/{trace_id}?step=N            the page of that run that holds step N
    GET /ui/runs/{trace_id}/steps/{index}     one step whole
    GET /ui/sessions                          conversations, filtered as /v1/sessions
    GET /ui/sessions/{session_id}?service=S&turn=N
                                              one conversation (of service S) as a transcript
                                              of its turns; without service, 409 listing
                                              them when several services have that id
    GET /ui/sessions?id={session_id}&service=S&turn=N
                                              the same: how an id "." or ".." is linked (a
                                              browser resolves it as a dot segment)
    GET /ui/issues                            the recurring issues
    GET /ui/issues/{id}/runs?cursor=C         every run of one issue, 100 a page, the next
                                              page by the cursor of its clustering run (410
                                              once that run is gone; ?offset=N, the first
                                              form, still read) ("_other", the issue gauges'
                                              rest: to /ui/issues)
    GET /ui/calibration                       the judge and p_success against the outcomes
                                              people recorded (GET /v1/calibration)
    GET /ui/static/style.css                  the stylesheet
    GET /ui/static/outcome.js                 the run page's outcome form (the only script)

``PAGES`` is the table: (path pattern, page), each page (sources, the path's match, query
string) -> (status, headers, body); the admin server mounts it in its routing table
(``receive.routing``) for GET, behind the read token, and refuses (414) a query string longer
than its ``MAX_QUERY_BYTES`` before a page parses it, as on the API. Read-only: no route
writes (the run page's form posts to the API's ``/v1/feedback``, under its own checks).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote

from otel_eval.base.configcheck import ascii_int
from otel_eval.base.printable import quoted
from otel_eval.outputs.issues.result import OTHER_ISSUE_ID
from otel_eval.outputs.issues.runs import NoRun, RunsAt, RunsGone
from otel_eval.outputs.ui.calibration import calibration_page
from otel_eval.outputs.ui.html import HEADERS, Html, h, join, page
from otel_eval.outputs.ui.issues import (
    issue_runs_gone,
    issue_runs_page,
    issues_page,
    run_issues_section,
)
from otel_eval.outputs.ui.outcome import Writes, outcome_section
from otel_eval.outputs.ui.run import tree
from otel_eval.outputs.ui.runs import DEFAULT_LIMIT, FILTERS, runs_page
from otel_eval.outputs.ui.runview import run_page, step_page
from otel_eval.outputs.ui.sessions import services_page, session_page, sessions_page
from otel_eval.outputs.ui.text import Redact
from otel_eval.store.query import EvaluationQuery, Page, QueryError
from otel_eval.store.sessions import AmbiguousSession, SessionQuery

_RUNS_PAGE = 100  # runs listed per page of /ui/issues/{id}/runs
_HTML = "text/html; charset=utf-8"


@dataclass
class Sources:
    """What the pages read (the admin server fills it from its API)."""

    query: Callable[[EvaluationQuery], Page]
    get: Callable[[str], dict[str, Any] | None]
    issues: Callable[[], dict[str, Any] | None]
    redact: Redact = None  # as the judge redacts (judge.redaction)
    trace_url: str = ""  # the trace backend's URL of a trace, {trace_id} in it; "" = none
    # (issue id, where) -> a page of the issue's runs (GET /v1/issues/{id}/runs; RunsGone
    # for a cursor whose clustering run is gone)
    issue_runs: Callable[[str, RunsAt], dict[str, Any] | None] = lambda _i, _a: None
    # conversations (GET /v1/sessions, /v1/sessions/{id}); None = not served
    sessions: Callable[[SessionQuery], dict[str, Any]] | None = None
    session: Callable[[str, str | None], dict[str, Any] | None] | None = None
    # GET /v1/calibration's report (evaluate.calibration); None: not served
    calibration: Callable[[], dict[str, Any] | None] = lambda: None
    pass_threshold: float = 0.5  # prediction.pass_threshold
    writes: Writes = "open"  # who may POST /v1/feedback (the outcome form's request)
    # trace id -> the recurring issues (issue_id, title) the run is one of (the run page
    # links each, as the issue's page links its runs)
    run_issues: Callable[[str], list[dict[str, str]]] = lambda _t: []


Response = tuple[int, dict[str, str], bytes]


def _html(status: int, title: str, body: Html, nav: str = "") -> Response:
    return status, {**HEADERS, "Content-Type": _HTML}, page(title, body, nav)


def _not_found(message: str) -> Response:
    return _html(404, "not found", join([h("h1", "Not found"), h("p", message, class_="error")]))


def _runs(sources: Sources, query: str) -> Response:
    raw = parse_qs(query, keep_blank_values=True)
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
    return _html(200, "runs", runs_page(sources.query(q), params, redact=sources.redact,
                                        threshold=sources.pass_threshold), "runs")


def _runs_page(sources: Sources, _found: re.Match[str], query: str) -> Response:
    return _runs(sources, query)


def _issues(sources: Sources, _found: re.Match[str], _query: str) -> Response:
    return _html(200, "issues", issues_page(sources.issues()), "issues")


def _run_page(sources: Sources, found: re.Match[str], query: str) -> Response:
    step = (parse_qs(query).get("step") or [""])[0]  # ?step=N: the page holding step N
    return _run(sources, found.group(1), found.group(2), _position(query, "from"),
                ascii_int(step, 9))


def _run(sources: Sources, trace_id: str, index: str | None, first: int,
         step: int | None = None) -> Response:
    body = sources.get(trace_id.lower())
    if body is None:
        return _not_found(f"No evaluation for trace {trace_id.lower()}.")
    t = tree(body)
    if index is None:
        said = join([run_issues_section(sources.run_issues(trace_id.lower())),
                     outcome_section(body, sources.pass_threshold, sources.writes)])
        return _html(200, f"run {trace_id[:8]}",
                     run_page(t, sources.redact, sources.trace_url, outcome=said,
                              first=first, step=step), "runs")
    shown = step_page(t, int(index), sources.redact)
    if shown is None:
        return _not_found(f"Trace {trace_id.lower()} has no step {index}.")
    return _html(200, f"step {index} of {trace_id[:8]}", shown, "runs")


def _position(query: str, name: str) -> int:
    """``?name=N`` of a page's links (where it starts); anything but 0-9, or past 9 digits,
    the first page."""
    return ascii_int((parse_qs(query).get(name) or ["0"])[0], 9) or 0


def _issue_runs(sources: Sources, found: re.Match[str], query: str) -> Response:
    issue_id = found.group(1)
    cursor = (parse_qs(query).get("cursor") or [""])[0]
    try:
        at = (RunsAt.of_cursor(cursor, _RUNS_PAGE) if cursor
              else RunsAt(_position(query, "offset"), _RUNS_PAGE))
        page_of = sources.issue_runs(issue_id, at)
    except QueryError as e:
        return _html(400, "issue runs", h("p", str(e), class_="error"), "issues")
    except RunsGone:  # the person pages on from the first page of the last run's list
        return _html(410, "issue runs", issue_runs_gone(issue_id), "issues")
    except NoRun as e:  # none yet, or a follower of the fleet's issues job: say which
        return _not_found(f"{str(e)[:1].upper()}{str(e)[1:]}.")
    if page_of is None and issue_id == OTHER_ISSUE_ID:
        # the issue gauges' "_other" (the dashboard's issues table links its runs here):
        # the issues not shown there, each listed with its runs on the issues page
        return 303, {**HEADERS, "Content-Type": _HTML, "Location": "/ui/issues"}, b""
    if page_of is None:
        return _not_found(f"No issue {issue_id} in {at.paged()}.")
    return _html(200, "issue runs", issue_runs_page(page_of), "issues")


def _sessions(sources: Sources, _found: re.Match[str], query: str) -> Response:
    raw = parse_qs(query, keep_blank_values=True)
    if "id" in raw:  # one conversation, its id in the query (an id "." or "..")
        return _conversation(sources, raw["id"][0], query)
    if sources.sessions is None:
        return _not_found("Conversations are not served here.")
    params = {k: v[0] for k, v in raw.items() if v and v[0]}  # a form's blanks
    try:
        q = SessionQuery.from_params({k: [v] for k, v in params.items()})
    except QueryError as e:
        return _html(400, "conversations", sessions_page(None, params, str(e)), "sessions")
    return _html(200, "conversations", sessions_page(sources.sessions(q), params), "sessions")


def _session(sources: Sources, found: re.Match[str], query: str) -> Response:
    # the id URL-encoded (a "/" in it as %2F)
    return _conversation(sources, unquote(found.group(1)), query)


def _conversation(sources: Sources, session_id: str, query: str) -> Response:
    if sources.session is None:
        return _not_found("Conversations are not served here.")
    services = parse_qs(query, keep_blank_values=True).get("service")
    service = services[0] if services else None
    try:
        record = sources.session(session_id, service)
    except AmbiguousSession as e:
        return _html(409, "conversation", services_page(session_id, e.services), "sessions")
    if record is None:
        # the client's id as the API's 404 names it (a JSON string), not Python's repr
        return _not_found(f"No conversation {quoted(session_id)}.")
    first = _position(query, "turn")  # ?turn=N: from turn N + 1
    return _html(200, "conversation", session_page(record, sources.get, sources.redact, first,
                                                   sources.pass_threshold), "sessions")


def _calibration(sources: Sources, _found: re.Match[str], _query: str) -> Response:
    return _html(200, "calibration", calibration_page(sources.calibration()), "calibration")


_STATIC = {"style.css": "text/css; charset=utf-8",
           "outcome.js": "text/javascript; charset=utf-8"}


def _static(_sources: Sources, found: re.Match[str], _query: str) -> Response:
    name = found.group(1)
    data = resources.files("otel_eval.outputs.ui").joinpath("static", name).read_bytes()
    return 200, {**HEADERS, "Content-Type": _STATIC[name],
                 "Cache-Control": "max-age=3600"}, data


def _no_page(_sources: Sources, _found: re.Match[str], _query: str) -> Response:
    return _not_found("No such page.")


View = Callable[[Sources, re.Match[str], str], Response]

# The web view's GET routes, first match wins; patterns match the whole raw path (the
# last one: any other path under /ui). Each takes trailing slashes, as the API's routes do
# (``/ui/issues/`` is ``/ui/issues``; a conversation id's own "/" is sent as %2F).
PAGES: tuple[tuple[str, View], ...] = (
    (r"/ui/*", _runs_page),
    (r"/ui/issues/*", _issues),
    (r"/ui/issues/([A-Za-z0-9_.:-]{1,80})/runs/*", _issue_runs),
    (r"/ui/sessions/*", _sessions),
    (r"/ui/sessions/(.*[^/])/*", _session),
    (r"/ui/calibration/*", _calibration),
    (r"/ui/static/(style\.css|outcome\.js)/*", _static),
    (r"/ui/runs/([0-9a-fA-F]{32})(?:/steps/([0-9]{1,9}))?/*", _run_page),
    (r"/ui(?:/.*)?", _no_page),
)
