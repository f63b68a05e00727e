"""Issue synthesis by the judge model (Agentic CLEAR's step), through litellm against the
scripted loopback server: a good reply merges issues; a malformed one is repaired once or
leaves the clustering as it was."""

from __future__ import annotations

import json
from typing import Any

from judge_fake_llm import FakeLLM, completion, good
from judge_fixtures import config

from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.synthesizer import JudgeSynthesizer, judge_synthesizer
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.synthesis import REPLY_SCHEMA, Draft, check_reply
from otel_eval.outputs.issues.tracker import issues_offline

LOOP = "Tool 'web_search' was called {n} times with identical arguments"
AUTH = "Authentication failed: API key rejected with HTTP 401 for https://api.x.io/v{n}"


def window(n: int) -> list[dict[str, Any]]:
    """``n`` evaluations: each loops in the searcher, every third also fails auth there."""
    out = []
    for i in range(n):
        tid = f"{i:032x}"
        texts = [LOOP.format(n=i + 3), *([AUTH.format(n=i)] if i % 3 == 0 else [])]
        out.append({"trace_id": tid, "agent": "shop", "findings": [],
                    "steps": [{"index": k, "span_id": f"{tid}-s{k}", "node": "searcher"}
                              for k in range(len(texts))],
                    "judge": {"judges": {"quality": {"critiques": [
                        {"span_id": f"{tid}-s{k}", "score": 0.1, "text": t}
                        for k, t in enumerate(texts)]}}}})
    return out


MERGED = {"groups": [{"issues": [1, 2], "title": "Searcher tool calls fail",
                      "description": "Searches repeat or are refused."}]}


def test_good_reply_merges_issues_from_redacted_drafts(llm: FakeLLM) -> None:
    llm.replies.append(good(MERGED))
    synth = JudgeSynthesizer(config(llm.api_base), REPLY_SCHEMA, check_reply)
    result = issues_offline(window(12), IssuesConfig(), now=1.0, synthesizer=synth)
    assert len(llm.requests) == 1
    sent = llm.requests[0]["messages"][0]["content"]
    assert "1. " in sent and "2. " in sent and "(12 critiques)" in sent
    assert [i.title for i in result.issues if i.node == "searcher"] == [
        "Searcher tool calls fail"]
    drafts = [Draft("mail bob@example.com", ("write to bob@example.com",), 2),
              Draft("b", ("c",), 2)]
    llm.replies.append(good({"groups": [], "assign": [{"critique": 1, "issue": 2}]}))
    assert synth(drafts, ["mail eve@example.com: quota hit"]) == {
        "groups": [], "assign": [{"critique": 1, "issue": 2}]}
    sent = llm.requests[1]["messages"][0]["content"]
    assert "example.com" not in sent and "1. mail" in sent and "quota hit" in sent


def test_malformed_reply_keeps_the_clustering(llm: FakeLLM) -> None:
    llm.replies.extend([completion("no JSON here"), completion("{\"groups\": 3}")])
    synth = JudgeSynthesizer(config(llm.api_base, max_retries=0), REPLY_SCHEMA, check_reply)
    result = issues_offline(window(12), IssuesConfig(), now=1.0, synthesizer=synth)
    plain = issues_offline(window(12), IssuesConfig(), now=1.0)
    assert len(llm.requests) == 2  # the reply, then one repair round trip
    assert [(i.issue_id, i.title) for i in result.issues] == [
        (i.issue_id, i.title) for i in plain.issues]


def test_out_of_range_numbers_are_repaired_with_the_reason(llm: FakeLLM) -> None:
    wrong = {"groups": [{"issues": [1, 7], "title": "Searcher fails",
                         "description": "x y z"}]}
    llm.replies.extend([good(wrong), good(MERGED)])
    synth = JudgeSynthesizer(config(llm.api_base, max_retries=0), REPLY_SCHEMA, check_reply)
    result = issues_offline(window(12), IssuesConfig(), now=1.0, synthesizer=synth)
    repair = json.dumps(llm.requests[1]["messages"])
    assert "numbered 1 to 2" in repair
    assert [i.title for i in result.issues if i.node == "searcher"] == [
        "Searcher tool calls fail"]


def test_no_model_no_synthesizer() -> None:
    assert judge_synthesizer(JudgeConfig(), REPLY_SCHEMA, check_reply) is None


def test_a_critique_is_redacted_before_it_is_cut() -> None:
    """A key straddling the cut: cut first, its head would be too short for its pattern."""
    synth = JudgeSynthesizer(JudgeConfig(), REPLY_SCHEMA, check_reply)
    text = "x" * 280 + " key sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX"
    sent = synth.messages([Draft("t", (text,), 2), Draft("u", ("v",), 2)], [])[0]["content"]
    assert "sk-proj" not in sent and "key [API_KEY]" in sent
