"""The admin endpoint under hostile input (whoever reaches a port is hostile): a bounded,
deterministic Hypothesis run (``derandomize=True``) of arbitrary requests through the handler
the admin server runs (``app.admin.make_handler``: browser guard, tokens, routing, the
store's 503) over a running service's own ``AdminApi`` and its real store (SQLite; in the
``postgres`` lane, PostgreSQL too), which holds an evaluated run, two conversations of two
turns each (one id with "/", " ", "?", "%" and a non-ASCII letter in it) and a judge's score,
plus a real clustering result for the issue routes.

Generated: query strings (repeated and unknown keys, huge values, non-UTF-8 percent-escapes,
NULs, negative, overflowing and non-ASCII-digit numbers, forged cursors, odd times), the path
tails of every id route of the API and the web view, ``POST /v1/feedback`` bodies (JSON of
wrong shapes, deep nesting, huge numbers, NaN, non-JSON, gzip and deflate, wrong content
types, bad framing), and any method, path and headers (Host, Origin, Sec-Fetch-Site,
Authorization with a configured token, a wrong one or none). Each request goes to two
listeners: an open one (no tokens, on loopback: the Host check) and one with a read and a
write token.

For every answer: 2xx or 4xx, never a 5xx nor an exception out of the handler; a JSON 4xx is
``json_error``'s ``{"error": "<why>"}``, a web view page's 4xx an HTML page with its error;
a 400 on a query names a parameter the query holds; the body is bounded (a list within its
page's limit, a JSON error within ``ERROR_BYTES`` whatever the request's size). After every
request the store still answers a normal read, on both listeners, with every run and its
verdict (nobody locked out, no verdict left null).

Requests are built as ``receive.httpconn`` builds them: the request target split by
``urlsplit``, the headers parsed by ``http.client``, the body read by ``decode.body.read_body``,
holding only what a request line carries (latin-1 without whitespace; the rest
percent-encoded). Everything the admin endpoint decides, its browser guard and tokens
included, is in that handler, so the properties need no socket; the one refusal made before
it (a target ``urlsplit`` refuses) is checked once over the service's own admin socket, and
the socket layer's framing, limits and deadlines are test_transport_bounds.py's.

What the properties found is kept below them as plain regression tests.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import pytest
from admin_requests import (
    CONTENT_TYPES,
    CONVERSATIONS,
    GUIDE,
    GUIDE_ID,
    ID_PATHS,
    QUERIES,
    QUERY_ROUTES,
    READ,
    RUNS,
    WRITE,
    Sent,
    bodies,
    issues,
    queried,
    request_of,
    requests,
    target,
    turns,
    wire,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.harness import running_service

from otel_eval.app.admin import MAX_QUERY_BYTES, make_handler
from otel_eval.app.admin_access import AdminAuth
from otel_eval.app.offline import EvalRun
from otel_eval.base.model import Trace
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_json
from otel_eval.outputs.issues.result import to_json
from otel_eval.outputs.issues.runs import MAX_RUNS_PAGE, page
from otel_eval.receive.httpmessage import Handler, Response
from otel_eval.store.query import MAX_LIMIT
from otel_eval.store.sessions import MAX_SESSION_LIMIT

EXAMPLES = {"queries": 150, "id_paths": 400, "feedback": 400, "requests": 400}
# A JSON error, whatever the request's size: why, with at most a short quote of the input
# (base.printable.QUOTED_CHARS: 100 characters, each at most 12 bytes of JSON; twice in a
# 400 naming an unknown parameter).
ERROR_BYTES = 4096
# Any answer: the store holds ~22 kB of JSON in all; the largest answers (/metrics, every
# run in one page, a run's page) are ~20 kB.
ANSWER_BYTES = 1 << 20


@dataclass(frozen=True)
class Served:
    open: Handler  # no tokens, on loopback: only loopback Host values are served
    guarded: Handler  # admin.read_tokens / write_tokens set
    port: int  # the service's own admin server (no tokens), for what only a socket reaches


@pytest.fixture(scope="module", params=[
    "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The service on a SQLite file, or on a fresh database of the suite's PostgreSQL server
    (the ``postgres`` lane): the same requests against each dialect's SQL."""
    store = {} if request.param == "sqlite" else {
        "store.url": request.getfixturevalue("postgresql_server").create_database()}
    with running_service(tmp_path_factory.mktemp("admin-hostile"), **store) as h:
        svc = h.svc
        evaluations = list(EvalRun(svc.config, [str(GUIDE)]).evaluations())
        for conversation in CONVERSATIONS:
            for trace_id, body in turns(conversation):
                spans = decode_request(request_from_json(json.dumps(body))).spans
                turn = svc.evaluator.evaluate(Trace(trace_id, spans, "complete"))
                assert turn is not None
                evaluations.append(turn)
        assert sorted(e.trace_id for e in evaluations) == sorted(RUNS)
        svc.store.put_many(evaluations)
        # a judge's score: /v1/calibration and its page have a row once an outcome is given
        judge = {"judges": {"trace": {"status": "ok", "scores": {"trace": 0.8}}}}
        stored = svc.store.get(GUIDE_ID)
        assert stored is not None and svc.store.put_judge(GUIDE_ID, stored["revision"], judge)
        result = issues()
        api = dataclasses.replace(svc.admin.api,
                                  issues=lambda: to_json(result, assignments=False),
                                  issue_runs=lambda i, at: page((result,), i, at))
        public = svc.config.admin.public_paths
        yield Served(make_handler(api, AdminAuth({}, {}, public)),
                     make_handler(api, AdminAuth({"dashboards": READ}, {"people": WRITE},
                                                 public)), svc.admin.port)


