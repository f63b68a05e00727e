"""The web view over HTTP: headers (CSP, nosniff), filters as the results API, tokens
(Bearer, or Basic for a browser), and bounded, escaped pages for hostile runs."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest
from hostile import TRACE_ID as HOSTILE_ID
from ui_server import GUIDE_ID, admin, get

from otel_eval.app.admin import MAX_QUERY_BYTES, AdminConfig
from otel_eval.outputs.ui.html import CSP
from otel_eval.store import Store

PAGES = ("/ui/", f"/ui/runs/{GUIDE_ID}", "/ui/issues", f"/ui/runs/{GUIDE_ID}/steps/4",
         "/ui/calibration")
# The one script a page may load: the package's own outcome form (no inline code)
OWN_SCRIPT = b'<script src="/ui/static/outcome.js" defer></script>'


@pytest.mark.parametrize("path", PAGES)
def test_every_page_is_html_under_the_strict_policy(ui_url: str, path: str) -> None:
    status, headers, body = get(ui_url + path)
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Content-Security-Policy"] == CSP
    assert "default-src 'none'" in CSP and "frame-ancestors 'none'" in CSP
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert b"<script" not in body.replace(OWN_SCRIPT, b"")
    assert b" style=" not in body and b"<style" not in body
    assert "connect-src 'self'" in CSP  # the form's fetch goes to this origin only


def _answer_headers(url: str, path: str) -> tuple[int, list[tuple[str, str]]]:
    """Status and every header line of ``GET path`` (repeated names kept)."""
    conn = http.client.HTTPConnection(urlsplit(url).netloc, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheaders()
    finally:
        conn.close()


@pytest.mark.parametrize(("path", "status"), [
    ("/v1/evaluations", 200), (f"/v1/evaluations/{GUIDE_ID}", 200), ("/healthz", 200),
    ("/metrics", 200), ("/v1/evaluations/" + "f" * 32, 404), ("/v1/evaluations?limit=x", 400),
    (f"/v1/evaluations/{GUIDE_ID}/", 200),
    (f"/v1/evaluations/x/{GUIDE_ID}", 404),  # one segment: was the last one's evaluation
    ("/ui/", 200), ("/ui/runs/" + "f" * 32, 404),
    ("/v1/evaluations?" + "a" * (MAX_QUERY_BYTES + 1), 414),  # the admin handler's
    ("/v1/evaluations?" + "a" * 70_000, 414)])  # the server's own (request line too long)
def test_no_answer_is_sniffed_or_stored(ui_url: str, path: str, status: int) -> None:
    """JSON answers (results quoting span content, errors) had neither header: a browser
    could sniff one as HTML, and a browser or proxy could keep results on disk."""
    got, headers = _answer_headers(ui_url, path)
    names = [name.lower() for name, _ in headers]
    assert got == status
    assert ("X-Content-Type-Options", "nosniff") in headers
    assert ("Cache-Control", "no-store") in headers
    assert names.count("x-content-type-options") == names.count("cache-control") == 1


def test_the_stylesheet_is_served_by_the_package(ui_url: str) -> None:
    status, headers, body = get(ui_url + "/ui/static/style.css")
    assert status == 200 and headers["Content-Type"].startswith("text/css")
    assert headers["Cache-Control"] == "max-age=3600"  # its own, not the default no-store
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert b".finding" in body and b"url(" not in body  # nothing fetched from elsewhere


def test_the_outcome_script_is_served_and_writes_text_only(ui_url: str) -> None:
    status, headers, body = get(ui_url + "/ui/static/outcome.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert b"innerHTML" not in body and b"eval(" not in body and b"http" not in body
    assert b'"Content-Type": "application/json"' in body  # what the feedback check requires
    assert get(ui_url + "/ui/static/other.js")[0] == 404


@pytest.mark.parametrize("name", ["style.css", "outcome.js"])
def test_a_static_file_takes_a_trailing_slash_as_every_path(ui_url: str, name: str) -> None:
    """docs/api.md: every path, the API's and the web view's, takes trailing slashes. The
    static files' route alone did not: ``/ui/static/style.css/`` was a 404."""
    plain = get(ui_url + f"/ui/static/{name}")
    slashed = get(ui_url + f"/ui/static/{name}/")
    assert slashed[0] == plain[0] == 200 and slashed[2] == plain[2]


def test_filters_are_the_results_api_s(ui_url: str) -> None:
    _, _, failed = get(ui_url + "/ui/?passed=false&detector=loop:repeated_call")
    assert GUIDE_ID.encode() in failed and HOSTILE_ID.encode() in failed
    _, _, agent = get(ui_url + "/ui/?agent=docs-fixer")
    assert GUIDE_ID.encode() in agent and HOSTILE_ID.encode() not in agent
    _, _, none = get(ui_url + "/ui/?passed=true")
    assert GUIDE_ID.encode() not in none and b"No run matches" in none
    status, _, bad = get(ui_url + "/ui/?passed=maybe")
    assert status == 400 and b"passed: must be true or false" in bad
    status, _, bad = get(ui_url + "/ui/?evil=1")
    assert status == 400 and b"evil: unknown parameter" in bad


