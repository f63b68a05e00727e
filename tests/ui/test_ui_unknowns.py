"""The web view on what is unknown or missing: a step's unknown token count is "?" (it read
0), a partial judge's missing scores are left out (they read "None"), a stored run with null
lists is a page (it was a 500), and the runs form carries every filter (task and status were
dropped on submit)."""

from __future__ import annotations

import re
from typing import Any

from otel_eval.outputs.ui.routes import PAGES, Sources
from otel_eval.outputs.ui.runs import runs_page
from otel_eval.store.query import Page

TRACE_ID = "ab" * 16


def _serve(path: str, body: dict[str, Any]) -> tuple[int, str]:
    sources = Sources(query=lambda _q: Page([body], None), get=lambda _t: body,
                      issues=lambda: None)
    for pattern, view in PAGES:
        found = re.fullmatch(pattern, path)
        if found:
            status, _, data = view(sources, found, "")
            return status, data.decode()
    raise AssertionError(path)


def test_a_step_s_unknown_input_tokens_are_not_shown_as_0() -> None:
    # an LLM step whose instrumentation recorded only the output tokens (input unknown):
    # the run's own header says "?+120 tokens" (text.tokens), the step says "0+120 tok"
    body = {"trace_id": TRACE_ID, "steps": [
        {"index": 0, "span_id": "1", "kind": "llm", "name": "chat",
         "input_tokens": None, "output_tokens": 120}],
        "usage": {"input_tokens": None, "output_tokens": 120}}
    status, html = _serve(f"/ui/runs/{TRACE_ID}", body)
    assert status == 200
    assert "?+120 tokens" in html  # the run: unknown is "?"
    assert "0+120 tok" not in html  # the step: unknown must not read as zero


def test_a_partial_judge_s_missing_scores_are_not_shown_as_none() -> None:
    # judge.scoring.overall: process_score and lucky_pass are None when the process judge
    # failed (status "partial")
    body = {"trace_id": TRACE_ID, "steps": [],
            "judge": {"overall": {"status": "partial", "process_score": None,
                                  "outcome_score": 0.8, "lucky_pass": None,
                                  "passed": None}}}
    status, html = _serve(f"/ui/runs/{TRACE_ID}", body)
    assert status == 200
    judge = re.search(r'<p class="judge">([^<]*)</p>', html)
    assert judge is not None
    assert "None" not in judge.group(1), judge.group(1)


def test_a_stored_run_with_null_steps_or_findings_is_not_a_500() -> None:
    # the run list shows such a run; its page and step page raise TypeError (a 500)
    for extra in ({"steps": None}, {"findings": None}):
        body = {"trace_id": TRACE_ID, **extra}
        assert _serve("/ui/", body)[0] == 200
        assert _serve(f"/ui/runs/{TRACE_ID}", body)[0] == 200


def test_the_runs_form_keeps_the_task_and_status_filters() -> None:
    html = runs_page(Page([], None), {"task_id": "t-1", "status": "incomplete"})
    form = re.search(r'<form[^>]*class="filters".*?</form>', html, re.S)
    assert form is not None
    assert re.search(r'name="task_id" value="t-1"', form.group(0))
    status = re.search(r'<select name="status">(.*?)</select>', form.group(0), re.S)
    assert status is not None
    assert re.findall(r'<option value="([^"]*)" selected>', status.group(1)) == ["incomplete"]


def test_a_cost_partly_unpriced_is_no_budget_exceeded() -> None:
    # budget/cost_unknown: a cost within its budget, some of its models unpriced (it was
    # listed under "budgets exceeded")
    unknown = {"detector": "budget", "kind": "cost_unknown", "severity": "info",
               "message": "cost partly unknown",
               "attributes": {"budget": "cost_usd", "value": 0.2, "limit": 1.0}}
    body = {"trace_id": TRACE_ID, "steps": [], "findings": [unknown]}
    status, html = _serve(f"/ui/runs/{TRACE_ID}", body)
    assert status == 200 and "budgets exceeded" not in html
    over = {**unknown, "kind": "cost_usd_exceeded", "severity": "error",
            "attributes": {"budget": "cost_usd", "value": 2.0, "limit": 1.0}}
    assert "budgets exceeded: cost_usd 2.0 of 1.0" in _serve(
        f"/ui/runs/{TRACE_ID}", {**body, "findings": [over]})[1]


def _partly_priced(unpriced: bool = True) -> dict[str, Any]:
    """A stored run of two LLM calls: one priced ($0.0025), one of a model the price list
    lacks (its ``cost_usd`` None): the run's ``usage.cost_usd`` is the priced one's alone."""
    from otel_eval.base.results import Evaluation, Verdict
    from otel_eval.base.steps import Step, Trajectory

    steps = [Step(0, "01" * 8, None, "llm", "chat gpt-4o", model="gpt-4o", input_tokens=500,
                  output_tokens=125, cost_usd=0.0025, start_ns=1, end_ns=2),
             Step(1, "02" * 8, None, "llm", "chat in-house-7b", model="in-house-7b",
                  input_tokens=900, output_tokens=100,
                  cost_usd=None if unpriced else 0.001, start_ns=3, end_ns=4)]
    t = Trajectory(TRACE_ID, "otlp", "complete", steps, start_ns=1, end_ns=4)
    return Evaluation(t, [], Verdict(True, [])).to_json()

def test_a_partly_priced_cost_is_shown_as_a_lower_bound() -> None:
    """A call of an unpriced model (or one side's token count only) leaves the run's cost
    the known part: the run list, the run page and ``show`` printed it as the whole
    ("$0.0025"); they say "≥ $0.0025", and a cost known whole stays as it was."""
    from otel_eval.app.show import render_text
    from otel_eval.outputs.ui.run import tree

    for path in ("/ui/", f"/ui/runs/{TRACE_ID}"):
        status, html = _serve(path, _partly_priced())
        assert status == 200 and "≥ $0.0025" in html, path
        status, html = _serve(path, _partly_priced(unpriced=False))
        assert status == 200 and "$0.0035" in html and "≥" not in html, path
    assert "≥ $0.0025" in render_text(tree(_partly_priced()))
    whole = render_text(tree(_partly_priced(unpriced=False)))
    assert "$0.0035" in whole and "≥" not in whole
