"""The admin port in a browser's world (issue 33, finding 10), against a real admin server on
127.0.0.1:0 (and 0.0.0.0:0): with no tokens, a DNS-rebound name (Host: attacker.example:8888)
read /v1/evaluations and /ui/; a cross-site page set a run's outcome with a text/plain POST."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from otel_eval.app.admin import AdminApi, AdminConfig, AdminServer
from otel_eval.base.configcheck import FieldErrors
from otel_eval.receive.security import host_name

TRACE = "ab" * 16
FEEDBACK = json.dumps({"trace_id": TRACE, "outcome": "failure"}).encode()


class Api:
    def __init__(self) -> None:
        self.outcomes: list[tuple[str, str]] = []

    def feedback(self, trace_id: str, outcome: str) -> dict[str, Any]:
        self.outcomes.append((trace_id, outcome))
        return {"trace_id": trace_id}


def _server(api: Api, config: AdminConfig) -> AdminServer:
    admin = AdminApi(CollectorRegistry(), lambda q: None,  # type: ignore[arg-type,return-value]
                     lambda t: {"trace_id": t}, api.feedback, lambda: True, lambda: True)
    server = AdminServer(config.endpoint, admin, config)
    server.start()
    return server


@pytest.fixture
def open_admin() -> Iterator[tuple[AdminServer, Api]]:
    api = Api()
    server = _server(api, AdminConfig(endpoint="127.0.0.1:0"))
    yield server, api
    server.stop()


def _send(port: int, method: str, path: str, body: bytes | None = None,
          **headers: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name.replace("_", "-"), value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("host", ["localhost", "localhost:8888", "127.0.0.1:1",
                                  "[::1]:8888", "[::1]", "LOCALHOST:80", "127.0.0.2",
                                  # a page cannot rebind an address: only this listener
                                  # served a page there (and probes name the pod's IP)
                                  "10.0.0.1:8888", "[fd00::1]:80"])
def test_loopback_hosts_are_served(open_admin: tuple[AdminServer, Api], host: str) -> None:
    server, _ = open_admin
    assert _send(server.port, "GET", f"/v1/evaluations/{TRACE}", Host=host)[0] == 200


@pytest.mark.parametrize("host", ["attacker.example:8888", "attacker.example",
                                  "127.0.0.1.attacker.example", "localhost.attacker.example:80",
                                  "[::1].evil", "10.0.0.1.nip.io", ""])
def test_rebound_names_read_nothing(open_admin: tuple[AdminServer, Api], host: str) -> None:
    _refused_everywhere(*open_admin, host)


def _refused_everywhere(server: AdminServer, api: Api, host: str) -> None:
    """Every path of the API, the web view and the probes is 421 for ``host``."""
    for path in (f"/v1/evaluations/{TRACE}", "/ui/", "/metrics", "/healthz"):
        code, body = _send(server.port, "GET", path, Host=host)
        assert code == 421 and TRACE not in body.decode(), (path, code)
    code, _ = _send(server.port, "POST", "/v1/feedback", FEEDBACK, Host=host,
                    Content_Type="application/json")
    assert code == 421 and api.outcomes == []


@pytest.mark.parametrize("host", ["attacker.example:8888", "otel-eval.internal"])
def test_a_listener_beyond_loopback_without_tokens_checks_the_host_too(host: str) -> None:
    """The container case (0.0.0.0 with allow_insecure_non_loopback, published on 127.0.0.1):
    the Host check used to apply to loopback listeners only, so a rebound name read results
    and set outcomes here."""
    api = Api()
    server = _server(api, AdminConfig(endpoint="0.0.0.0:0", allow_insecure_non_loopback=True))
    try:
        _refused_everywhere(server, api, host)
        assert _send(server.port, "GET", f"/v1/evaluations/{TRACE}",
                     Host=f"localhost:{server.port}")[0] == 200
    finally:
        server.stop()


def test_allowed_hosts_are_served_without_tokens() -> None:
    api = Api()
    server = _server(api, AdminConfig(endpoint="0.0.0.0:0", allow_insecure_non_loopback=True,
                                      allowed_hosts=["otel-eval.monitoring.svc", "Grafana"]))
    try:
        for host in ("otel-eval.monitoring.svc:8888", "OTEL-EVAL.monitoring.svc", "grafana"):
            assert _send(server.port, "GET", f"/v1/evaluations/{TRACE}", Host=host)[0] == 200, host
        code, _ = _send(server.port, "POST", "/v1/feedback", FEEDBACK, Host="grafana:3000",
                        Content_Type="application/json")
        assert code == 200 and api.outcomes == [(TRACE, "failure")]
        api.outcomes.clear()
        _refused_everywhere(server, api, "monitoring.svc")
        _refused_everywhere(server, api, "otel-eval.monitoring.svc.attacker.example")
    finally:
        server.stop()


@pytest.mark.parametrize("bad", ["", "http://otel-eval", "otel-eval:8888", "*", "a..b",
                                 "otel eval", "otel-eval/ui"])
def test_allowed_hosts_are_names(bad: str) -> None:
    with pytest.raises(FieldErrors, match="allowed_hosts"):
        AdminConfig(allowed_hosts=["ok", bad])


def test_with_tokens_any_host_is_left_to_the_tokens() -> None:
    """Beyond loopback; on a loopback listener the public paths check the Host (below)."""
    api = Api()
    server = _server(api, AdminConfig(endpoint="0.0.0.0:0", read_tokens={"r": "t" * 32},
                                      allow_insecure_non_loopback=True))
    try:
        assert _send(server.port, "GET", "/healthz", Host="otel-eval.internal:8888")[0] == 200
        assert _send(server.port, "GET", f"/v1/evaluations/{TRACE}",
                     Host="otel-eval.internal")[0] == 401
    finally:
        server.stop()


def test_feedback_needs_json_from_this_origin(open_admin: tuple[AdminServer, Api]) -> None:
    server, api = open_admin
    own = f"127.0.0.1:{server.port}"

    def post(**headers: str) -> int:
        return _send(server.port, "POST", "/v1/feedback", FEEDBACK, Host=own, **headers)[0]

    # what a page on another site can send without a CORS preflight
    assert post(Content_Type="text/plain", Origin="http://attacker.example") == 415
    assert post(Content_Type="text/plain;charset=UTF-8") == 415
    assert post(Content_Type="application/x-www-form-urlencoded") == 415
    assert post() == 415
    # JSON, but marked cross-site by the browser, or from another origin
    assert post(Content_Type="application/json", Sec_Fetch_Site="cross-site") == 403
    assert post(Content_Type="application/json", Sec_Fetch_Site="same-site") == 403
    assert post(Content_Type="application/json", Origin="http://attacker.example") == 403
    assert post(Content_Type="application/json", Origin=f"http://127.0.0.1:{server.port + 1}",
                ) == 403
    assert post(Content_Type="application/json", Origin="null") == 403
    assert api.outcomes == []
    # a script, curl, or the page itself
    assert post(Content_Type="application/json") == 200
    assert post(Content_Type="Application/JSON; charset=utf-8", Sec_Fetch_Site="same-origin",
                Origin=f"http://{own}") == 200
    assert post(Content_Type="application/json", Sec_Fetch_Site="none") == 200
    assert api.outcomes == [(TRACE, "failure")] * 3


@pytest.mark.parametrize("origin", ["http://[::1", "http://[::1]x:80", "http://a]b",
                                    "http://[fe80::1%eth0"])
def test_an_origin_that_is_no_url_is_refused_not_a_500(open_admin: tuple[AdminServer, Api],
                                                        origin: str) -> None:
    """An ``Origin`` urlsplit cannot read (an unclosed IPv6 bracket) raised ValueError out of
    the CSRF check: a 500 with a traceback logged, where a refusal is due."""
    server, api = open_admin
    status, body = _send(server.port, "POST", "/v1/feedback", FEEDBACK,
                         Host=f"127.0.0.1:{server.port}", Content_Type="application/json",
                         Origin=origin)
    assert status == 403 and b"Origin" in body
    assert api.outcomes == []


@pytest.mark.parametrize(("value", "name"), [
    ("localhost:8888", "localhost"), ("[::1]:80", "::1"), ("[::1]", "::1"),
    ("127.0.0.1", "127.0.0.1"), ("Example.COM:", "example.com"), ("a:b", "a:b")])
def test_host_name(value: str, name: str) -> None:
    assert host_name(value) == name


def test_a_reader_and_a_writer_of_one_name_both_hold_their_tokens() -> None:
    """A token's name is its sender's identity, so one team may hold a read token and a write
    token under the same name. The readers were ``{**read_tokens, **write_tokens}``: the write
    token took the read token's place and the read token was a 401 on every read."""
    api = Api()
    read, write = "r" * 32, "w" * 32
    server = _server(api, AdminConfig(endpoint="127.0.0.1:0", read_tokens={"ci": read},
                                      write_tokens={"ci": write}))
    try:
        path = f"/v1/evaluations/{TRACE}"
        assert _send(server.port, "GET", path, Authorization=f"Bearer {read}")[0] == 200
        assert _send(server.port, "GET", path, Authorization=f"Bearer {write}")[0] == 200
        assert _send(server.port, "POST", "/v1/feedback", FEEDBACK,
                     Authorization=f"Bearer {read}", Content_Type="application/json")[0] == 403
        assert _send(server.port, "POST", "/v1/feedback", FEEDBACK,
                     Authorization=f"Bearer {write}", Content_Type="application/json")[0] == 200
        assert api.outcomes == [(TRACE, "failure")]
    finally:
        server.stop()


