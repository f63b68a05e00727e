"""Pure parts of the judge: limits, redaction, compaction, sampling, trials, config."""

from __future__ import annotations

import json

import pytest
from judge_fixtures import evaluation

from otel_eval.app.config import build
from otel_eval.base.configcheck import ConfigError
from otel_eval.base.results import Evaluation, Finding
from otel_eval.base.steps import Step, ToolCall, Trajectory
from otel_eval.evaluate.judge.compact import MessageLog, compact_json, parse_messages, trim
from otel_eval.evaluate.judge.config import (
    CompactionConfig,
    JudgeConfig,
    RedactionConfig,
    SamplingConfig,
)
from otel_eval.evaluate.judge.limits import CostBudget, RateLimiter
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.evaluate.judge.render import render
from otel_eval.evaluate.judge.sampling import sampled
from otel_eval.evaluate.judge.scoring import overall
from otel_eval.evaluate.judge.trials import Trial, pass_at_k, pass_hat_k, summarize


@pytest.mark.parametrize(("text", "expected"), [
    ("mail jane.doe+x@example.co.uk now", "mail [EMAIL] now"),
    ("call +1 415 555 0132 or (415) 555-0132.", "call [PHONE] or [PHONE]."),
    ("card 4111 1111 1111 1111 exp", "card [CREDIT_CARD] exp"),
    ("order 4111 1111 1111 1112 (not luhn)", "order 4111 1111 1111 1112 (not luhn)"),
    ("key sk-proj-abcdefghijklmnop1234 here", "key [API_KEY] here"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc", "Authorization: Bearer [TOKEN]"),
    ('{"api_key": "hunter2hunter2"}', '{"api_key": "[API_KEY]"}'),
    ("password=s3cretpass!", "password=[API_KEY]"),
    ("AKIAIOSFODNN7EXAMPLE", "[API_KEY]"),
    ("reservation ABC123 on 2024-05-01, 3 bags", "reservation ABC123 on 2024-05-01, 3 bags"),
])
def test_redaction(text: str, expected: str) -> None:
    assert Redactor(RedactionConfig()).redact(text) == expected


def test_redaction_extra_patterns_and_selection() -> None:
    r = Redactor(RedactionConfig(builtin=("email",), extra_patterns=(r"EMP-\d{5}",)))
    assert r.redact("EMP-12345 a@b.io 415 555 0132") == "[REDACTED] [EMAIL] 415 555 0132"
    assert r.count == 2
    with pytest.raises(ValueError, match="unknown redaction"):
        Redactor(RedactionConfig(builtin=("passport",)))


def test_trim_keeps_head_and_tail() -> None:
    text = "A" * 500 + "B" * 500
    out = trim(text, 200, 0.5)
    assert out.startswith("A" * 80) and out.endswith("B" * 80)
    assert "[... 840 chars trimmed ...]" in out and len(out) < 220
    assert trim("short", 200) == "short"



@pytest.mark.parametrize("calls", ["f(1)", 5, {"name": "f"}, True])
def test_a_message_whose_tool_calls_are_no_list_has_none(calls: object) -> None:
    """``tool_calls`` recorded as text, a number or one object raised TypeError (``"f(1)" +
    []``) and the judge could not render the run; such calls are not understood: none."""
    [m] = parse_messages(json.dumps([{"role": "assistant", "content": "ok",
                                      "tool_calls": calls}]))
    assert (m.role, m.content, m.tool_calls) == ("assistant", "ok", "")

def test_parse_messages_forms() -> None:
    msgs = parse_messages(json.dumps({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"function": {"name": "f", "arguments": '{"a": 1}'}}]}]}))
    assert [(m.role, m.content, m.tool_calls) for m in msgs] == [
        ("user", "hi\n[image]", ""), ("assistant", "", 'f({"a": 1})')]
    genai = parse_messages(json.dumps([
        {"role": "assistant", "parts": [{"type": "text", "content": "checking"}, {
            "type": "tool_call", "id": "1", "name": "get", "arguments": {"id": 7}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "1",
                                    "response": {"ok": True}}]}]))
    assert [(m.role, m.content, m.tool_calls) for m in genai] == [
        ("assistant", "checking", 'get({"id": 7})'), ("tool", '{"ok": true}', "")]
    assert [m.role for m in parse_messages("plain prompt")] == ["raw"]
    assert parse_messages("[not json") [0].content == "[not json"
    assert parse_messages(None) == []
    # a list of other objects (the AI SDK's ai.response.toolCalls: a reply of two calls) is
    # no list of messages: one raw value, which the render replaces by the calls read
    calls = json.dumps([{"toolCallId": f"c{i}", "toolName": "get_weather", "input": "{}"}
                        for i in range(2)])
    assert [(m.role, m.content) for m in parse_messages(calls)] == [("raw", calls)]


