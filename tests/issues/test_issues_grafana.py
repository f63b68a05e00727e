"""Grafana annotations against a real HTTP server on 127.0.0.1:0 checking the contract."""

import json
import socketserver
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from issue_fixtures import window

from otel_eval.outputs.issues.config import GrafanaConfig, IssuesConfig
from otel_eval.outputs.issues.grafana import GrafanaAnnotator, annotation_body
from otel_eval.outputs.issues.result import Issue, IssueEvent
from otel_eval.outputs.issues.tracker import IssueTracker

TOKEN = "glsa_test_token"


class _Grafana(BaseHTTPRequestHandler):
    received: list[dict[str, Any]]
    problems: list[str]
    status = 200

    def do_POST(self) -> None:
        if self.path != "/api/annotations":
            self.problems.append(f"path {self.path}")
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.problems.append("missing bearer token")
        if self.headers.get("Content-Type") != "application/json":
            self.problems.append("content type")
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append(body)
        answer = json.dumps({"message": "Annotation added", "id": len(self.received)}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass


@pytest.fixture
def grafana() -> Iterator[tuple[str, type[_Grafana]]]:
    handler = type("Handler", (_Grafana,), {"received": [], "problems": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _config(url: str) -> IssuesConfig:
    return IssuesConfig(share_jump=0.1, grafana=GrafanaConfig(
        url=url, token=TOKEN, dashboard_uid="otel-eval-issues", panel_id=7))


def test_new_issues_and_share_jumps_are_annotated(grafana: tuple[str, type[_Grafana]]) -> None:
    url, handler = grafana
    cfg = _config(url)
    annotator = GrafanaAnnotator(cfg.grafana)
    tracker = IssueTracker(cfg, sqlite3.connect(":memory:"), annotator=annotator)
    evs = window(12)
    tracker.run([*window(10, with_auth=False), evs[0], evs[3]], now=1_700_000_000.5)
    assert handler.problems == []
    assert len(handler.received) == 3 and annotator.posted == 3
    for body in handler.received:
        assert set(body) == {"dashboardUID", "panelId", "time", "tags", "text"}
        assert body["dashboardUID"] == "otel-eval-issues" and body["panelId"] == 7
        assert body["time"] == 1_700_000_000_500
        assert {"otel-eval", "issue", "event:new"} <= set(body["tags"])
        assert any(t.startswith("severity:") for t in body["tags"])
        assert "status=new" in body["text"]
        assert any(t.startswith("issue:iss_") for t in body["tags"])
        assert body["text"].startswith("New issue (")
    tracker.run(evs, now=1_700_000_060.0)  # auth share 0.2 -> 0.33: a jump
    (jump,) = handler.received[3:]
    assert "event:share_jump" in jump["tags"] and "node:searcher" in jump["tags"]
    assert "20% -> 33%" in jump["text"] and jump["time"] == 1_700_000_060_000


def test_grafana_errors_are_counted_not_raised(grafana: tuple[str, type[_Grafana]],
                                               caplog: pytest.LogCaptureFixture) -> None:
    url, handler = grafana
    handler.status = 403
    annotator = GrafanaAnnotator(_config(url).grafana)
    tracker = IssueTracker(_config(url), sqlite3.connect(":memory:"), annotator=annotator)
    result = tracker.run(window(6), now=1.0)
    assert len(result.issues) == 3 and annotator.failures == 3 and annotator.posted == 0
    assert "grafana annotation" in caplog.text


def test_unreachable_grafana_is_counted() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Grafana)
    port = server.server_address[1]
    server.server_close()  # nothing listens there any more
    annotator = GrafanaAnnotator(GrafanaConfig(url=f"http://127.0.0.1:{port}", timeout_s=2.0))
    tracker = IssueTracker(IssuesConfig(), sqlite3.connect(":memory:"), annotator=annotator)
    tracker.run(window(6), now=1.0)
    assert annotator.failures == 1  # and no more tries in that run: Grafana is down


def test_annotator_needs_a_url() -> None:
    with pytest.raises(ValueError, match="url"):
        GrafanaAnnotator(GrafanaConfig())


def test_annotations_link_to_the_issue_and_its_runs_in_the_web_view(
        grafana: tuple[str, type[_Grafana]]) -> None:
    url, handler = grafana
    cfg = IssuesConfig(grafana=GrafanaConfig(url=url, token=TOKEN,
                                             otel_eval_url="https://otel-eval.example:8888/"))
    tracker = IssueTracker(cfg, sqlite3.connect(":memory:"),
                           annotator=GrafanaAnnotator(cfg.grafana))
    tracker.run(window(10), now=1_700_000_000.0)
    assert handler.received and handler.problems == []
    for body in handler.received:
        issue_id = next(t for t in body["tags"] if t.startswith("issue:"))[len("issue:"):]
        assert f"open: https://otel-eval.example:8888/ui/issues#issue-{issue_id}" in body["text"]
        # a browser's page (behind the read token it asks for), not the JSON API's answer
        # (which a browser cannot send a Bearer token to: 401 under admin tokens)
        assert (f"all runs: https://otel-eval.example:8888/ui/issues/{issue_id}/runs"
                in body["text"])
        assert "exemplar traces: https://otel-eval.example:8888/ui/runs/" in body["text"]


def test_annotations_of_two_services_same_named_agents_name_their_service() -> None:
    """An agent node is a name within its service: the new issues of service search's
    planner and of billing's (two issues with issues.per_node) were annotated alike, "New
    issue (node / planner)" tagged node:planner, both. Each says its service now."""
    def event(issue_id: str, service: str) -> IssueEvent:
        return IssueEvent("new", Issue(
            issue_id=issue_id, level="node", node="planner", title="looped", description="d",
            share=0.2, trend=None, critiques=2, traces=2, exemplars=(), agents=("planner",),
            first_seen=0.0, new=True, nodes=(("node", "planner", 2, 2, service),),
            service_agents=((service, "planner"),)), None)

    search, billing = (annotation_body(event(i, s), 1.0, GrafanaConfig(url="http://g"))
                       for i, s in (("iss_1", "search"), ("iss_2", "billing")))
    assert search["text"].startswith("New issue (node / planner, service search): looped")
    assert billing["text"].startswith("New issue (node / planner, service billing): looped")
    assert "service:search" in search["tags"] and "service:billing" in billing["tags"]
    system = annotation_body(_events(1)[0], 1.0, GrafanaConfig(url="http://g"))
    assert system["text"].startswith("New issue (system): problem 1")  # no service known
    assert not any(t.startswith("service:") for t in system["tags"])


def _events(n: int) -> list[IssueEvent]:
    """``n`` new-issue events, issue k with share k / n (the largest last)."""
    return [IssueEvent("new", Issue(
        issue_id=f"iss_{k:010x}", level="system", node="", title=f"problem {k}",
        description="d", share=k / n, trend=None, critiques=2, traces=2, exemplars=(),
        agents=(), first_seen=0.0, new=True), None) for k in range(1, n + 1)]


def test_a_run_posts_at_most_max_annotations_the_largest_first(
        grafana: tuple[str, type[_Grafana]]) -> None:
    """A flood of new issues is not one request each while the run lock is held: past
    issues.grafana.max_annotations the rest are counted as not posted, with the reason."""
    url, handler = grafana
    annotator = GrafanaAnnotator(GrafanaConfig(url=url, token=TOKEN, max_annotations=3))
    outcome = annotator.annotate(_events(10), now=1.0)
    assert len(handler.received) == 3 and handler.problems == []
    assert [b["tags"][-1] for b in handler.received] == [
        f"issue:iss_{k:010x}" for k in (10, 9, 8)]
    assert (outcome.posted, outcome.failed) == (3, 0)
    assert outcome.skipped == {"max_annotations": 7, "grafana_unreachable": 0}


class _Hangup(socketserver.BaseRequestHandler):
    """Accepts a connection and closes it unanswered (a Grafana going down), counting."""

    connections: list[int]

    def handle(self) -> None:
        self.connections.append(1)


@pytest.fixture
def hangup() -> Iterator[tuple[str, list[int]]]:
    handler = type("Hangup", (_Hangup,), {"connections": []})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.connections
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_no_more_posts_in_a_run_after_a_connection_failure(
        hangup: tuple[str, list[int]]) -> None:
    """Grafana down: one attempt, not one timeout per event; the rest counted with why."""
    url, connections = hangup
    annotator = GrafanaAnnotator(GrafanaConfig(url=url, max_annotations=5))
    outcome = annotator.annotate(_events(8), now=1.0)
    assert len(connections) == 1
    assert (outcome.posted, outcome.failed) == (0, 1)
    assert outcome.skipped == {"max_annotations": 3, "grafana_unreachable": 4}
    assert annotator.annotate(_events(2), now=2.0).failed == 1  # the next run tries again
    assert len(connections) == 2



class _Garbled(_Hangup):
    def handle(self) -> None:
        self.connections.append(1)
        self.request.recv(65536)
        self.request.sendall(b"NOT HTTP AT ALL\r\n\r\n")


def test_a_reply_that_is_no_http_counts_as_unreachable_and_raises_nothing() -> None:
    """A garbled reply (``BadStatusLine``, an ``http.client.HTTPException``, no OSError)
    escaped ``annotate`` and failed the issues run; it is Grafana unreachable, counted."""
    handler = type("Garbled", (_Garbled,), {"connections": []})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        outcome = GrafanaAnnotator(GrafanaConfig(url=url, max_annotations=5)).annotate(
            _events(3), now=1.0)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert len(handler.connections) == 1
    assert (outcome.posted, outcome.failed) == (0, 1)
    assert outcome.skipped == {"max_annotations": 0, "grafana_unreachable": 2}

def test_an_http_error_does_not_stop_the_run(grafana: tuple[str, type[_Grafana]]) -> None:
    url, handler = grafana
    handler.status = 500
    outcome = GrafanaAnnotator(GrafanaConfig(url=url, token=TOKEN)).annotate(_events(4), 1.0)
    assert len(handler.received) == 4 and (outcome.posted, outcome.failed) == (0, 4)
    assert outcome.skipped == {"max_annotations": 0, "grafana_unreachable": 0}
