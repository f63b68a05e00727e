"""Every run of an issue, paginated: GET /v1/issues/{id}/runs and /ui/issues/{id}/runs on a
real admin server (port 0), over a real clustering result."""

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from issue_fixtures import window
from prometheus_client import CollectorRegistry

from otel_eval.app.admin import AdminApi, AdminConfig, AdminServer
from otel_eval.outputs.issues.result import IssuesResult, to_json, top_issue_gauge_samples
from otel_eval.outputs.issues.runs import issue_runs, page, run_ns
from otel_eval.outputs.issues.tracker import issues_offline
from otel_eval.store.query import decode_cursor, encode_cursor


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, IssuesResult]]:
    result = issues_offline(window(30), now=1.0)
    api = AdminApi(CollectorRegistry(), lambda _q: pytest.fail("query"), lambda _t: None,
                   lambda _t, _o: None, lambda: True, lambda: True,
                   issues=lambda: to_json(result, assignments=False),
                   issue_runs=lambda i, at: page((result,), i, at))
    server = AdminServer("127.0.0.1:0", api, AdminConfig(endpoint="127.0.0.1:0"))
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", result
    finally:
        server.stop()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_pages_hold_every_run_of_the_issue_once(served: tuple[str, IssuesResult]) -> None:
    url, result = served
    issue = max(result.issues, key=lambda i: i.traces)
    assert issue.traces == 30 > len(issue.exemplars)
    seen: list[str] = []
    offset: Any = 0
    while offset is not None:
        status, body = _get(f"{url}/v1/issues/{issue.issue_id}/runs?limit=7&offset={offset}")
        page = json.loads(body)
        assert status == 200 and page["runs"] == 30 and len(page["trace_ids"]) <= 7
        seen += page["trace_ids"]
        offset = page["next_offset"]
    assert seen == sorted(issue.trace_ids)


@pytest.mark.parametrize(("path", "status"), [
    ("/v1/issues/iss_unknown/runs", 404), ("/v1/issues/{id}/runs?limit=0", 400),
    ("/v1/issues/{id}/runs?limit=1001", 400), ("/v1/issues/{id}/runs?offset=-1", 400),
    ("/v1/issues/{id}/runs?limit=x", 400), ("/v1/issues/a%2Fb/runs", 404)])
def test_bad_requests(served: tuple[str, IssuesResult], path: str, status: int) -> None:
    url, result = served
    assert _get(url + path.replace("{id}", result.issues[0].issue_id))[0] == status


@pytest.mark.parametrize(("query", "parameter"), [
    ("limit=5&sort=desc", "sort"), ("limit=5&limit=1000", "limit"), ("limit=", "limit"),
    ("offset=", "offset"), ("offset=7&offset=0", "offset"), ("after=x", "after"),
    ("cursor=", "cursor"), ("cursor=x", "cursor"), ("cursor=MTox&offset=7", "offset")])
def test_a_parameter_it_cannot_use_is_a_400_naming_it(served: tuple[str, IssuesResult],
                                                      query: str, parameter: str) -> None:
    """docs/api.md: a bad ``offset`` or ``limit`` is a 400 as for ``/v1/evaluations``, which
    refuses an unknown, a repeated or an empty parameter. Here they were taken silently: an
    unknown one ignored (a client's typo, ``?ofset=100``, paged from 0 again), a repeated one
    read as its first value, an empty one as the default."""
    url, result = served
    status, body = _get(f"{url}/v1/issues/{result.issues[0].issue_id}/runs?{query}")
    answer = json.loads(body)
    assert (status, answer["parameter"]) == (400, parameter), answer
    assert answer["error"].startswith(f"{parameter}: ")


def test_a_cursor_without_its_runs_number_pages_no_run(served: tuple[str, IssuesResult]) -> None:
    """A cursor named its clustering run by ``generated_at`` alone (``NS:OFFSET``); now by
    its number too (``NS:RUN.OFFSET``). One of the earlier form names no run kept: a 410 to
    start again, never a page of a run that happens to share the stamp."""
    url, result = served
    issue_id = max(result.issues, key=lambda i: i.traces).issue_id
    status, body = _get(f"{url}/v1/issues/{issue_id}/runs?limit=7")
    cursor = json.loads(body)["next_cursor"]
    earlier = encode_cursor(run_ns(result), "7")
    assert decode_cursor(cursor, bool) == (run_ns(result), f"{result.run}.7")
    status, body = _get(f"{url}/v1/issues/{issue_id}/runs?limit=7&cursor={earlier}")
    assert status == 410 and json.loads(body)["parameter"] == "cursor"


def test_a_404_names_the_clustering_run_it_looked_in(served: tuple[str, IssuesResult]) -> None:
    """The 404 of an issue a run does not have said "in the last clustering run" also on a
    cursor's page, which is of the cursor's run (the last may be another one). Now each
    says which run it looked in, the API and the web view alike."""
    url, result = served
    issue_id = max(result.issues, key=lambda i: i.traces).issue_id
    _, body = _get(f"{url}/v1/issues/{issue_id}/runs?limit=7")
    cursor = json.loads(body)["next_cursor"]
    cursors_run = f"in the clustering run its cursor pages (generated_at {result.generated_at})"
    for path, said in [("?limit=7", "in the last clustering run"),
                       (f"?limit=7&cursor={cursor}", cursors_run)]:
        status, body = _get(f"{url}/v1/issues/iss_unknown/runs{path}")
        error = json.loads(body)["error"]
        assert status == 404 and error.startswith("no issue ") and error.endswith(said), error
        status, body = _get(f"{url}/ui/issues/iss_unknown/runs{path}")
        assert status == 404 and f" {said}.".encode() in body, path