def test_message_log_shows_each_message_once() -> None:
    log = MessageLog()
    first = parse_messages('[{"role":"system","content":"S"},{"role":"user","content":"U"}]')
    assert len(log.new(first)) == 2
    log.mark(parse_messages('[{"role":"assistant","content":"A"}]'))
    again = parse_messages('[{"role":"system","content":"S"},{"role":"user","content":"U"},'
                           '{"role":"assistant","content":"A"},{"role":"user","content":"U2"}]')
    assert [m.content for m in log.new(again)] == ["U2"]


def test_rate_limiter_rpm_and_tpm() -> None:
    rl = RateLimiter(requests_per_min=2, tokens_per_min=0)
    assert rl.reserve(0.0, 0) == 0 and rl.reserve(10.0, 0) == 0
    assert rl.reserve(20.0, 0) == 40.0  # first request leaves the window at 60
    assert rl.reserve(60.0, 0) == 0
    tl = RateLimiter(requests_per_min=0, tokens_per_min=1000)
    assert tl.reserve(0.0, 600) == 0
    assert tl.reserve(1.0, 600) == 59.0
    assert tl.reserve(60.0, 600) == 0
    assert RateLimiter(0, 100).reserve(0.0, 5000) == 0  # one oversized call passes alone


def test_cost_budget_rolling_hour() -> None:
    b = CostBudget(1.0)
    b.add(0.0, 0.6)
    b.add(100.0, 0.5)
    assert b.exceeded(200.0) and not b.exceeded(3600.0)
    assert not CostBudget(0.0).exceeded(0.0)


def test_sampling_rate_per_agent_and_error_findings() -> None:
    ev = evaluation()
    assert sampled(ev, SamplingConfig())
    assert not sampled(ev, SamplingConfig(rate=1.0, rate_by_agent={"airline_agent": 0.0}))
    ev.findings.append(Finding("loop", "repeat", "error", "looped"))
    assert sampled(ev, SamplingConfig(rate=0.0))
    kept = 0
    for i in range(2000):
        e = evaluation(trace_id=f"{i:032x}")
        kept += sampled(e, SamplingConfig(rate=0.25))
    assert 400 < kept < 600


@pytest.mark.parametrize(("outcome", "process", "passed", "lucky"), [
    (1.0, 0.8, True, False), (1.0, 0.4, False, True), (0.0, 0.8, False, False),
    (None, 0.8, None, None),
])
def test_dual_threshold(outcome: float | None, process: float, passed: bool | None,
                        lucky: bool | None) -> None:
    judges = {"process": {"status": "ok", "scores": {"process": process}}}
    o = overall(judges, outcome, 0.5, 0.6)
    assert (o["passed"], o["lucky_pass"]) == (passed, lucky)


def test_trials_pass_at_k_pass_hat_k_lucky() -> None:
    def j(passed: bool | None, lucky: bool = False) -> dict[str, object]:
        return {"overall": {"passed": passed, "lucky_pass": lucky}}

    trials = [Trial("t1", "a", j(True)), Trial("t1", "b", j(False, lucky=True)),
              Trial("t1", "c", j(True)), Trial("t1", "d", j(None)),
              Trial("t2", "e", j(True)), Trial("t2", "f", j(True))]
    out = summarize(trials)
    assert out["t1"].to_json() == {"task_id": "t1", "trials": 3, "passes": 2, "k": 3,
                                   "pass_at_k": 1.0, "pass_hat_k": 0.0,
                                   "lucky_passes": ["b"], "undecided": 1}
    assert (out["t2"].pass_at_k, out["t2"].pass_hat_k) == (1.0, 1.0)
    k1 = summarize(trials, k=1)["t1"]
    assert k1.pass_at_k == pytest.approx(2 / 3) and k1.pass_hat_k == pytest.approx(2 / 3)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5) and pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)


