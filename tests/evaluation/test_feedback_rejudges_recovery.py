"""An outcome learnt later (``POST /v1/feedback``, ``Evaluator.with_outcome``) re-judges the
stored run as evaluating it with that outcome does: a tool error nothing recovered from is
``recovery/gave_up`` (an error) unless the outcome is known to be a success, then
``recovery/unrecovered`` (a warning, with its lucky pass). Before, feedback re-ran only the
lucky-pass check: a run recorded as a success kept ``gave_up`` and failed, and a run whose
outcome attribute said success, recorded later as a failure, kept ``unrecovered`` and passed;
the same run evaluated again with the same outcome (a restart's replay) got the other verdict."""

from __future__ import annotations

import pytest

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator

TRACE = "cd" * 16


def _trace() -> Trace:
    root = Span(TRACE, f"{1:016x}", None, "invoke_agent", 1, 100,
                attributes={"gen_ai.operation.name": "invoke_agent",
                            "gen_ai.agent.name": "a"})
    failed = Span(TRACE, f"{2:016x}", f"{1:016x}", "execute_tool lookup", 10, 20,
                  status="error", status_message="lookup failed",
                  attributes={"gen_ai.operation.name": "execute_tool",
                              "gen_ai.tool.name": "lookup"})
    return Trace(TRACE, [root, failed], "complete")


def _judged(body: dict[str, object]) -> tuple[list[tuple[str, str, str]], bool]:
    findings = body["findings"]
    verdict = body["verdict"]
    assert isinstance(findings, list) and isinstance(verdict, dict)
    return (sorted((f["detector"], f["kind"], f["severity"]) for f in findings),
            verdict["passed"])


@pytest.mark.parametrize(("first", "later"), [(None, "success"), (None, "failure"),
                                              ("failure", "success"),
                                              ("success", "failure")])
def test_feedback_judges_as_evaluating_with_the_outcome(first: str | None,
                                                        later: str) -> None:
    evaluator = Evaluator(Config())
    stored = evaluator.evaluate(_trace(), first)
    assert stored is not None
    assert any(f.detector == "recovery" for f in stored.findings)
    relabelled = evaluator.with_outcome(stored.to_json(), later)
    again = evaluator.evaluate(_trace(), later)
    assert again is not None
    assert _judged(relabelled) == _judged(again.to_json())
    assert relabelled["verdict"]["outcome"] == later
