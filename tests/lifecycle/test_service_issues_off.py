"""``serve`` with the issues job off (``issues.interval_s: 0``): the runs of an issue are
not enabled either. ``GET /v1/issues`` said so, while ``GET /v1/issues/{id}/runs`` answered
"no issue {id} in the last clustering run", as if a run had looked for it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from support.harness import running_service


def _get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_issue_runs_say_issues_are_off_as_the_issues_do(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"issues.interval_s": 0.0}) as h:
        assert h.svc.issues is None
        issues = _get(h.admin_url + "/v1/issues")
        runs = _get(h.admin_url + "/v1/issues/iss_0123/runs")
    assert issues[0] == runs[0] == 404
    assert "not enabled" in json.dumps(issues[1])
    assert runs[1] == issues[1], (issues, runs)
