"""An outcome learnt later (``POST /v1/feedback``, ``Evaluator.with_outcome``) re-judges the
stored run as evaluating it with that outcome does: a tool error nothing recovered from is
``recovery/gave_up`` (an error) unless the outcome is known to be a success, then
``recovery/unrecovered`` (a warning, with its lucky pass). Before, feedback re-ran only the
lucky-pass check: a run recorded as a success kept ``gave_up`` and failed, and a run whose
outcome attribute said success, recorded later as a failure, kept ``unrecovered`` and passed;
the same run evaluated again with the same outcome (a restart's replay) got the other verdict."""

from __future__ import annotations

import pytest

from otel_eval.app.config import Config, replace
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


def _huge_trace(pairs: int) -> Trace:
    """``pairs`` tool calls that failed, each followed by one that succeeded (``recovered``,
    info), then a last call that failed with nothing after it (``gave_up``, an error): the
    error is the last finding, the first one a cut of the stored result drops."""
    spans = [Span(TRACE, f"{1:016x}", None, "invoke_agent", 1, 10**9,
                  attributes={"gen_ai.operation.name": "invoke_agent",
                              "gen_ai.agent.name": "a"})]

    def tool(k: int, name: str, failed: bool) -> Span:
        return Span(TRACE, f"{k + 2:016x}", f"{1:016x}", f"execute_tool {name}", 10 + 2 * k,
                    11 + 2 * k, status="error" if failed else "unset",
                    status_message="E" * 280 if failed else "",
                    attributes={"gen_ai.operation.name": "execute_tool",
                                "gen_ai.tool.name": name})
    for i in range(pairs):
        spans += [tool(2 * i, f"fails_{i}_" + "T" * 40, True),
                  tool(2 * i + 1, f"works_{i}_" + "T" * 40, False)]
    spans.append(tool(2 * pairs, "last", True))
    return Trace(TRACE, spans, "complete")


def test_feedback_keeps_the_errors_the_stored_result_was_cut_of() -> None:
    """A huge run's stored result is cut to ``max_result_bytes``: its last findings go
    (``result_truncated`` counts them), its verdict stays. Feedback re-judged the verdict
    from the stored findings alone, so a run failed by an error among those cut passed once
    an outcome was recorded (even a failure). The errors it cannot see stay reasons."""
    evaluator = Evaluator(replace(Config(), **{"trajectory.max_result_bytes": 64 * 1024}))
    evaluation = evaluator.evaluate(_huge_trace(300))
    assert evaluation is not None and evaluation.bounded is not None
    body = evaluation.bounded
    (cut,) = [f for f in body["findings"] if f["kind"] == "result_truncated"]
    assert cut["attributes"]["findings_dropped"] > 0
    assert not any(f["severity"] == "error" for f in body["findings"])  # gave_up was cut
    assert body["verdict"]["passed"] is False
    for outcome in ("failure", "success"):
        relabelled = evaluator.with_outcome(body, outcome)
        assert relabelled["verdict"]["passed"] is False, outcome
        assert relabelled["verdict"]["reasons"] == body["verdict"]["reasons"]
        assert relabelled["verdict"]["outcome"] == outcome
        # recorded twice: the same verdict
        assert evaluator.with_outcome(relabelled, outcome)["verdict"] == relabelled["verdict"]


def test_feedback_finds_the_lucky_pass_of_findings_the_stored_result_was_cut_of() -> None:
    """Feedback re-ran the lucky-pass check on the stored findings alone: a huge run whose
    unrecovered tool error was among the findings its stored result was cut of, recorded
    later as a success, got no ``lucky_pass`` finding, while evaluating it with that outcome
    gives one. The kinds of the findings cut are kept (``result_truncated``) and the check
    reads them too."""
    evaluator = Evaluator(replace(Config(), **{"trajectory.max_result_bytes": 64 * 1024}))
    evaluation = evaluator.evaluate(_huge_trace(300))
    assert evaluation is not None and evaluation.bounded is not None
    body = evaluation.bounded
    assert not any(f["detector"] == "recovery" and f["kind"] == "gave_up"
                   for f in body["findings"])  # cut
    again = evaluator.evaluate(_huge_trace(300), "success", bounded=False)
    assert again is not None
    (expected,) = [f for f in again.findings if f.detector == "lucky_pass"]
    relabelled = evaluator.with_outcome(body, "success")
    lucky = [f for f in relabelled["findings"] if f["detector"] == "lucky_pass"]
    assert [(f["kind"], f["severity"], f["attributes"]["causes"]) for f in lucky] == [
        (expected.kind, expected.severity, expected.attributes["causes"])]
    assert evaluator.with_outcome(relabelled, "success")["findings"] == relabelled["findings"]
    assert not any(f["detector"] == "lucky_pass"
                   for f in evaluator.with_outcome(relabelled, "failure")["findings"])