def _credentials(sent: Sent) -> tuple[Sent, Sent]:
    """``sent`` as a loopback client sends it to the open listener, and with the write token
    (which may read too) to the guarded one: the request reaches its route on both."""
    host = (("Host", "localhost:8888"),)
    return (dataclasses.replace(sent, headers=host + sent.headers),
            dataclasses.replace(sent, headers=(*host, ("Authorization", f"Bearer {WRITE}"),
                                               *sent.headers)))


def _limit(query: str, default: int) -> int:
    """The page size a query asked for (a 200 means it was a valid one), else ``default``."""
    given = parse_qs(query[:MAX_QUERY_BYTES]).get("limit") or [str(default)]
    return int(given[0])


def _check(handler: Handler, sent: Sent) -> Response:
    """Send ``sent``; the answer must keep every promise of the module docstring."""
    req = request_of(sent)
    resp = handler(req)  # an exception out of here is a 500 on the wire
    what = f"{sent.method[:20]} {sent.target[:300]!r} -> {resp.status} {resp.body[:300]!r}"
    coding = (req.header("Transfer-Encoding") or "").strip().lower()
    unknown_coding = resp.status == 501 and coding not in ("", "chunked")  # admin_requests.CODINGS
    assert 200 <= resp.status < 300 or 400 <= resp.status < 500 or unknown_coding, what
    assert len(resp.body) <= ANSWER_BYTES, what
    path = req.path.rstrip("/") or "/"
    if resp.status >= 400:
        if resp.content_type.startswith("text/html"):  # a web view page says what is wrong
            assert path.startswith("/ui") and b'class="error"' in resp.body, what
            return resp
        assert resp.content_type == "application/json", what
        assert len(resp.body) <= ERROR_BYTES, what
        error = json.loads(resp.body)
        assert isinstance(error, dict) and isinstance(error.get("error"), str), what
        assert error["error"].strip(), what
        if resp.status == 400:
            _names_a_parameter(sent.method, req.query, error, what)
        return resp
    if sent.method == "GET" and resp.content_type == "application/json":
        _within_page(path, req.query, json.loads(resp.body), what)
    return resp


