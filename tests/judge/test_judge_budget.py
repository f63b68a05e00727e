"""The judge's view of a run held to a share of the agent's own input (``compaction.view_share``,
``min_view_tokens``), filled by priority; and the reply's shape in the prompt only when the
schema does not travel as ``response_format``."""

from __future__ import annotations

import json
import re

import pytest
from judge_fixtures import config, evaluation

from otel_eval.base.configcheck import FieldErrors
from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.judge import Judge
from otel_eval.evaluate.judge.config import CompactionConfig
from otel_eval.evaluate.judge.prompting import REPLY_SHAPE
from otel_eval.evaluate.judge.render import CHARS_PER_TOKEN, render, view_budget_chars

REPLY = "Here is what I found about your booking. " * 12  # ~500 chars
RESULT = json.dumps({"reservation": "ABC123", "fare": "Y-FLEX", "notes": "row 12, aisle; " * 140})
ASK = "Please move my flight to Friday morning, and keep the aisle seat."


def _run(turns: int, tokens_per_call: int) -> Evaluation:
    """A chat of ``turns`` user turns, each: an LLM call asking a tool, the tool, a reply."""
    steps: list[Step] = []
    history: list[dict[str, object]] = [{"role": "user", "content": "Task: rebook ABC123."}]
    for n in range(turns):
        i = len(steps)
        history.append({"role": "user", "content": f"{ASK} (turn {n})"})
        call = {"id": f"c{n}", "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"id": f"ABC{n}"})}}
        steps.append(Step(i, f"s{i}", None, "llm", "chat", input_tokens=tokens_per_call,
                          input_text=json.dumps(history),
                          output_text=json.dumps([{"role": "assistant", "content": None,
                                                   "tool_calls": [call]}])))
        steps.append(Step(i + 1, f"s{i + 1}", None, "tool", "lookup", tool_name="lookup",
                          arguments={"id": f"ABC{n}"}, result=RESULT.replace("ABC123",
                                                                             f"ABC{n}")))
        steps.append(Step(i + 2, f"s{i + 2}", None, "llm", "chat",
                          input_tokens=tokens_per_call, input_text=json.dumps(history),
                          output_text=json.dumps([{"role": "assistant",
                                                   "content": f"{REPLY} ({n})"}])))
    t = Trajectory(trace_id="1" * 32, source="test", status="complete", steps=steps,
                   input="Task: rebook ABC123.", output=f"{REPLY} ({turns - 1})")
    return Evaluation(t, [], None)


def _view(rendered: object) -> int:
    return sum(len(getattr(rendered, k)) for k in ("task", "trajectory", "final_output",
                                                   "findings"))


def test_the_view_is_a_share_of_the_agents_input_and_keeps_every_step_and_call() -> None:
    ev = _run(turns=8, tokens_per_call=20_000)  # 16 calls, 320k input tokens
    limits = CompactionConfig(view_share=0.005)
    budget = view_budget_chars(ev.trajectory, limits)
    assert budget == int(0.005 * 320_000 * CHARS_PER_TOKEN)
    unbounded = render(ev, CompactionConfig(view_share=0))
    rendered = render(ev, limits)
    assert _view(unbounded) > budget >= _view(rendered)
    # every step id the judge must cite, every call with its arguments, every user turn whole
    for step in ev.trajectory.steps:
        assert f"[step {step.index}] " in rendered.trajectory
    for n in range(8):
        assert f'lookup({{"id": "ABC{n}"}})' in rendered.trajectory
        assert f"{ASK} (turn {n})" in rendered.trajectory
    # replies and tool results cut to head and tail, each marked as cut
    assert rendered.trajectory.count("chars trimmed ...]") == 16
    assert rendered.trajectory.count("Y-FLEX") == 8  # a result's head


def test_a_larger_run_gets_a_larger_view_and_a_small_one_the_floor() -> None:
    limits = CompactionConfig(view_share=0.01, min_view_tokens=500)
    small, large = _run(2, 1_000), _run(2, 400_000)
    assert view_budget_chars(small.trajectory, limits) == int(500 * CHARS_PER_TOKEN)
    assert _view(render(small, limits)) <= 500 * CHARS_PER_TOKEN < _view(render(large, limits))


def _tokens(rendered: object) -> float:
    """The view's tokens: a wide character (Chinese) about one, other text CHARS_PER_TOKEN
    characters a token."""
    text = "".join(getattr(rendered, k) for k in ("task", "trajectory", "final_output",
                                                   "findings"))
    wide = len(re.findall("[\u3000-\u30ff\u4e00-\u9fff\uff00-\uff60]", text))
    return wide + (len(text) - wide) / CHARS_PER_TOKEN


def test_a_view_in_chinese_is_held_to_the_same_share_of_tokens() -> None:
    """A Chinese character is about a token, not 1/3.5 of one: the view of a run in Chinese
    is held to ``view_share`` of the agent's input tokens, as the same run in English."""
    english = _run(turns=8, tokens_per_call=20_000)
    chinese = _run(turns=8, tokens_per_call=20_000)
    said = "这是我查到的关于您预订的信息。" * 12
    seat = "第十二排，靠过道；"  # noqa: RUF001
    for step in chinese.trajectory.steps:
        for field in ("output_text", "result"):
            text = getattr(step, field)
            if text:
                setattr(step, field, text.replace(REPLY.strip(), said)
                        .replace("row 12, aisle; ", seat))
    limits = CompactionConfig(view_share=0.005)
    budget_tokens = 0.005 * 320_000
    assert _tokens(render(english, limits)) <= budget_tokens * 1.05
    assert _tokens(render(chinese, limits)) <= budget_tokens * 1.05
    assert _tokens(render(chinese, CompactionConfig(view_share=0))) > 2 * budget_tokens


def test_short_texts_stay_whole_when_long_ones_are_cut() -> None:
    # one long tool result among short ones: the long one is cut, nothing else
    ev = _run(turns=2, tokens_per_call=1_000)
    ev.trajectory.steps[1].result = "A" * 20_000
    text = render(ev, CompactionConfig(view_share=0.5, min_view_tokens=0,
                                       max_tool_output_chars=100_000)).trajectory
    assert text.count("chars trimmed ...]") == 1
    shown = json.dumps(json.loads(RESULT.replace("ABC123", "ABC1")), separators=(",", ":"))
    assert REPLY.strip() in text and shown in text


def test_no_budget_leaves_the_per_text_limits_alone() -> None:
    ev = _run(turns=8, tokens_per_call=20_000)
    text = render(ev, CompactionConfig(view_share=0)).trajectory
    assert "chars trimmed" in text  # the 1200-char limit on each tool result
    assert REPLY.strip() in text


def test_a_repeated_long_result_names_the_step_that_showed_it() -> None:
    ev = _run(turns=3, tokens_per_call=20_000)
    for step in ev.trajectory.steps:
        if step.kind == "tool":
            step.result = RESULT
    text = render(ev, CompactionConfig(view_share=0)).trajectory
    assert text.count("Y-FLEX") == 1
    assert re.findall(r"result: \(the same as step (\d+)\)", text) == ["1", "1"]


def test_an_error_that_is_the_result_is_shown_once() -> None:
    ev = _run(turns=1, tokens_per_call=1_000)
    tool = ev.trajectory.steps[1]
    tool.result = tool.error = "Error: not enough seats on flight HAT229"
    tool.status = "error"
    text = render(ev, CompactionConfig()).trajectory
    assert text.count("not enough seats") == 1


@pytest.mark.parametrize(("changes", "shape"), [
    ({}, False),  # json_schema to a model that takes one: the schema is not sent twice
    ({"response_format": "json_object"}, True),
    ({"response_format": "none"}, True),
    ({"model": "ollama/llama3.1"}, True),  # litellm does not know it to read a schema
])
def test_the_reply_shape_is_in_the_prompt_only_without_a_schema(
        changes: dict[str, str], shape: bool) -> None:
    (req,) = Judge(config(**changes)).requests(evaluation())
    user = req.messages[-1]["content"]
    assert (REPLY_SHAPE in user) is shape
    assert ('"steps":[{"step":int' in user) is shape
    assert user.rstrip().endswith("for LLM steps 1, 3, 5.") is not shape


@pytest.mark.parametrize("changes", [{"view_share": 1.5}, {"view_share": -0.1},
                                     {"min_view_tokens": -1}])
def test_the_budget_is_checked_when_configured(changes: dict[str, float]) -> None:
    with pytest.raises(FieldErrors, match=next(iter(changes))):
        CompactionConfig(**changes)
