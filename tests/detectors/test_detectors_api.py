import dataclasses
from pathlib import Path

import pytest
from detector_factory import kinds, llm, tool, traj

from otel_eval.app.config import Config, build
from otel_eval.base.configcheck import ConfigError
from otel_eval.evaluate.detectors import Detectors, RefCall, Reference, ReferenceSet
from otel_eval.evaluate.detectors.config import (
    AgentOverrides,
    BudgetsConfig,
    DetectorsConfig,
    LuckyPassConfig,
)

LOOPY = traj(llm("a"), tool("search", {"q": 1}, "r"), tool("search", {"q": 1}, "r"),
             tool("edit", {}, "Error: conflict"), llm("done"), agent="fixer", task_id="7")


def test_passed_iff_no_error_and_reasons_in_order() -> None:
    findings, verdict = Detectors(DetectorsConfig(budget_overrides={"steps": 1})).evaluate(
        LOOPY, "failure")
    assert kinds(findings) == ["loop/repeated_call", "budget/steps_exceeded",
                               "tool_call/runtime", "recovery/gave_up"]
    assert verdict.passed is False and verdict.outcome == "failure"
    assert verdict.reasons == [f.message for f in findings if f.severity == "error"]
    assert "reference" not in verdict.extra
    clean = traj(llm("a"), tool("search", {"q": 1}), llm("done"))
    assert Detectors(DetectorsConfig()).evaluate(clean)[1].passed is True


def test_outcome_changes_the_verdict_on_re_evaluation() -> None:
    detectors = Detectors(DetectorsConfig())
    _, before = detectors.evaluate(LOOPY, None)
    findings, after = detectors.evaluate(LOOPY, "success")
    assert "recovery/unrecovered" in kinds(findings) and "lucky_pass/lucky_pass" in kinds(findings)
    assert after.outcome == "success" and len(after.reasons) < len(before.reasons)


def test_budgets_config_then_agent_then_overrides() -> None:
    cfg = DetectorsConfig(budgets=BudgetsConfig(steps=10, llm_calls=1),
                          agents={"fixer": AgentOverrides(budgets=BudgetsConfig(steps=2))})
    d = Detectors(cfg)
    assert d.budgets_for("fixer") == {"steps": 2.0, "llm_calls": 1.0}
    assert d.budgets_for("other") == {"steps": 10.0, "llm_calls": 1.0}
    over = dataclasses.replace(cfg, budget_overrides={"steps": 50})
    assert Detectors(over).budgets_for("fixer")["steps"] == 50
    findings, _ = d.evaluate(LOOPY)
    assert [f.kind for f in findings if f.detector == "budget"] == [
        "steps_exceeded", "llm_calls_exceeded"]


def test_enabled_per_agent() -> None:
    cfg = DetectorsConfig(enabled=("loop",), agents={"fixer": AgentOverrides(enabled=())})
    assert Detectors(cfg).evaluate(LOOPY)[0] == []
    other = dataclasses.replace(LOOPY, agent="other")
    assert {f.detector for f in Detectors(cfg).evaluate(other)[0]} == {"loop"}


def test_reference_by_task_id_fills_verdict() -> None:
    refs = ReferenceSet({"7": Reference("7", (RefCall("edit", {}),), "superset", "ignore")})
    findings, verdict = Detectors(DetectorsConfig(), refs).evaluate(LOOPY)
    assert verdict.extra["reference"]["matched"] is True
    assert verdict.to_json()["reference"]["score"] == 1.0
    assert "reference/match" in kinds(findings)


def test_references_path_from_config(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"task_id": "7", "calls": [{"name": "deploy"}], "match": "superset"}\n')
    findings, verdict = Detectors(DetectorsConfig(references_path=str(path))).evaluate(LOOPY)
    assert verdict.extra["reference"]["tool_recall"] == 0.0
    assert any(f.message.startswith("calls do not match the reference for task 7")
               for f in findings)