def _names_a_parameter(method: str, query: str, error: dict[str, Any], what: str) -> None:
    """Every 400 of the API has one shape, ``{"error": "NAME: why", "parameter": NAME}``:
    NAME one of the query's parameters (an unknown name: its first characters), or of a
    feedback, the body's field (``body``: the body as a whole)."""
    assert set(error) == {"error", "parameter"}, what
    assert error["error"].startswith(f"{error['parameter']}: "), what
    if method == "POST":
        assert error["parameter"] in ("body", "trace_id", "outcome"), what
    else:
        given = parse_qs(query[:MAX_QUERY_BYTES], keep_blank_values=True)
        assert any(name.startswith(error["parameter"]) for name in given), what


def _within_page(path: str, query: str, body: Any, what: str) -> None:
    """A list answer holds at most the page its query asked for, at most the API's page."""
    if path == "/v1/evaluations":
        assert len(body["evaluations"]) <= min(_limit(query, 20), MAX_LIMIT), what
    elif path == "/v1/sessions" and "id" not in parse_qs(query[:MAX_QUERY_BYTES],
                                                         keep_blank_values=True):
        assert len(body["sessions"]) <= min(_limit(query, 20), MAX_SESSION_LIMIT), what
    elif path.startswith("/v1/issues/") and path.endswith("/runs"):
        assert len(body["trace_ids"]) <= min(_limit(query, 100), MAX_RUNS_PAGE), what


def _still_served(served: Served) -> None:
    """A normal read on both listeners: every run, each with its verdict."""
    for handler, sent in zip((served.open, served.guarded), _credentials(
            Sent("GET", f"/v1/evaluations?limit={MAX_LIMIT}")), strict=True):
        resp = handler(request_of(sent))
        assert resp.status == 200, resp.body[:300]
        runs = json.loads(resp.body)["evaluations"]
        assert sorted(r["trace_id"] for r in runs) == sorted(RUNS)
        assert all(isinstance(r["verdict"]["passed"], bool) for r in runs)


def _both(served: Served, sent: Sent, credentials: bool = True) -> None:
    pair = _credentials(sent) if credentials else (sent, sent)
    for handler, one in zip((served.open, served.guarded), pair, strict=True):
        _check(handler, one)
    _still_served(served)


# --- the properties ------------------------------------------------------------------------------

def _fuzz(kind: str) -> Any:
    return settings(max_examples=EXAMPLES[kind], derandomize=True, database=None,
                    deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                          HealthCheck.data_too_large])


@pytest.mark.parametrize("route", list(QUERY_ROUTES))
def test_any_query_string_is_answered_or_refused_by_name(served: Served, route: str) -> None:
    @_fuzz("queries")
    @given(line=queried(route))
    def run(line: str) -> None:
        _both(served, Sent("GET", line))

    run()


@_fuzz("id_paths")
@given(path=ID_PATHS, query=st.one_of(st.just(""), QUERIES))
def test_any_id_in_a_path_is_found_or_not(served: Served, path: str, query: str) -> None:
    _both(served, Sent("GET", target(path, query)))


@_fuzz("feedback")
@given(path=st.sampled_from(["/v1/feedback", "/v1/feedback/"]), content_type=CONTENT_TYPES,
       body=bodies())
def test_any_feedback_body_is_taken_or_refused(
        served: Served, path: str, content_type: str,
        body: tuple[tuple[tuple[str, str], ...], bytes]) -> None:
    framing, payload = body
    _both(served, Sent("POST", path, (("Content-Type", content_type), *framing), payload))


@_fuzz("requests")
@given(sent=requests())
def test_any_request_is_answered_by_a_2xx_or_a_4xx(served: Served, sent: Sent) -> None:
    _both(served, sent, credentials=False)


# --- what the properties found, each as a plain regression test ---------------------------------