def test_the_page_behind_a_proxy_that_rewrites_host_records_an_outcome(
        open_admin: tuple[AdminServer, Api]) -> None:
    """TLS in front (nginx ``proxy_pass http://127.0.0.1:8888``, whose default Host is the
    upstream's): the run page at https://otel-eval.example posts with ``Origin:
    https://otel-eval.example`` and ``Sec-Fetch-Site: same-origin`` while Host is
    ``127.0.0.1:8888``. The Origin was compared with Host alone: every outcome from the form
    was a 403. The browser's Sec-Fetch-Site (a page cannot set it) decides when it is sent."""
    server, api = open_admin
    status, body = _send(server.port, "POST", "/v1/feedback", FEEDBACK,
                         Host=f"127.0.0.1:{server.port}", Content_Type="application/json",
                         Origin="https://otel-eval.example", Sec_Fetch_Site="same-origin")
    assert status == 200, body
    assert api.outcomes == [(TRACE, "failure")]
    # a browser that marks it from elsewhere is still refused, whatever its Origin
    for site in ("cross-site", "same-site"):
        assert _send(server.port, "POST", "/v1/feedback", FEEDBACK,
                     Host=f"127.0.0.1:{server.port}", Content_Type="application/json",
                     Origin=f"http://127.0.0.1:{server.port}", Sec_Fetch_Site=site)[0] == 403
    # a browser without Fetch Metadata: the Origin must still name the Host
    assert _send(server.port, "POST", "/v1/feedback", FEEDBACK,
                 Host=f"127.0.0.1:{server.port}", Content_Type="application/json",
                 Origin="https://otel-eval.example")[0] == 403
    assert api.outcomes == [(TRACE, "failure")]


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize("authorization", [None, "r" * 32, "w" * 32])
@pytest.mark.parametrize(("path", "allow"), [
    ("/v1/feedback", "POST"), ("/v1/evaluations/", "GET, HEAD"),
    (f"/v1/evaluations/{TRACE}", "GET, HEAD"), ("/nowhere", "GET, HEAD, POST")])