def test_lucky_pass_severity_configurable() -> None:
    cfg = DetectorsConfig(lucky_pass=LuckyPassConfig(severity="error"))
    _, verdict = Detectors(cfg).evaluate(LOOPY, "success")
    assert verdict.reasons[-1] == "succeeded despite loops and unrecovered errors"


def test_unknown_budget_override_rejected() -> None:
    with pytest.raises(ValueError, match=r"budget_overrides\.turns: unknown budget"):
        DetectorsConfig(budget_overrides={"turns": 3})


def test_config_loads_through_the_top_level_builder() -> None:
    cfg = build(Config, {"detectors": {
        "enabled": ["loop", "budget"], "budgets": {"steps": 5, "cost_usd": 1},
        "loop": {"window_steps": 5}, "reference": {"match": "superset"},
        "agents": {"fixer": {"budgets": {"steps": 3}, "enabled": ["budget"]}},
    }}).detectors
    assert cfg.enabled == ("loop", "budget") and cfg.budgets.cost_usd == 1.0
    assert cfg.agents["fixer"].budgets.steps == 3 and cfg.loop.window_steps == 5


@pytest.mark.parametrize(("data", "message"), [
    ({"enabled": ["loops"]}, "unknown detector"),
    ({"budgets": {"steps": -1}}, "must be >= 0"),
    ({"budgets": {"turns": 3}}, "turns: unknown key"),
    ({"reference": {"match": "fuzzy"}}, "detectors.reference.match"),
    ({"agents": {"a": {"enabled": ["nope"]}}}, "unknown detector"),
    # a pattern that does not compile failed every trace's verdict (evaluation_error of
    # loop, non_termination, tool_call and recovery) instead of refusing the config
    ({"non_termination": {"halt_patterns": ["(unclosed"]}},
     r"detectors\.non_termination\.halt_patterns\[0\]: not a regular expression"),
    ({"non_termination": {"forced_answer_patterns": ["ok", "[bad"]}},
     r"detectors\.non_termination\.forced_answer_patterns\[1\]"),
    # the loop rules' windows make their work n x window (x period for cycles): an unbounded
    # window was accepted and made them quadratic in the run's calls; a stagnation "run" of
    # one output made every output of 20 characters an error
    ({"loop": {"window_steps": 100_000}}, "detectors.loop.window_steps"),
    ({"loop": {"cycle_max_period": 5_000}}, "detectors.loop.cycle_max_period"),
    ({"loop": {"reworded_window": 10_000}}, "detectors.loop.reworded_window"),
    ({"loop": {"circling_window": 10_000}}, "detectors.loop.circling_window"),
    ({"loop": {"stagnation_min_run": 1}}, "detectors.loop.stagnation_min_run"),
    ({"tool_call": {"error_result_patterns": ["^error", "(?i)failed"]}},
     r"detectors\.tool_call\.error_result_patterns\[1\]"),
])
def test_invalid_config_is_reported(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(Config, {"detectors": data})


def test_an_empty_agent_name_is_refused_not_the_unnamed_runs_override() -> None:
    """``detectors.agents: {"": ...}`` (an unset ``${AGENT}`` in the key) was taken as the
    overrides of every run with no agent name: its budgets and detectors applied to them,
    undocumented, while the metrics name those runs ``unknown`` (a key that matches none).
    An empty name is refused at load, naming the key; the unnamed runs take the globals."""
    with pytest.raises(ConfigError, match=r"detectors\.agents: an empty agent name"):
        build(Config, {"detectors": {"agents": {"": {"budgets": {"steps": 1}}}}})
    with pytest.raises(ValueError, match="an empty agent name"):
        DetectorsConfig(agents={"": AgentOverrides(budgets=BudgetsConfig(steps=1))})
    unnamed = dataclasses.replace(LOOPY, agent=None)
    cfg = DetectorsConfig(budgets=BudgetsConfig(steps=10),
                          agents={"fixer": AgentOverrides(budgets=BudgetsConfig(steps=1))})
    assert Detectors(cfg).budgets_for(unnamed.agent) == {"steps": 10.0}
