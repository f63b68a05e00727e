"""The issues job on critiques holding a lone surrogate (issue 33, finding 3).

A stored body keeps a lone surrogate as a JSON escape (``\\ud800``), and reading it back
gives the str again: hashing the cluster's central critique (``.encode()``) failed every run
while such a critique was in the window, so ``/v1/issues`` stayed stale. Critiques are made
valid (U+FFFD) where they are taken from the evaluations, and the gauges and the scrape hold.
"""

from __future__ import annotations

from pathlib import Path

from issue_fixtures import evaluation, window
from prometheus_client import CollectorRegistry, generate_latest
from support.clock import ManualClock
from test_issues_job import HOUR, T0, _stored

from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.critiques import critique_fields, extract
from otel_eval.outputs.issues.job import IssuesJob
from otel_eval.store import Store

BAD = "Tool '\ud800x' was called 4 times with identical arguments"


def test_a_critique_with_a_lone_surrogate_does_not_fail_the_run(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "otel-eval.db"))
    try:
        bodies = window(9)
        bodies += [evaluation(f"{900 + i:032x}", [("searcher", BAD)], [BAD], agent="\udfff")
                   for i in range(3)]
        store.put_many(_stored(e, T0 - 60) for e in bodies)
        registry = CollectorRegistry()
        job = IssuesJob(IssuesConfig(), store.path,
                        lambda ns: store.since(ns, keep=critique_fields), registry, ManualClock(T0))
        result = job.run_once()
        assert result is not None and result.traces == 12
        assert registry.get_sample_value("otel_eval_issues_runs_total", {"status": "ok"}) == 1
        assert registry.get_sample_value("otel_eval_issues_runs_total",
                                         {"status": "error"}) == 0
        text = generate_latest(registry).decode()  # the scrape encodes every label
        assert "\ufffd" in text
        assert job.run_once(T0 + HOUR / 2) is not None  # and the next run too
        job.close()
    finally:
        store.close()


def test_a_critique_made_valid_keeps_its_severity_and_problem() -> None:
    """Making a critique's text valid rebuilds it: every field but the texts stays (a
    not-ended finding with a lone surrogate is still an error of the "not_ended" problem)."""
    body = {"trace_id": "\ud800" + "a" * 31, "agent": "planner",
            "findings": [{"detector": "completion", "kind": "incomplete", "severity": "error",
                          "message": "the run never \ud800finished"}]}
    (c,) = extract([body], threshold=0.5).critiques
    assert "\ufffd" in c.text and "\ufffd" in c.trace_id
    assert (c.severity, c.problem, c.level, c.source) == ("error", "not_ended", "system",
                                                         "finding:completion")
