import ast
from pathlib import Path
from typing import Any

import pytest

import otel_eval
from otel_eval.base.results import NOTE_KINDS
from otel_eval.outputs.issues.critiques import MAX_CRITIQUE_CHARS, Critique, extract


def _evaluation(**extra: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "trace_id": "t1", "agent": "shop",
        "steps": [{"index": 0, "span_id": "s0", "node": "planner"},
                  {"index": 1, "span_id": "s1", "node": None}],
        "findings": [],
    }
    ev.update(extra)
    return ev


CASES: list[tuple[str, dict[str, Any], list[Critique]]] = [
    ("finding on a span -> node critique of that step's node",
     _evaluation(findings=[{"detector": "loop", "message": "loop", "span_ids": ["s0"],
                            "step_indexes": [0]}]),
     [Critique("t1", "s0", "planner", "node", "loop", "shop", "finding:loop")]),
    ("finding by step index only",
     _evaluation(findings=[{"detector": "x", "message": "m", "span_ids": [],
                            "step_indexes": [0]}]),
     [Critique("t1", None, "planner", "node", "m", "shop", "finding:x")]),
    ("finding on a step without node -> the run's agent",
     _evaluation(findings=[{"detector": "x", "message": "m", "span_ids": ["s1"]}]),
     [Critique("t1", "s1", "shop", "node", "m", "shop", "finding:x")]),
    ("hung run: no step names a node, the agent inferred -> the inferred agent, not root",
     _evaluation(agent="travel_agent", agent_source="inferred_history",
                 steps=[{"index": 0, "span_id": "s0", "node": None}],
                 findings=[{"detector": "non_termination", "message": "tool calls never ran",
                            "kind": "pending_tool_calls", "span_ids": ["s0"]}],
                 judge={"judges": {"q": {"critiques": [{"span_id": "s0", "score": 0.0,
                                                         "text": "stuck"}]}}}),
     [Critique("t1", "s0", "travel_agent", "node", "stuck", "travel_agent", "judge:q"),
      Critique("t1", "s0", "travel_agent", "node", "tool calls never ran", "travel_agent",
               "finding:non_termination", problem="not_ended")]),
    ("step and run name no agent -> root",
     _evaluation(agent=None, findings=[{"detector": "x", "message": "m", "span_ids": ["s1"]}]),
     [Critique("t1", "s1", "root", "node", "m", "", "finding:x")]),
    ("finding without spans -> system critique",
     _evaluation(findings=[{"detector": "budget", "message": "over", "span_ids": []}]),
     [Critique("t1", None, "", "system", "over", "shop", "finding:budget")]),
    ("judge: low scores taken, high skipped, unscored taken, node from the step",
     _evaluation(judge={"judges": {"q": {"critiques": [
         {"span_id": "s0", "score": 0.2, "text": "bad plan"},
         {"span_id": "s0", "node": "writer", "score": 0.9, "text": "fine"},
         {"span_id": "s1", "node": "writer", "text": "unscored"},
         {"score": 0.1, "text": "wrong answer"},
     ]}}}),
     [Critique("t1", "s0", "planner", "node", "bad plan", "shop", "judge:q"),
      Critique("t1", "s1", "writer", "node", "unscored", "shop", "judge:q"),
      Critique("t1", None, "", "system", "wrong answer", "shop", "judge:q")]),
    ("malformed parts skipped", _evaluation(
        findings=[{"message": ""}, "junk", {"detector": "d"}],
        judge={"judges": {"q": None, "r": {"critiques": [{"text": 3}, "x"]}}}), []),
]


@pytest.mark.parametrize(("name", "evaluation", "expected"), CASES, ids=[c[0] for c in CASES])
def test_extract(name: str, evaluation: dict[str, Any], expected: list[Critique]) -> None:
    out = extract([evaluation], threshold=0.5)
    assert out.critiques == expected
    assert out.trace_ids == {"t1"}


def test_findings_can_be_excluded_and_bad_objects_counted() -> None:
    ev = _evaluation(findings=[{"detector": "x", "message": "m"}])
    out = extract([ev, {"no": "trace id"}, "junk"], threshold=0.5,  # type: ignore[list-item]
                  include_findings=False)
    assert out.critiques == [] and out.skipped == 2 and out.trace_ids == {"t1"}


