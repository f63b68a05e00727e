"""Issue names from the judge model: the recurring-issue stage asks the judge for a title and a
one-sentence description (CLEAR's synthesis step); a bad reply keeps the deterministic name."""

from __future__ import annotations

from judge_fake_llm import FakeLLM, completion, good
from judge_fixtures import config

from otel_eval.base import model
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.namer import JudgeNamer, judge_namer
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.tracker import issues_offline


def _evaluations(n: int = 4) -> list[dict[str, object]]:
    out = []
    for i in range(n):
        traj = model.Trajectory(f"{i + 1:032x}", "otlp", "complete", [], service="shop",
                                agent="shop")
        findings = [model.Finding("loop", "repeated_call", "error",
                                  f"search called 3 times in a row with the same arguments "
                                  f"(query {i})", span_ids=[f"{i + 1:016x}"])]
        out.append(model.Evaluation(traj, findings, model.Verdict(False, ["loop"]),
                                    evaluated_at_ns=1000 + i).to_json())
    return out


def test_judge_names_a_new_issue_from_its_redacted_critiques(llm: FakeLLM) -> None:
    llm.route = lambda body: good({"title": "Agent repeats identical searches.",
                                   "description": "The agent re-runs the same search."})
    namer = JudgeNamer(config(llm.api_base))
    assert namer(["mail bob@example.com about it", "search repeated"]) == (
        "Agent repeats identical searches", "The agent re-runs the same search.")
    sent = llm.requests[0]["messages"][0]["content"]
    assert "bob@example.com" not in sent and "- search repeated" in sent

    result = issues_offline(_evaluations(), IssuesConfig(), namer=namer)
    # every member is the loop detector's finding: the title names it (outputs/issues/reading)
    assert [i.title for i in result.issues] == ["Agent repeats identical searches (loop)"]
    assert result.issues[0].description == "The agent re-runs the same search."


def test_garbage_or_failure_keeps_the_deterministic_name(llm: FakeLLM) -> None:
    llm.route = lambda body: completion("no JSON here")
    namer = JudgeNamer(config(llm.api_base, max_retries=0))
    assert namer(["search repeated"]) is None
    result = issues_offline(_evaluations(), IssuesConfig(), namer=namer)
    deterministic = issues_offline(_evaluations(), IssuesConfig())
    assert [i.title for i in result.issues] == [i.title for i in deterministic.issues]
    assert result.issues and result.issues[0].title == deterministic.issues[0].title


def test_no_model_no_namer() -> None:
    assert judge_namer(JudgeConfig()) is None
