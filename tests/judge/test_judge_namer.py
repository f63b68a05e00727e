"""Issue names from the judge model: the recurring-issue stage asks the judge for a title and a
one-sentence description (CLEAR's synthesis step); a bad reply keeps the deterministic name.
In ``serve`` the names go through the judge stage's one client: its hourly budget, its
metrics (``judge="issue_name"``), one call per new issue, none for a known one."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from judge_fake_llm import FakeLLM, Reply, completion, good
from judge_fixtures import config, judged_service
from prometheus_client import CollectorRegistry

from otel_eval.app.service import Service
from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.namer import JudgeNamer, judge_namer
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.naming import NOT_SENT
from otel_eval.outputs.issues.tracker import issues_offline


def _evaluations(n: int = 4) -> list[dict[str, object]]:
    out = []
    for i in range(n):
        traj = Trajectory(f"{i + 1:032x}", "otlp", "complete", [], service="shop",
                          agent="shop")
        findings = [Finding("loop", "repeated_call", "error",
                            f"search called 3 times in a row with the same arguments "
                            f"(query {i})", span_ids=[f"{i + 1:016x}"])]
        out.append(Evaluation(traj, findings, Verdict(False, ["loop"]),
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


# -- in serve: the judge stage's client -----------------------------------------------------

SECRET = "sk-" + "c" * 40  # an OpenAI-style key in a finding message: redacted before sending
IN_USD, OUT_USD = 1e-6, 4e-6  # per token: a name of 2,000 + 50 tokens costs 0.0022 USD


# two recurring problems, worded differently each time (as critiques of real runs are)
LOOPS = ["search called {n} times in a row with the same arguments (key {secret})",
         "The agent called search {n} times with identical arguments again",
         "Repeated identical tool call: search called {n} times with same arguments"]
AUTHS = ["Authentication failed: API key rejected with HTTP 401 for https://api.x.io/v{n}",
         "API key rejected, authentication failed (401) at https://api.y.io/{n}",
         "Authentication failed because the API key was rejected ({n})"]


def _findings(problem: str, n: int = 6) -> list[Evaluation]:
    """``n`` runs with one finding each of ``problem`` (a loop, or a rejected API key)."""
    now_ns = time.time_ns()
    texts, detector, kind = ((LOOPS, "loop", "repeated_call") if problem == "loop"
                             else (AUTHS, "tool_error", "failed_call"))
    out = []
    for i in range(n):
        trace_id = f"{problem[:4].encode().hex()}{i + 1:024x}"
        traj = Trajectory(trace_id, "otlp", "complete", [], service="shop", agent="shop")
        finding = Finding(detector, kind, "error",
                          texts[i % 3].format(n=i + 3, secret=SECRET),
                          span_ids=[f"{i + 1:016x}"])
        out.append(Evaluation(traj, [finding], Verdict(False, [detector]),
                              evaluated_at_ns=now_ns - 1000 + i))
    return out


def _name_reply(body: dict[str, Any]) -> Reply:
    if body["response_format"]["json_schema"]["name"] != "issue_name_grade":
        return completion("not an issue name")  # the synthesizer's (issue_merge): refused
    return good({"title": "Agent repeats identical searches.",
                 "description": "The agent re-runs the same search."},
                prompt_tokens=2000, completion_tokens=50)


def _serve(tmp_path: Path, llm: FakeLLM, **changes: Any) -> AbstractContextManager[Service]:
    # the issues job runs by hand below (run_once)
    return judged_service(tmp_path, llm.api_base, **{
        "judge.input_cost_per_token_usd": IN_USD, "judge.output_cost_per_token_usd": OUT_USD,
        **changes})


def _sample(svc: Service, name: str, **labels: str) -> float:
    return svc.registry.get_sample_value(name, labels) or 0.0


def _titles(svc: Service) -> list[str]:
    assert svc.issues is not None
    result = svc.issues.run_once()
    assert result is not None
    return sorted(i.title for i in result.issues)


def test_serve_names_each_new_issue_once_through_the_judge_client(
        tmp_path: Path, llm: FakeLLM) -> None:
    llm.route = _name_reply
    with _serve(tmp_path, llm, **{"issues.synthesis_max_calls": 0}) as svc:
        svc.store.put_many(_findings("loop"))
        assert _titles(svc) == ["Agent repeats identical searches (loop)"]
        assert len(llm.requests) == 1  # one new issue, one call
        assert _titles(svc) == ["Agent repeats identical searches (loop)"]
        assert len(llm.requests) == 1  # known issue: no call, its stored name stands
        spent = 2000 * IN_USD + 50 * OUT_USD
        assert _sample(svc, "otel_eval_judge_calls_total", judge="issue_name",
                       status="ok") == 1
        assert _sample(svc, "otel_eval_judge_tokens_total", judge="issue_name",
                       direction="input") == 2000
        assert _sample(svc, "otel_eval_judge_cost_usd_total",
                       judge="issue_name") == pytest.approx(spent)
        # the same hourly budget as the trace and session judges: the name's cost is in it
        stage = next(s for s in svc.sinks if type(s).__name__ == "JudgeStage")
        judge = stage.judge  # type: ignore[attr-defined]
        assert judge.client.budget.spent(judge.client.clock()) == pytest.approx(spent)
    prompt = llm.requests[0]["messages"][0]["content"]
    assert "- search called 3 times in a row with the same arguments" in prompt
    assert SECRET not in prompt and "sk-" not in prompt  # redacted before it left


def test_serve_over_budget_keeps_the_evidence_title_without_a_call(
        tmp_path: Path, llm: FakeLLM) -> None:
    llm.route = _name_reply
    # the first name (0.0022 USD) spends the hourly budget; the second issue gets no call, and
    # the synthesizer (issue_merge, on by default) none either: the same budget
    with _serve(tmp_path, llm, **{"judge.max_cost_usd_per_hour": 0.002}) as svc:
        svc.store.put_many(_findings("loop"))
        assert _titles(svc) == ["Agent repeats identical searches (loop)"]
        assert len(llm.requests) == 1
        svc.store.put_many(_findings("auth"))
        titles = _titles(svc)
        assert len(llm.requests) == 1  # over budget: nothing sent, neither name nor merge
        assert len(titles) == 2 and "Agent repeats identical searches (loop)" in titles
        other = next(t for t in titles if "loop" not in t)
        assert "API key" in other and other.endswith("(tool_error)")  # from the evidence
        assert _sample(svc, "otel_eval_judge_calls_total", judge="issue_name",
                       status="budget_exceeded") == 1
        assert _sample(svc, "otel_eval_judge_calls_total", judge="issue_merge",
                       status="budget_exceeded") >= 1
        assert _sample(svc, "otel_eval_judge_cost_usd_total",
                       judge="issue_name") == pytest.approx(2000 * IN_USD + 50 * OUT_USD)


def test_serve_sends_no_name_before_the_judge_starts_or_after_it_stops(
        tmp_path: Path, llm: FakeLLM) -> None:
    llm.route = _name_reply
    with _serve(tmp_path, llm, **{"issues.synthesis_max_calls": 0}) as svc:
        stage = next(s for s in svc.sinks if type(s).__name__ == "JudgeStage")
        namer = JudgeNamer(svc.config.judge, stage.ask)  # type: ignore[attr-defined]
        assert namer(["search repeated"]) == ("Agent repeats identical searches",
                                             "The agent re-runs the same search.")
    assert len(llm.requests) == 1
    # stopped: nothing sent, the evidence title until a later run names it
    assert namer(["search repeated"]) == NOT_SENT
    assert len(llm.requests) == 1
    unstarted = Service(svc.config, registry=CollectorRegistry())
    stage = next(s for s in unstarted.sinks if type(s).__name__ == "JudgeStage")
    assert stage.ask(namer.request(["x"])) is None  # type: ignore[attr-defined]
    assert len(llm.requests) == 1


def test_serve_names_an_issue_the_spent_budget_left_unnamed_once_the_hour_has_passed(
        tmp_path: Path, llm: FakeLLM) -> None:
    """A name call the spent hourly budget did not send is no name given: the issue is marked
    unnamed in the catalogue (as one naming_max_calls or the deadline left) and a later run
    with budget names it. It kept its evidence title for good: the namer answered None for
    'not sent' as for 'sent and failed'."""
    llm.route = _name_reply
    with _serve(tmp_path, llm, **{"judge.max_cost_usd_per_hour": 0.002,
                                  "issues.synthesis_max_calls": 0}) as svc:
        svc.store.put_many(_findings("loop"))
        assert _titles(svc) == ["Agent repeats identical searches (loop)"]
        svc.store.put_many(_findings("auth"))
        assert len([t for t in _titles(svc) if t.startswith("Agent repeats")]) == 1
        assert len(llm.requests) == 1  # over budget: nothing sent
        stage = next(s for s in svc.sinks if type(s).__name__ == "JudgeStage")
        client = stage.judge.client  # type: ignore[attr-defined]
        later = client.clock() + 3600.0  # the hour has passed: the budget is back
        client.clock = lambda: later
        assert _titles(svc) == ["Agent repeats identical searches (loop)",
                                "Agent repeats identical searches (tool_error)"]
        assert len(llm.requests) == 2
        assert len(_titles(svc)) == 2 and len(llm.requests) == 2  # named once


def test_a_name_sent_and_failed_is_not_asked_again(tmp_path: Path, llm: FakeLLM) -> None:
    """A name call that was sent and failed (a garbage reply) is a name given: the issue
    keeps its evidence title and no later run asks again (guide.md: a name is given once)."""
    llm.route = lambda body: completion("no JSON here")
    with _serve(tmp_path, llm, **{"issues.synthesis_max_calls": 0,
                                  "judge.max_retries": 0}) as svc:
        svc.store.put_many(_findings("loop"))
        first = _titles(svc)
        sent = len(llm.requests)
        assert sent >= 1 and _titles(svc) == first and len(llm.requests) == sent


def test_the_issues_command_names_and_merges_under_one_hourly_budget(
        tmp_path: Path, llm: FakeLLM) -> None:
    """``otel-eval issues`` names and merges with a client of its own, one hourly budget for
    the whole command: the merge call that spends it leaves no name call sent (the namer
    had a client, and so a budget, of its own beside the synthesizer's)."""
    import io
    import json

    from otel_eval.app.cli import build_parser, run_from_args
    from otel_eval.app.issues import cmd_issues

    loop = "Tool 'web_search' was called {n} times with identical arguments"
    auth = "Authentication failed: API key rejected with HTTP 401 for https://api.x.io/v{n}"
    lines = []
    for i in range(12):
        tid = f"{i:032x}"
        texts = [loop.format(n=i + 3), *([auth.format(n=i)] if i % 3 == 0 else [])]
        lines.append(json.dumps({
            "trace_id": tid, "agent": "shop", "findings": [],
            "steps": [{"index": k, "span_id": f"{tid}-s{k}", "node": "searcher"}
                      for k in range(len(texts))],
            "judge": {"judges": {"quality": {"critiques": [
                {"span_id": f"{tid}-s{k}", "score": 0.1, "text": t}
                for k, t in enumerate(texts)]}}}}))
    evals = tmp_path / "evals.jsonl"
    evals.write_text("\n".join(lines) + "\n")
    cfg = tmp_path / "otel-eval.yaml"
    cfg.write_text(json.dumps({"judge": {
        "model": "openai/gpt-4o-mini", "api_base": llm.api_base, "max_retries": 0,
        "max_cost_usd_per_hour": 0.0001}}))  # one call (1,000 + 100 tokens) spends it

    def reply(body: dict[str, Any]) -> Reply:
        if "numbered issues" in body["messages"][0]["content"]:
            return good({"groups": [], "assign": []})
        return good({"title": "Agent repeats searches", "description": "It repeats them."})
    llm.route = reply
    args = build_parser().parse_args(["issues", str(evals), "--config", str(cfg)])
    assert cmd_issues(args, run_from_args(args), io.StringIO()) == 0
    assert len(llm.requests) == 1