def test_a_method_not_served_is_405_with_tokens_too(method: str, authorization: str | None,
                                                    path: str, allow: str) -> None:
    """docs/api.md: a method no route serves is a 405 with Allow. With tokens the token
    check came first: a PUT was a 401 (no token) or 403 (a read token, "this token may not
    write"), as if a token could make it served. Its Allow named every method of the
    endpoint, GET on /v1/feedback and POST on /v1/evaluations among them, where a client
    that followed it got another 405: RFC 9110 15.5.6 lists the target's methods (an
    unknown path: those of the endpoint)."""
    api = Api()
    server = _server(api, AdminConfig(endpoint="127.0.0.1:0", read_tokens={"r": "r" * 32},
                                      write_tokens={"w": "w" * 32}))
    try:
        headers = {} if authorization is None else {"Authorization": f"Bearer {authorization}"}
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            conn.request(method, path, FEEDBACK,
                         {"Content-Type": "application/json", **headers})
            resp = conn.getresponse()
            resp.read()
            assert (resp.status, resp.getheader("Allow")) == (405, allow)
            assert resp.getheader("Connection") == "close"  # its body was not read
        finally:
            conn.close()
        assert api.outcomes == []
    finally:
        server.stop()


def test_with_tokens_a_loopback_listener_serves_its_public_paths_to_no_rebound_name() -> None:
    """With admin tokens the Host check was off, so a page whose name was rebound to
    127.0.0.1 read the paths served without a token: /metrics names services, agents and
    issues and carries trace-id exemplars. On a loopback listener (its scrapers are on this
    host: localhost, an address) a public path now takes the Host check too; the token paths
    are left to the tokens, and a listener beyond loopback (scraped by a Service's or a
    container's name) is unchanged."""
    api = Api()
    token = "t" * 32
    server = _server(api, AdminConfig(endpoint="127.0.0.1:0", read_tokens={"r": token},
                                      allowed_hosts=["otel-eval.local"]))
    try:
        for path in ("/metrics", "/healthz", "/readyz/"):
            assert _send(server.port, "GET", path, Host="attacker.example:8888")[0] == 421
            for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}",
                         "otel-eval.local"):
                assert _send(server.port, "GET", path, Host=host)[0] == 200, (path, host)
        # the paths that need a token: the token decides, whatever the Host
        assert _send(server.port, "GET", f"/v1/evaluations/{TRACE}", Host="otel-eval.internal",
                     Authorization=f"Bearer {token}")[0] == 200
    finally:
        server.stop()
    server = _server(api, AdminConfig(endpoint="0.0.0.0:0", read_tokens={"r": token},
                                      allow_insecure_non_loopback=True))
    try:
        assert _send(server.port, "GET", "/metrics", Host="otel-eval:8888")[0] == 200
    finally:
        server.stop()


