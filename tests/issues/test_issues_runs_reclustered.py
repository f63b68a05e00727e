"""Paging an issue's runs while the issues job re-clusters: GET /v1/issues/{id}/runs and
/ui/issues/{id}/runs on a real admin server (port 0) over a real IssuesJob (SQLite store and
catalogue), each clustering run called by hand at an injected time."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from issue_fixtures import window
from prometheus_client import CollectorRegistry
from support.clock import ManualClock

from otel_eval.app.admin import AdminApi, AdminConfig, AdminServer
from otel_eval.base.results import Evaluation, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.job import IssuesJob
from otel_eval.store import Store

T0 = 1_700_000_000.0
INTERVAL = 300.0


def _stored(body: dict[str, Any], at: float) -> Evaluation:
    steps = [Step(index=s["index"], span_id=s["span_id"], parent_span_id=None,
                  kind="llm", name="chat", node=s["node"]) for s in body["steps"]]
    traj = Trajectory(body["trace_id"], "otlp", "complete", steps, agent=body["agent"])
    return Evaluation(traj, [], Verdict(True, []), judge=body["judge"],
                      evaluated_at_ns=int(at * 1e9))


@dataclass
class Served:
    url: str
    store: Store
    job: IssuesJob
    clock: ManualClock

    def recluster(self, new_runs: list[dict[str, Any]]) -> None:
        """The job's next periodic run, with ``new_runs`` stored since the last one."""
        self.store.put_many(_stored(e, self.clock.now + 1) for e in new_runs)
        self.clock.advance(INTERVAL)
        assert self.job.run_once() is not None


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    store = Store(str(tmp_path / "otel-eval.db"))
    clock = ManualClock(T0)
    # runs 0x100.. first: the runs stored later (0x00..) sort before them
    store.put_many(_stored(e, T0 - 60) for e in window(30, offset=0x100))
    job = IssuesJob(IssuesConfig(), store.path, lambda ns: store.since(ns), CollectorRegistry(),
                    clock)
    assert job.run_once() is not None
    api = AdminApi(CollectorRegistry(), lambda _q: pytest.fail("query"), lambda _t: None,
                   lambda _t, _o: None, lambda: True, lambda: True,
                   issues=job.latest_json, issue_runs=job.runs)
    server = AdminServer("127.0.0.1:0", api, AdminConfig(endpoint="127.0.0.1:0"))
    server.start()
    try:
        yield Served(f"http://127.0.0.1:{server.port}", store, job, clock)
    finally:
        server.stop()
        job.close()
        store.close()


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _json(url: str) -> tuple[int, dict[str, Any]]:
    status, body = _get(url)
    return status, json.loads(body)


def _loop_issue(served: Served) -> tuple[str, list[str]]:
    """The issue every run has (the searcher's loop), and its runs as clustered."""
    latest = served.job.latest()
    assert latest is not None
    issue = max(latest.issues, key=lambda i: i.traces)
    return issue.issue_id, list(issue.trace_ids)


def test_paging_by_cursor_reads_one_clustering_run_through_reclustering(
        served: Served) -> None:
    """docs/api.md: pass ``next_cursor`` back as ``cursor``. Before, the pages were offsets
    into whatever run was last: a re-clustering between two pages (every
    ``issues.interval_s``) that put runs before the offset repeated the runs already
    listed, one that took some out skipped as many. Now a cursor names its clustering run
    (``generated_at``) and the position in it: the pages read that run to its end."""
    issue_id, first_runs = _loop_issue(served)
    base = f"{served.url}/v1/issues/{issue_id}/runs"
    status, page = _json(f"{base}?limit=7")
    assert status == 200 and page["runs"] == 30 and page["next_cursor"]
    generated_at, seen = page["generated_at"], list(page["trace_ids"])
    served.recluster(window(10))  # ten more runs of the issue, sorted before the first 30
    assert _loop_issue(served)[0] == issue_id and len(_loop_issue(served)[1]) == 40
    while page["next_cursor"] is not None:
        status, page = _json(f"{base}?limit=7&cursor={page['next_cursor']}")
        assert status == 200 and page["generated_at"] == generated_at, page
        seen += page["trace_ids"]
    assert seen == first_runs  # each run of the paged clustering once, none of the other's
    # a client paging by offset (the first form) reads the last run's list, as before
    status, page = _json(f"{base}?offset=7&limit=7")
    assert status == 200 and page["runs"] == 40 and page["generated_at"] > generated_at