def test_the_text_a_critique_carries_is_bounded() -> None:
    # A finding message carries span content: "called <a 40,000-character tool name>, which
    # was not offered". The clustering reads the head, whatever the message's length.
    name = "a-" * 20_000
    ev = _evaluation(
        findings=[{"detector": "tool_call", "message": f"called {name}, which was not offered",
                   "span_ids": ["s0"]},
                  {"detector": "loop", "message": "x" * MAX_CRITIQUE_CHARS, "span_ids": []}],
        judge={"judges": {"q": {"critiques": [{"score": 0.0, "text": "\ud800" + name}]}}})
    texts = [c.text for c in extract([ev], threshold=0.5).critiques]
    assert texts == ["\ufffd" + name[:MAX_CRITIQUE_CHARS - 1],
                     f"called {name}"[:MAX_CRITIQUE_CHARS], "x" * MAX_CRITIQUE_CHARS]


def test_a_finding_about_the_measurement_is_no_critique() -> None:
    # budget/cost_unknown ("cost partly unknown (no price for m)") and
    # evaluation/result_truncated ("the stored result was cut to its bounds") say how the run
    # was measured, not that the agent failed: clustered, every run of an unpriced model was
    # an issue "cost partly unknown" of the agent. A loop finding configured at severity info
    # still says the agent looped: it stays a critique.
    ev = _evaluation(findings=[
        {"detector": "budget", "kind": "cost_unknown", "severity": "info",
         "message": "cost partly unknown (no price for m)", "span_ids": []},
        {"detector": "evaluation", "kind": "result_truncated", "severity": "info",
         "message": "the stored result was cut to its bounds (3 steps)", "span_ids": []},
        {"detector": "reference", "kind": "match", "severity": "info",
         "message": "calls match the reference", "span_ids": []},
        {"detector": "recovery", "kind": "recovered", "severity": "info",
         "message": "recovered from a failed f with g", "span_ids": ["s0"]},
        {"detector": "loop", "kind": "repeated_call", "severity": "info",
         "message": "f called 5 times", "span_ids": []}])
    assert [c.text for c in extract([ev], threshold=0.5).critiques] == ["f called 5 times"]


def test_otel_evals_own_failure_is_no_critique_of_the_agent() -> None:
    # evaluation/evaluation_error: a detector or reader of otel-eval raised. The run is
    # not passed and the failure counted, but clustered it was an issue of the agent titled
    # "trajectory could not evaluate this trace (KeyError)".
    ev = _evaluation(findings=[
        {"detector": "evaluation", "kind": "evaluation_error", "severity": "error",
         "message": "trajectory could not evaluate this trace (KeyError)", "span_ids": [],
         "attributes": {"part": "trajectory", "error": "KeyError"}},
        {"detector": "evaluation", "kind": "evaluation_error", "severity": "error",
         "message": "conventions.genai could not evaluate this span (ValueError)",
         "span_ids": ["s0"]},
        {"detector": "loop", "kind": "repeated_call", "severity": "error",
         "message": "f called 5 times", "span_ids": []}])
    assert [c.text for c in extract([ev], threshold=0.5).critiques] == ["f called 5 times"]


def _fixed_info_kinds() -> set[str]:
    """The kinds the evaluation reports at a severity written as "info" (a call
    ``...(kind, "info", ...)``, as ``Finding(detector, kind, "info", ...)`` is)."""
    root = Path(otel_eval.__file__).parent / "evaluate"
    kinds: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            args = node.args
            for i, arg in enumerate(args[1:], start=1):
                if isinstance(arg, ast.Constant) and arg.value == "info":
                    kind = args[i - 1]
                    assert isinstance(kind, ast.Constant), f"{path}:{node.lineno}"
                    kinds.add(str(kind.value))
    return kinds


def test_every_finding_kind_fixed_at_info_is_declared_a_note() -> None:
    # The rule the issues job reads (results.NOTE_KINDS): a kind the code always reports at
    # info says the run went right or describes the measurement. A new one is declared there
    # (or reported at a severity a user sets).
    assert _fixed_info_kinds() == {kind for _, kind in NOTE_KINDS}