# What nginx sends as Host for each variable, for a browser at http://otel-eval.corp:8080
# (nginx: ``$host`` is the name without its port; ``$http_host`` the Host as the browser sent
# it; ``$proxy_host`` the upstream's, nginx's default)
_NGINX_HOST = {"$host": "otel-eval.corp", "$http_host": "otel-eval.corp:8080",
               "$host:$server_port": "otel-eval.corp:8080", "$proxy_host": "127.0.0.1:8888"}


def test_the_documented_proxy_fix_records_an_outcome_from_a_browser_without_fetch_metadata(
        ) -> None:
    """docs/transport-security.md's fix for a browser without Fetch Metadata (before 2023, or
    any browser at a plain-HTTP proxy beyond loopback: no secure context) behind a proxy
    was ``proxy_set_header Host $host``. nginx's ``$host`` has no port: behind a proxy on
    http://otel-eval.corp:8080 the page's ``Origin`` names port 8080 and the Host does not,
    so every outcome from the form was still a 403. The fix the page names must work."""
    text = " ".join((Path(__file__).parents[2] / "docs" / "transport-security.md")
                    .read_text(encoding="utf-8").split())
    said = text.partition("A browser without Fetch Metadata behind such a proxy")[2][:200]
    directive = re.search(r"proxy_set_header Host (\$[\w:$]+)", said)
    assert directive is not None, said
    api = Api()
    server = _server(api, AdminConfig(endpoint="127.0.0.1:0",
                                      allowed_hosts=["otel-eval.corp"]))
    try:
        status, body = _send(server.port, "POST", "/v1/feedback", FEEDBACK,
                             Host=_NGINX_HOST[directive.group(1)],
                             Content_Type="application/json",
                             Origin="http://otel-eval.corp:8080")
        assert status == 200, (directive.group(1), body)
        assert api.outcomes == [(TRACE, "failure")]
    finally:
        server.stop()


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("GET", "/v1/feedback", "POST"), ("HEAD", "/v1/feedback/", "POST"),
    ("POST", "/v1/evaluations", "GET, HEAD"), ("POST", "/healthz", "GET, HEAD")])
def test_a_path_served_for_other_methods_is_405_naming_them(
        open_admin: tuple[AdminServer, Api], method: str, path: str, allow: str) -> None:
    """A browser or a client that GETs ``/v1/feedback`` (or POSTs to a read path) was told
    404 "unknown path", as if the API had no such path; RFC 9110 15.5.6: a 405 whose
    ``Allow`` names the methods the path takes."""
    server, api = open_admin
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request(method, path, FEEDBACK if method == "POST" else None,
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        assert (resp.status, resp.getheader("Allow")) == (405, allow)
    finally:
        conn.close()
    assert api.outcomes == []
    assert _send(server.port, "GET", "/v1/nothing")[0] == 404  # unknown paths are still 404