def test_the_ui_links_the_runs_count_to_every_run(served: tuple[str, IssuesResult]) -> None:
    url, result = served
    issue = max(result.issues, key=lambda i: i.traces)
    _, listing = _get(url + "/ui/issues")
    link = f'href="/ui/issues/{issue.issue_id}/runs"'
    assert link.encode() in listing
    _, first = _get(url + f"/ui/issues/{issue.issue_id}/runs")
    ids = sorted(issue.trace_ids)
    assert all(f'href="/ui/runs/{t}"'.encode() in first for t in ids[:30])
    assert _get(url + "/ui/issues/iss_unknown/runs")[0] == 404


def _dashboard_link(column: str) -> str:
    """The URL of the Recurring issues table's link on ``column``, as shipped."""
    path = Path(__file__).resolve().parents[2] / "grafana" / "dashboards" / "otel-eval.json"
    (table,) = [p for p in json.loads(path.read_text(encoding="utf-8"))["panels"]
                if p.get("title") == "Recurring issues"]
    (override,) = [o for o in table["fieldConfig"]["overrides"]
                   if o["matcher"]["options"] == column]
    (links,) = [p["value"] for p in override["properties"] if p["id"] == "links"]
    return str(links[0]["url"])


def test_every_row_of_the_dashboards_issues_table_links_its_runs(
        served: tuple[str, IssuesResult]) -> None:
    """Each row of the dashboard's Recurring issues table (an issue gauge sample) links its
    Traces count to a page of otel-eval: an ``_other`` row (the issues of its level and node
    not shown) to the issues page, where each of them is listed with its runs. Before, its
    link was ``/ui/issues/_other/runs``, which answered 404."""
    url, result = served
    samples = top_issue_gauge_samples(result, top_k=1, max_issues=1)
    assert {s.labels["issue_id"] for s in samples} > {"_other"}
    template = _dashboard_link("Traces")
    for sample in samples:
        link = re.sub(r"\$\{__data\.fields\[\"Issue id\"\]\}", sample.labels["issue_id"],
                      template).replace("${otel_eval_url}", url)
        status, body = _get(link)
        assert status == 200, link
        for issue in sample.issues:  # the issue's runs, or the issues it stands for
            assert (f'href="/ui/runs/{sorted(issue.trace_ids)[0]}"'.encode() in body
                    or f'href="/ui/issues/{issue.issue_id}/runs"'.encode() in body), link


class _CountedIds(tuple[str, ...]):
    """An issue's trace ids that count the passes over them (slicing is not one)."""

    passes = 0

    def __iter__(self) -> Iterator[str]:
        type(self).passes += 1
        return super().__iter__()


def test_paging_an_issue_does_not_go_over_all_its_runs_per_page() -> None:
    """The trace ids are sorted once by the clustering run: a page is a slice (21 pages of
    a 20,000-run issue sorted all 20,000 ids 21 times)."""
    result = issues_offline(window(30), now=1.0)
    issue = max(result.issues, key=lambda i: i.traces)
    counted = replace(issue, trace_ids=_CountedIds(issue.trace_ids))
    result = replace(result, issues=(counted,))
    pages = [issue_runs(result, issue.issue_id, offset, 7) for offset in range(0, 30, 7)]
    assert [t for p in pages if p is not None for t in p["trace_ids"]] == list(
        issue.trace_ids) == sorted(issue.trace_ids)
    assert _CountedIds.passes == 0


def test_a_runs_page_links_the_issues_it_is_one_of() -> None:
    """The issue pages link their runs; a run's page (/ui/runs/ID) links back to the
    recurring issues it is one of (its place on /ui/issues and the issue's runs), so the
    on-call path from a failed run reaches the others like it. Before, it named none."""
    from otel_eval.base.results import Evaluation, Verdict
    from otel_eval.base.steps import Trajectory
    from otel_eval.outputs.issues.result import run_issues

    result = issues_offline(window(30), now=1.0)
    issue = max(result.issues, key=lambda i: i.traces)
    member = issue.trace_ids[len(issue.trace_ids) // 2]
    outsider = "f" * 32
    assert outsider not in issue.trace_ids

    def body(trace_id: str) -> dict[str, Any]:
        traj = Trajectory(trace_id, "otlp", "complete", [], service="shop", agent="a")
        return Evaluation(traj, [], Verdict(False, ["x"]), evaluated_at_ns=10**18).to_json()

    api = AdminApi(CollectorRegistry(), lambda _q: pytest.fail("query"), body,
                   lambda _t, _o: None, lambda: True, lambda: True,
                   issues=lambda: to_json(result, assignments=False),
                   issue_runs=lambda i, at: page((result,), i, at),
                   run_issues=lambda t: run_issues(result, t))
    server = AdminServer("127.0.0.1:0", api, AdminConfig(endpoint="127.0.0.1:0"))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        status, page = _get(f"{url}/ui/runs/{member}")
        status_out, page_out = _get(f"{url}/ui/runs/{outsider}")
    finally:
        server.stop()
    assert status == 200 == status_out
    text = page.decode()
    assert f'href="/ui/issues#issue-{issue.issue_id}"' in text
    assert f'href="/ui/issues/{issue.issue_id}/runs"' in text
    assert "/ui/issues" not in page_out.decode().replace('href="/ui/issues"', "")