def test_a_cursor_of_a_clustering_run_no_longer_kept_is_a_410_to_start_again(
        served: Served) -> None:
    """Two re-clusterings later the run a cursor pages is gone: a 410 that says so and
    names the last run, never a page of another list."""
    issue_id, _ = _loop_issue(served)
    base = f"{served.url}/v1/issues/{issue_id}/runs"
    _, page = _json(f"{base}?limit=7")
    served.recluster(window(5))
    served.recluster(window(5, offset=5))
    status, gone = _json(f"{base}?limit=7&cursor={page['next_cursor']}")
    latest = served.job.latest()
    assert latest is not None
    assert (status, gone["parameter"], gone["generated_at"]) == (
        410, "cursor", latest.generated_at), gone
    assert "start again" in gone["error"] and gone["error"].startswith("cursor: ")
    status, again = _json(base + "?limit=7")
    assert status == 200 and again["runs"] == 40


def test_the_web_views_next_runs_link_carries_the_cursor(served: Served) -> None:
    """/ui/issues/{id}/runs linked its next page by offset: a person paging an issue's runs
    across a re-clustering saw runs twice or never. Now "next runs" carries the cursor, and
    a cursor whose run is gone is a page that links the first page again."""
    served.recluster(window(90, offset=0x200))  # 120 runs: two pages of the web view's 100
    issue_id, first_runs = _loop_issue(served)
    assert len(first_runs) == 120
    status, first = _get(f"{served.url}/ui/issues/{issue_id}/runs")
    assert status == 200
    (link,) = re.findall(rb'href="(/ui/issues/[^"]+/runs\?[^"]+)"', first)
    assert b"cursor=" in link and b"offset=" not in link
    served.recluster(window(10))  # ten more runs, sorted before the 120
    status, second = _get(served.url + link.decode())
    assert status == 200 and b"runs 101-120 of 120" in second
    listed = re.findall(rb'href="/ui/runs/([0-9a-f]{32})"', first + second)
    assert [t.decode() for t in listed] == first_runs
    served.recluster(window(1, offset=10))
    status, gone = _get(served.url + link.decode())
    assert status == 410 and f'href="/ui/issues/{issue_id}/runs"'.encode() in gone


def test_two_clustering_runs_of_one_stamp_are_two_runs_to_a_cursor(served: Served) -> None:
    """Two clustering runs stamped alike (a coarse clock, or a re-run within its tick): a
    cursor named its run by ``generated_at`` alone and the second run replaced the first,
    so the first's cursor paged the second's list, silently (runs repeated or skipped).
    Now a cursor names its run by number as well: the first run's pages go on."""
    issue_id, first_runs = _loop_issue(served)
    base = f"{served.url}/v1/issues/{issue_id}/runs"
    _, page = _json(f"{base}?limit=7")
    seen = list(page["trace_ids"])
    served.store.put_many(_stored(e, served.clock.now) for e in window(10))
    assert served.job.run_once() is not None  # the clock has not moved: the same stamp
    assert len(_loop_issue(served)[1]) == 40
    while page["next_cursor"] is not None:
        status, page = _json(f"{base}?limit=7&cursor={page['next_cursor']}")
        assert status == 200, page
        seen += page["trace_ids"]
    assert seen == first_runs


def test_a_worker_without_a_clustering_run_says_why_its_runs_pages_are_empty(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a fleet (PostgreSQL store) one worker runs the issues job; the runs lists are its
    memory, not the store's. Another worker answered an issue's runs with "no issue X in
    the last clustering run", as if it had clustered and found no such issue. Now the
    404 says that another worker runs the job (and, before any run, that none ran yet)."""
    issue_id, _ = _loop_issue(served)
    monkeypatch.setattr(served.job._tracker, "leads", lambda: False)  # another worker leads
    served.clock.advance(INTERVAL)
    assert served.job.run_once() is None
    status, answer = _json(f"{served.url}/v1/issues/{issue_id}/runs")
    assert status == 404 and "another worker of the fleet runs the issues job" in (
        answer["error"]), answer
    status, page = _get(f"{served.url}/ui/issues/{issue_id}/runs")
    assert status == 404 and b"No clustering run on this worker: another worker" in page