@pytest.mark.parametrize("page", ["/ui/issues/{issue}/runs?offset=²",
                                  "/ui/sessions/plain?turn=²", "/ui/sessions/plain?turn=1¹"])
def test_a_page_position_int_cannot_read_is_the_first_page(served: Served, page: str) -> None:
    """``str.isdigit`` took "²", ``int`` refused it: the ValueError left the handler (500)."""
    issue = issues().issues[0].issue_id
    for handler, sent in zip((served.open, served.guarded), _credentials(
            Sent("GET", wire(page.format(issue=issue)))), strict=True):
        resp = handler(request_of(sent))
        assert resp.status == 200 and resp.content_type.startswith("text/html")


@pytest.mark.parametrize(("query", "name"), [("limit=²", "limit"), ("offset=1¹", "offset"),
                                             ("offset=" + "9" * 5_000, "offset")])
def test_a_page_parameter_int_cannot_read_is_a_400_naming_it(served: Served, query: str,
                                                             name: str) -> None:
    """Was a 400 saying "invalid literal for int() with base 10: '\\u00b2'", or "Exceeds
    the limit (4300 digits) for integer string conversion": not which parameter."""
    line = f"/v1/issues/{issues().issues[0].issue_id}/runs?{wire(query)}"
    resp = _check(served.open, _credentials(Sent("GET", line))[0])
    assert resp.status == 400
    assert json.loads(resp.body)["error"].startswith(f"{name}: must be an integer in [")


def _post(payload: bytes, *headers: tuple[str, str]) -> Sent:
    return Sent("POST", "/v1/feedback", (("Content-Type", "application/json"), *headers,
                                         ("Content-Length", str(len(payload)))), payload)


def _feedback(trace_id: str, outcome: object) -> Sent:
    return _post(json.dumps({"trace_id": trace_id, "outcome": outcome},
                            ensure_ascii=False).encode())


@pytest.mark.parametrize(("sent", "status", "error"), [
    (Sent("GET", "/v1/evaluations/" + "%00" * 20_000), 404, 'no evaluation for trace "%00'),
    (Sent("GET", "/v1/sessions/" + "%7F" * 20_000), 404, 'no session "\\u007f'),
    (Sent("GET", "/v1/nothing/" + "\x7f" * 60_000), 404, 'unknown path "/v1/nothing/\\u007f'),
    (Sent("X" * 60_000, "/nowhere"), 405, '"XXXX'),  # a path none serves: the method
    (Sent("GET", "/v1/issues/" + "x" * 80 + "/runs"), 404, f'no issue "{"x" * 80}" in the'),
    (Sent("GET", "/v1/evaluations/" + "AB" * 16), 404, f'no evaluation for trace "{"AB" * 16}"'),
    (_feedback("F" * 32, "success"), 404, f'no evaluation for trace "{"F" * 32}": feedback'),
    (Sent("GET", "/v1/evaluations?" + "%00" * 2_700 + "=1"), 400, "\x00" * 100 + ": unknown"),
    (Sent("GET", "/v1/issues/iss_x/runs?limit=" + "²" * 8_000), 400, "limit: must be"),
    (_feedback("\x7f" * 500_000, 1), 400, "trace_id: must be 32 hex"),
    (_feedback(GUIDE_ID, "\x7f" * 500_000), 400,
     'outcome: expected success or failure (or 1 or 0, true or false), got "\\u007f'),
    (_post(b"{}", ("Content-Encoding", "\x7f" * 60_000)), 415, "unsupported Content-Encoding"),
    (_post(b"{}", ("Transfer-Encoding", "\x7f" * 60_000)), 501, "unsupported Transfer-Enc"),
    (Sent("POST", "/v1/feedback", (("Content-Type", "application/json"),
                                   ("Content-Length", "\x7f" * 60_000))), 400, "body: invalid"),
], ids=["evaluation", "session", "path", "method", "issue", "as-asked", "unknown-trace",
        "parameter",
        "page", "trace_id", "outcome",
        "content-encoding", "transfer-encoding", "content-length"])