def test_config_builds_from_yaml_data_and_rejects_bad_values() -> None:
    cfg = build(JudgeConfig, {"model": "openai/gpt-4o-mini", "enabled": ["step", "rubric"],
                              "sampling": {"rate": 0.5, "rate_by_agent": {"a": 1}},
                              "redaction": {"extra_patterns": ["x+"]}, "timeout_s": "30"})
    assert cfg.enabled == ("step", "rubric") and cfg.sampling.rate_by_agent == {"a": 1.0}
    assert cfg.timeout_s == 30.0
    with pytest.raises(ConfigError) as e:
        build(JudgeConfig, {"enabled": ["vibes"], "tau_process": 2, "nope": 1})
    text = str(e.value)
    assert "enabled[0]" in text and "nope: unknown key" in text
    with pytest.raises(ConfigError, match="tau_process"):
        build(JudgeConfig, {"tau_process": 2})


def test_render_shows_the_reply_read_never_the_response_object() -> None:
    """An output no reader understood as messages but whose text and calls were read (a
    LangChain ``generations`` object): the judge sees the reply, not the object."""
    raw = json.dumps({"generations": [[{"text": "", "message": {"lc": 1, "kwargs": {}}}]]})
    step = Step(0, "s0", None, "llm", "chat", output_text=raw, answer="Checking.",
                tool_calls=[ToolCall("get_weather", {"city": "P"}, "c0")])
    run = Evaluation(Trajectory("t", "otlp", "complete", [step]))
    text = render(run, CompactionConfig()).trajectory
    assert "generations" not in text
    assert 'assistant: Checking.\n  calls: get_weather({"city": "P"})' in text


def test_render_shows_the_calls_recorded_beside_a_reply_s_text() -> None:
    """The AI SDK records a reply's text (``ai.response.text``, empty for a call) apart from
    its calls: the judge sees the calls, not an empty raw output."""
    step = Step(0, "s0", None, "llm", "chat", output_text=" ", answer=None,
                tool_calls=[ToolCall("get_weather", {"city": "P"}, "c0")])
    text = render(Evaluation(Trajectory("t", "otlp", "complete", [step])),
                  CompactionConfig()).trajectory
    assert text.endswith(' output:\n  calls: get_weather({"city": "P"})'), text


@pytest.mark.parametrize(("message", "content", "calls"), [
    # the AI SDK (v5; v4's args and result)
    ({"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c1",
                                        "toolName": "get", "input": {"id": 7}}]},
     "", 'get({"id": 7})'),
    ({"role": "assistant", "content": [{"type": "text", "text": "checking"}, {
        "type": "tool-call", "toolCallId": "c1", "toolName": "get", "args": {"id": 7}}]},
     "checking", 'get({"id": 7})'),
    ({"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1",
                                   "output": {"type": "text", "value": "ok"}}]}, "ok", ""),
    ({"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1",
                                   "result": "ok"}]}, "ok", ""),
    # Bedrock Converse (Strands)
    ({"role": "assistant", "content": [{"toolUse": {"toolUseId": "c1", "name": "get",
                                                    "input": {"id": 7}}}]},
     "", 'get({"id": 7})'),
    ({"role": "tool", "content": [{"toolResult": {"toolUseId": "c1", "status": "success",
                                                  "content": [{"text": "ok"}]}}]}, "ok", ""),
    # Anthropic: a result as text blocks
    ({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                   "content": [{"type": "text", "text": "ok"}]}]}, "ok", ""),
])
def test_parse_messages_reads_calls_and_results_in_every_shape(
        message: dict, content: str, calls: str) -> None:
    (m,) = parse_messages(json.dumps([message]))
    assert (m.content, m.tool_calls) == (content, calls)


def test_parse_messages_of_non_message_lists_is_raw_text_not_a_crash() -> None:
    """LangChain's batches (``{"messages": [[...]]}``) and LlamaIndex's reprs crashed the
    judge's renderer (``AttributeError`` on a list / str item)."""
    for text in ('{"messages": [[{"lc": 1}]]}', '{"messages": ["ChatMessage(role=...)"]}'):
        assert [m.role for m in parse_messages(text)] == ["raw"]


def test_json_tool_results_are_shown_without_the_spaces_and_texts_as_they_are() -> None:
    assert compact_json('{"a": [1, 2], "b": "x, y: z"}') == '{"a":[1,2],"b":"x, y: z"}'
    for text in ("plain, text: kept", "{not json", "[1, 2"):
        assert compact_json(text) == text