def test_a_long_query_is_read_whole_or_refused_as_on_the_api(ui_url: str) -> None:
    """The pages cut a query at 4,096 characters and parsed the rest: a filter past the cut
    was dropped and the page listed runs it excludes (200), where the API answered 414."""
    blanks = "agent=&" * 600  # a form's blank fields: 4,200 characters the page ignores
    status, _, page = get(ui_url + "/ui/?" + blanks + "passed=true")
    assert status == 200 and GUIDE_ID.encode() not in page and b"No run matches" in page
    longer = "agent=&" * (MAX_QUERY_BYTES // 7 + 1) + "passed=true"
    for path in ("/ui/", "/ui/sessions", "/ui/issues/iss-1/runs", "/v1/evaluations",
                 "/v1/sessions", "/v1/issues/iss-1/runs", "/healthz"):
        status, _, body = get(ui_url + path + "?" + longer)
        assert status == 414, path
        assert json.loads(body) == {"error": f"query string longer than {MAX_QUERY_BYTES} "
                                             "bytes"}, path
    at_most = "&" * (MAX_QUERY_BYTES - len("passed=true")) + "passed=true"
    status, _, page = get(ui_url + "/ui/?" + at_most)
    assert status == 200 and b"No run matches" in page


def test_pages_follow_the_cursor(ui_url: str) -> None:
    _, _, first = get(ui_url + "/ui/?limit=1")
    assert first.count(b'href="/ui/runs/') == 1 and b'rel="next"' in first
    cursor = first.split(b"cursor=")[1].split(b'"')[0].decode()
    _, _, second = get(ui_url + f"/ui/?limit=1&cursor={cursor}")
    assert second.count(b'href="/ui/runs/') == 1 and b"first page" in second
    shown = {p.split(b'href="/ui/runs/')[1][:32] for p in (first, second)}
    assert shown == {GUIDE_ID.encode(), HOSTILE_ID.encode()}


def test_unknown_runs_and_steps_are_404(ui_url: str) -> None:
    assert get(ui_url + "/ui/runs/" + "f" * 32)[0] == 404
    assert get(ui_url + f"/ui/runs/{GUIDE_ID}/steps/999")[0] == 404
    assert get(ui_url + "/ui/runs/../../etc/passwd")[0] == 404


def test_behind_the_read_token_bearer_or_basic(ui_store: Store) -> None:
    config = AdminConfig(endpoint="127.0.0.1:0", read_tokens={"grafana": "s3cret-read"},
                         trace_url="http://jaeger.example:16686/trace/{trace_id}")
    with admin(ui_store, None, config) as url:
        status, headers, _ = get(url + "/ui/")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic ")
        assert get(url + "/ui/", basic="wrong")[0] == 401
        assert get(url + "/ui/", token="s3cret-read")[0] == 200
        status, _, body = get(url + f"/ui/runs/{GUIDE_ID}", basic="s3cret-read")
        assert status == 200
        assert f'href="http://jaeger.example:16686/trace/{GUIDE_ID}"'.encode() in body
        assert get(url + "/v1/evaluations", basic="s3cret-read")[0] == 401  # API: Bearer


def test_a_hostile_run_is_escaped_and_bounded(ui_url: str) -> None:
    status, _, body = get(ui_url + f"/ui/runs/{HOSTILE_ID}")
    assert status == 200
    assert len(body) < 1_000_000  # a 20 MB name, tool output and critique in it
    assert b"<script>" not in body and b"<img" not in body and b"<svg" not in body
    assert b"&lt;script&gt;window.__pwned" in body
    assert b'href="javascript:' not in body and b"onerror=\"" not in body
    assert b"\x1b" not in body and "\u009b".encode() not in body  # shown as \x1b, \x9b
    assert b"\\x1b]8;;javascript:alert(1)" in body
    assert b"characters recorded, 4,096 kept" in body
    _, _, listing = get(ui_url + "/ui/")
    assert len(listing) < 200_000 and b"<script>" not in listing
    _, _, issues = get(ui_url + "/ui/issues")
    assert b"&lt;script&gt;" in issues and b'href="/ui/runs/javascript' not in issues


def test_a_trace_thousands_of_spans_deep_renders_flat() -> None:
    from otel_eval.outputs.ui.run import tree
    from otel_eval.outputs.ui.runview import MAX_DEPTH, run_page

    depth = 5000
    steps = [{"index": i, "span_id": f"{i + 1:016x}", "parent_span_id": f"{i:016x}" if i
              else None, "kind": "chain", "name": f"s{i}", "status": "ok"}
             for i in range(depth)]
    body = {"trace_id": "e" * 32, "status": "complete", "steps": steps, "verdict": None,
            "findings": [{"detector": "loop", "kind": "x", "severity": "error",
                          "message": "deep", "step_indexes": [depth - 1]}]}
    page = run_page(tree(body), None)
    assert page.count('<section id="step-') == depth
    assert f'class="step d{MAX_DEPTH} k-chain has-findings"' in page  # indentation capped
    assert page.count("<section") == depth  # siblings, not nested


def test_an_issue_s_share_over_the_runs_is_a_line_with_its_numbers_in_words() -> None:
    from otel_eval.outputs.ui.issues import issues_page

    issue = {"issue_id": "iss_1", "title": "t", "share": 0.3,
             "history": [[1.0, 0.1], [2.0, 0.0], ["x", 0.5], [3.0, float("nan")],
                         [4.0, 7.0], [5.0, 0.3]]}
    page = issues_page({"issues": [issue], "generated_at": 5.0, "window_s": 3600})
    svg = page[page.index("<svg"):page.index("</svg>")]
    points = svg.split('points="', 1)[1].split('"', 1)[0].split()
    assert len(points) == 5  # the NaN is dropped; the non-number time is kept (not drawn)
    assert "10.0 % to 30.0 %, peak 100.0 %" in svg  # 7.0 is clamped to a share of 1
    lone = issues_page({"issues": [{**issue, "history": [[1.0, 0.1]]}]})
    assert "<svg" not in lone  # one run is no line


@pytest.mark.parametrize(("path", "parameter"), [
    (f"/v1/evaluations/{GUIDE_ID}?revision=0", "revision"),
    ("/v1/evaluations/" + "f" * 32 + "?fields=verdict", "fields"),
    ("/v1/issues?service=travel", "service"), ("/v1/issues/?agent=", "agent"),
    ("/v1/calibration?agent=planner", "agent")])
def test_a_path_that_takes_no_parameter_refuses_one(ui_url: str, path: str,
                                                    parameter: str) -> None:
    """docs/api.md: a bad or unknown parameter is a 400 naming it, as /v1/sessions/{id}
    answers. These paths took any and read none: a dashboard's /v1/issues?service=travel
    got every service's issues, as if filtered."""
    status, _, body = _exchange(ui_url, "GET", path)
    answer = json.loads(body)
    assert (status, answer["parameter"]) == (400, parameter), answer
    assert answer["error"].startswith(f"{parameter}: unknown parameter")


def _exchange(url: str, method: str, path: str, **headers: str
              ) -> tuple[int, dict[str, str], bytes]:
    """(status, headers without Date, body) of one request on its own connection."""
    conn = http.client.HTTPConnection(urlsplit(url).netloc, timeout=30)
    try:
        conn.request(method, path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()  # http.client reads no body after HEAD
        return resp.status, {k: v for k, v in resp.getheaders() if k != "Date"}, body
    finally:
        conn.close()


@pytest.mark.parametrize("path", [
    "/healthz", "/readyz", "/metrics", "/v1/evaluations", f"/v1/evaluations/{GUIDE_ID}",
    "/v1/evaluations/" + "f" * 32, "/v1/issues", "/ui/", f"/ui/runs/{GUIDE_ID}",
    "/ui/issues", "/ui/static/style.css", "/ui/nothing", "/v1/nothing"])
def test_head_is_get_without_a_body(ui_url: str, path: str) -> None:
    """HEAD on any path was 405 "Allow: GET, POST" (the auth treated it as a read, no route
    served it): a load balancer's or uptime checker's HEAD /healthz read the service as
    broken. RFC 9110 9.3.2: the status and headers of GET, no body."""
    status, headers, body = _exchange(ui_url, "GET", path)
    assert _exchange(ui_url, "HEAD", path) == (status, headers, b"")
    assert headers["Content-Length"] == str(len(body))


def test_head_is_authorized_as_a_read(ui_store: Store) -> None:
    config = AdminConfig(endpoint="127.0.0.1:0", read_tokens={"grafana": "s3cret-read"})
    with admin(ui_store, None, config) as url:
        assert _exchange(url, "HEAD", "/healthz")[0] == 200  # a public path
        status, headers, body = _exchange(url, "HEAD", "/ui/")
        assert (status, body) == (401, b"") and headers["WWW-Authenticate"].startswith("Basic")
        assert _exchange(url, "HEAD", "/v1/evaluations")[0] == 401
        bearer = {"Authorization": "Bearer s3cret-read"}
        assert _exchange(url, "HEAD", "/ui/", **bearer)[:3:2] == (200, b"")
        assert _exchange(url, "HEAD", "/v1/evaluations", **bearer)[0] == 200