def test_an_error_quotes_the_input_briefly(served: Served, sent: Sent, status: int,
                                           error: str) -> None:
    """Each quoted the client's value whole (repr, then JSON: up to 5 bytes a byte): 60 KB of
    path or header, or a 500 KB feedback field, came back as up to 2.5 MB of error. Quoted
    as a JSON string, in the client's terms (``"/v1/x"``, ``\\u007f``), not as Python's
    repr (``'/v1/x'``, ``\\x7f``), which an issue's and an unknown trace's 404 also used
    unbounded (``!r``)."""
    for handler, one in zip((served.open, served.guarded), _credentials(sent), strict=True):
        resp = handler(request_of(one))
        assert resp.status == status and len(resp.body) <= ERROR_BYTES, resp.body[:200]
        assert json.loads(resp.body)["error"].startswith(error), resp.body[:200]


@pytest.mark.parametrize(("sent", "parameter"), [
    (Sent("GET", "/v1/evaluations?limit=0"), "limit"),
    (Sent("GET", "/v1/evaluations?colour=red"), "colour"),
    (Sent("GET", "/v1/sessions?since=yesterday"), "since"),
    (Sent("GET", "/v1/sessions/plain?colour=red"), "colour"),
    (Sent("GET", "/v1/issues/{issue}/runs?limit=0"), "limit"),
    (Sent("GET", "/v1/issues/{issue}/runs/?offset=-1"), "offset"),
    (_feedback("not hex", "success"), "trace_id"),
    (_feedback(GUIDE_ID, "maybe"), "outcome"),
    (_post(json.dumps({"outcome": 1}).encode()), "trace_id"),
    (_post(b"[1, 2]"), "body"),
    (_post(b"{not json"), "body"),
    (Sent("POST", "/v1/feedback", (("Content-Type", "application/json"),
                                   ("Transfer-Encoding", "chunked")), b"zz\r\n"), "body"),
], ids=["evaluations-limit", "evaluations-unknown", "sessions-since", "session-unknown",
        "issue-runs-limit", "issue-runs-offset", "feedback-trace_id", "feedback-outcome",
        "feedback-missing", "feedback-not-an-object", "feedback-not-json",
        "feedback-framing"])
def test_every_400_names_its_parameter_in_one_shape(served: Served, sent: Sent,
                                                     parameter: str) -> None:
    """/v1/issues/{id}/runs answered {"error": "limit must be ..."} and a feedback
    {"error": "trace_id must be ..."}, where /v1/evaluations and /v1/sessions answer
    {"error": "limit: ...", "parameter": "limit"} (docs/api.md): a client reading
    "parameter" found none."""
    sent = dataclasses.replace(sent, target=sent.target.format(issue=issues().issues[0].issue_id))
    for handler, one in zip((served.open, served.guarded), _credentials(sent), strict=True):
        resp = handler(request_of(one))
        assert resp.status == 400, resp.body[:300]
        error = json.loads(resp.body)
        assert error == {"error": error["error"], "parameter": parameter}, error
        assert error["error"].startswith(f"{parameter}: "), error


def test_a_malformed_request_target_is_quoted_briefly(served: Served) -> None:
    """The one refusal before a handler (``receive.httpconn``: the target ``urlsplit``
    refuses) quoted the target whole: here over the service's own admin socket."""
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    try:
        conn.putrequest("GET", "http://[" + "a" * 60_000, skip_host=True,
                        skip_accept_encoding=True)
        conn.putheader("Host", "localhost")
        conn.endheaders()
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    assert resp.status == 400 and len(body) <= ERROR_BYTES
    assert json.loads(body)["error"].startswith('malformed request target "http://[aaaa')
