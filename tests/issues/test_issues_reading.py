import sqlite3

import pytest
from issue_fixtures import LOOP, window

from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.critiques import Critique
from otel_eval.outputs.issues.reading import severity, status, titled
from otel_eval.outputs.issues.result import to_json
from otel_eval.outputs.issues.tracker import IssueTracker, issues_offline


def _c(source: str = "judge:q", sev: str = "warning") -> Critique:
    return Critique("t", None, "", "system", "x", "a", source, sev)


@pytest.mark.parametrize(("members", "share", "expected"), [
    ([_c(sev="info")] * 3, 0.1, "low"),
    ([_c()] * 3, 0.1, "medium"),
    ([_c()] * 3, 0.25, "high"),
    ([_c(sev="error"), _c(sev="error"), _c()], 0.1, "high"),
    ([_c(sev="error")] * 2, 0.5, "critical"),
    ([_c(sev="error"), _c(sev="info")], 0.1, "low"),  # the lower median: not the worst one
])
def test_severity(members: list[Critique], share: float, expected: str) -> None:
    assert severity(members, share) == expected


@pytest.mark.parametrize(("previous", "expected"), [
    (None, "new"), (0.0, "regressed"), (0.2, "ongoing")])
def test_status(previous: float | None, expected: str) -> None:
    assert status(previous) == expected


@pytest.mark.parametrize(("members", "expected"), [
    ([_c("finding:loop")] * 2, "t (loop)"),
    ([_c("finding:loop"), _c("finding:budget")], "t"),
    ([_c("finding:loop"), _c()], "t"),
    ([_c()], "t"),
])
def test_titled(members: list[Critique], expected: str) -> None:
    assert titled("t", members) == expected
    assert titled(expected, members) == expected  # never twice


def _loops(n: int, offset: int = 0) -> list[dict[str, object]]:
    return [{"trace_id": f"{i:032x}", "agent": "shop", "steps": [], "judge": None,
             "findings": [{"detector": "loop", "severity": "error", "span_ids": [],
                           "message": LOOP[i % 3].format(n=i)}]}
            for i in range(offset, offset + n)]


def test_a_findings_issue_names_its_detector_and_is_critical_when_wide() -> None:
    (issue,) = issues_offline(_loops(6), IssuesConfig(), now=1.0).issues
    assert issue.title.endswith("(loop)")
    assert (issue.severity, issue.status) == ("critical", "new")
    out = to_json(issues_offline(_loops(6), IssuesConfig(), now=1.0))["issues"][0]
    assert (out["severity"], out["status"]) == ("critical", "new")


def test_status_goes_ongoing_resolved_regressed_over_runs() -> None:
    track = IssueTracker(IssuesConfig(age_out_s=1e6), sqlite3.connect(":memory:"))
    first = track.run(window(6), now=1.0).issues
    assert {i.status for i in first} == {"new"}
    assert {i.status for i in track.run(window(6, 6), now=2.0).issues} == {"ongoing"}
    gone = track.run(window(6, 12, with_auth=False), now=3.0)
    auth = [i for i in first if "authentication" in i.title.lower()]
    assert [r.issue_id for r in gone.resolved] == [auth[0].issue_id]
    assert to_json(gone)["resolved"][0]["status"] == "resolved"
    back = track.run(window(6, 18), now=4.0)
    assert [i.status for i in back.issues if i.issue_id == auth[0].issue_id] == ["regressed"]
    assert not back.resolved
